package httpapi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/postgres"
	"github.com/ratelane/ratelane/internal/store/postgres/pgtest"
	"github.com/ratelane/ratelane/internal/store/sqlite/sqlitetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// waitReady polls /readyz (cached for a second) until it answers status,
// and returns that answer.
func waitReady(t *testing.T, e *env, status int) response {
	t.Helper()
	var r response
	testkit.Eventually(t, testkit.Timeout, fmt.Sprintf("/readyz to answer %d", status), func() error {
		if r = e.do("GET", "/readyz", "", nil); r.status != status {
			return fmt.Errorf("it answers %d: %s", r.status, r.body)
		}
		return nil
	})
	return r
}

// wantNotReady checks a 503 problem+json whose detail and regions name the
// broken region and only it.
func wantNotReady(t *testing.T, r response, broken, healthy string) {
	t.Helper()
	p := r.wantProblem(t, 503, "unavailable")
	if !strings.Contains(p.Detail, "region "+broken) {
		t.Errorf("detail does not name region %s: %s", broken, p.Detail)
	}
	var body readyProblem
	r.json(t, &body)
	if body.Regions[broken] == "ok" || (healthy != "" && body.Regions[healthy] != "ok") {
		t.Errorf("regions %v: want %s broken, %s ok", body.Regions, broken, healthy)
	}
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After on a 503")
	}
}

// TestReadyzSQLiteBrokenUnderServer overwrites the header of a region's
// SQLite file while the server runs: /readyz turns 503 for that region.
func TestReadyzSQLiteBrokenUnderServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	waitReady(t, e, 200).want(t, 200)
	path := e.stores["us"].(interface{ Path() string }).Path()
	sqlitetest.DamageHeader(t, path)
	wantNotReady(t, waitReady(t, e, 503), "us", "eu")
}

// pgStore returns a migrated store of region us on a fresh schema, and a
// function that runs SQL on the database as the test's role.
func pgStore(t *testing.T) (*postgres.Store, func(sql string)) {
	t.Helper()
	url, schema := testkit.PostgresSchema(t, "rl_ready_")
	exec := func(q string) {
		if err := testkit.PostgresExec(url, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	st := pgtest.Open(t, url, schema, 2)
	return st, func(q string) { exec(strings.ReplaceAll(q, "$schema", pgx.Identifier{schema}.Sanitize())) }
}

// TestReadyzPostgresUnreadable makes a PostgreSQL region's schema
// unreadable under a running server, by dropping its jobs table, by
// dropping the schema, and by closing the store's pool: each turns /readyz
// 503 for that region.
func TestReadyzPostgresUnreadable(t *testing.T) {
	t.Parallel()
	for name, breakIt := range map[string]func(st *postgres.Store, exec func(string)){
		"table dropped":  func(_ *postgres.Store, exec func(string)) { exec(`DROP TABLE $schema.jobs CASCADE`) },
		"schema dropped": func(_ *postgres.Store, exec func(string)) { exec(`DROP SCHEMA $schema CASCADE`) },
		"pool closed":    func(st *postgres.Store, _ func(string)) { st.Close() },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, exec := pgStore(t)
			e := newEnv(t, func(c *Config) { c.Regions = map[string]store.Store{"us": st, "eu": c.Regions["eu"]} })
			waitReady(t, e, 200).want(t, 200)
			breakIt(st, exec)
			wantNotReady(t, waitReady(t, e, 503), "us", "eu")
		})
	}
}

// countingStore counts readiness probes.
type countingStore struct {
	store.Store
	probes atomic.Int64
}

func (c *countingStore) Ready(ctx context.Context) error {
	c.probes.Add(1)
	return c.Store.(readier).Ready(ctx)
}

// TestReadyzIsCached sends 200 concurrent requests: the stores are probed
// about once a second, not once per request.
func TestReadyzIsCached(t *testing.T) {
	t.Parallel()
	var us *countingStore
	e := newEnv(t, func(c *Config) {
		us = &countingStore{Store: c.Regions["us"]}
		c.Regions = map[string]store.Store{"us": us, "eu": c.Regions["eu"]}
	})
	start := time.Now()
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				e.do("GET", "/readyz", "", nil).want(t, 200)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	most := int64(elapsed/readyCacheFor) + 1
	if n := us.probes.Load(); n < 1 || n > most {
		t.Fatalf("%d probes for 200 requests in %v; want 1 to %d", n, elapsed, most)
	}
}

// TestReadyProbeOpensFreshConnection is the SQLite probe's contract that
// /readyz relies on: Ready reads from disk, so removing the file is seen.
func TestReadyProbeOpensFreshConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path := e.stores["eu"].(interface{ Path() string }).Path()
	if err := os.Rename(path, filepath.Join(filepath.Dir(path), "moved.db")); err != nil {
		t.Fatal(err)
	}
	wantNotReady(t, waitReady(t, e, 503), "eu", "us")
}
