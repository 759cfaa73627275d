package ratelane_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
)

// problem is what the tests read of an API's problem answer
// (application/problem+json): its type URI, detail and invalid fields.
type problem struct {
	Type   string `json:"type"`
	Detail string `json:"detail"`
	Errors []struct {
		Field string `json:"field"`
	} `json:"errors"`
}

// leaseAnswer is what the tests read of POST /v1/leases: each leased job's
// id and lease token.
type leaseAnswer struct {
	Jobs []struct {
		ID         string `json:"id"`
		LeaseToken string `json:"lease_token"`
	} `json:"jobs"`
}

// waitForJob waits until job id of region us satisfies cond and returns it;
// a timeout names what and the job's state and history as last read. The
// root package's tests wait for a job this way rather than polling by hand.
func waitForJob(t testing.TB, c *ratelane.Client, id string, timeout time.Duration, what string, cond func(*ratelane.Job) bool) *ratelane.Job {
	t.Helper()
	var j *ratelane.Job
	testkit.Eventually(t, timeout, what, func() error {
		var err error
		if j, err = c.Job(context.Background(), "us", id); err != nil {
			t.Fatal(err)
		}
		if !cond(j) {
			return fmt.Errorf("job %s is %s/%s, history %+v", id, j.State, j.Reason, j.History)
		}
		return nil
	})
	return j
}

// serveAPI starts a client on cfg and serves its HTTP API (admin key
// admin, no request rate limit) on loopback; t.Cleanup stops both. It
// returns the client and the server's URL.
func serveAPI(t testing.TB, cfg ratelane.Config, admin string) (*ratelane.Client, string) {
	t.Helper()
	c := startClient(t, cfg)
	api, err := c.NewAPI(context.Background(), ratelane.APIConfig{AdminKey: admin, RequestRate: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler)
	t.Cleanup(func() { // before startClient's: the server goes before the client stops
		srv.Close()
		api.Close()
	})
	return c, srv.URL
}

// startClient makes a client on cfg and starts it; t.Cleanup stops it.
// The root package's tests start a client this way unless the test
// stops it itself to check what Stop leaves behind.
func startClient(t testing.TB, cfg ratelane.Config) *ratelane.Client {
	t.Helper()
	ctx := context.Background()
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	return c
}

// onEachDriver runs test once on a SQLite region "us" in a temporary
// directory and once on a PostgreSQL region "us" in a schema of its own
// (prefix names it; skipped unless RATELANE_TEST_POSTGRES_URL is set),
// each in its own subtest named for the driver. The root package's tests
// that must hold on both drivers run this way.
func onEachDriver(t *testing.T, prefix string, test func(t *testing.T, region ratelane.Region)) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			region := ratelane.Region{Name: "us", SQLitePath: filepath.Join(t.TempDir(), "us.db")}
			if driver == "postgres" {
				url, schema := testkit.PostgresSchema(t, prefix)
				region = ratelane.Region{Name: "us", PostgresURL: url, PostgresSchema: schema}
			}
			test(t, region)
		})
	}
}

// callJSON sends a request to base+path with body as testkit.Call sends it (none when
// nil), key as the bearer token (none when empty) and the extra headers
// hdr, and returns the response with its body read whole. The root
// package's HTTP tests send requests this way.
func callJSON(t testing.TB, method, base, path, key string, body any, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	var pairs []string
	for k, v := range hdr {
		pairs = append(pairs, k, v)
	}
	return testkit.Call(t, nil, method, base+path, key, body, pairs...)
}
