package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func countObjects(t *testing.T, s *Store, kind string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM objects WHERE kind = $1`, kind).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

const putObjectSQL = `INSERT INTO objects (kind, id, body, updated_at) VALUES ($1, $2, '\x00', 0)`

// TestPipeTxCommitsQueuedWrites: writes queued with Exec and never followed
// by a read go out with COMMIT, in order.
func TestPipeTxCommitsQueuedWrites(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	err := s.inPipe(ctx, false, func(p *pipeTx) error {
		p.Exec(ctx, putObjectSQL, "pipe", "a")
		p.Exec(ctx, `UPDATE objects SET id = 'b' WHERE kind = 'pipe' AND id = 'a'`)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	if err := s.pool.QueryRow(ctx, `SELECT id FROM objects WHERE kind = 'pipe'`).Scan(&id); err != nil || id != "b" {
		t.Fatalf("after commit: id %q, %v; want the two writes applied in order", id, err)
	}
}

// TestPipeTxDeferredErrorRollsBack: a queued write that fails is reported by
// the next read, and nothing of the transaction is committed, including
// writes queued before it; the pool's connections stay usable.
func TestPipeTxDeferredErrorRollsBack(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	var readErr error
	err := s.inPipe(ctx, false, func(p *pipeTx) error {
		p.Exec(ctx, putObjectSQL, "pipe", "a")
		p.Exec(ctx, putObjectSQL, "pipe", "a") // duplicate key
		var n int
		readErr = p.QueryRow(ctx, `SELECT count(*) FROM objects`).Scan(&n)
		return readErr
	})
	var pe *pgconn.PgError
	if !errors.As(readErr, &pe) || pe.Code != "23505" || !errors.Is(err, readErr) {
		t.Fatalf("read after a failed queued write: %v (transaction: %v), want the unique violation", readErr, err)
	}
	if n := countObjects(t, s, "pipe"); n != 0 {
		t.Fatalf("%d objects committed by a failed transaction", n)
	}
	// Commit-time failure: the failed write is the last thing queued.
	err = s.inPipe(ctx, false, func(p *pipeTx) error {
		p.Exec(ctx, putObjectSQL, "pipe", "c")
		p.Exec(ctx, `UPDATE objects SET body = NULL WHERE kind = 'pipe'`) // NOT NULL
		return nil
	})
	if !errors.As(err, &pe) || pe.Code != "23502" {
		t.Fatalf("commit after a failed queued write: %v, want the not-null violation", err)
	}
	if n := countObjects(t, s, "pipe"); n != 0 {
		t.Fatalf("%d objects committed by a failed transaction", n)
	}
	// A failure of fn after statements went out rolls back too.
	boom := errors.New("boom")
	err = s.inPipe(ctx, false, func(p *pipeTx) error {
		p.Exec(ctx, putObjectSQL, "pipe", "d")
		rows, err := p.Query(ctx, `SELECT id FROM objects WHERE kind = 'pipe'`)
		if err != nil {
			return err
		}
		for rows.Next() {
		}
		if rows.Err() != nil {
			return rows.Err()
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("fn's error: %v", err)
	}
	if n := countObjects(t, s, "pipe"); n != 0 {
		t.Fatalf("%d objects committed by a failed transaction", n)
	}
	for range 2 * int(s.pool.Config().MaxConns) { // every connection is clean
		if err := s.inPipe(ctx, false, func(p *pipeTx) error { p.Exec(ctx, `SELECT 1`); return nil }); err != nil {
			t.Fatalf("a later transaction: %v", err)
		}
	}
}

// TestPipeTxSettingsAreLocal: a pipeTx's settings (set) and an async
// pipeTx's synchronous_commit off, alone or together, hold inside its
// transaction and are gone in the connection's next one (on a pool of
// one), with no statement to restore them.
func TestPipeTxSettingsAreLocal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openConfig(t, Config{Schema: newSchema(t), Region: "us", MaxConns: 1})
	show := func(async bool, settings *txSettings) (mode, seq, sync string) {
		if err := s.inPipe(ctx, async, func(p *pipeTx) error {
			if settings != nil {
				p.set(settings)
			}
			return p.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan'), current_setting('synchronous_commit')`).Scan(&mode, &seq, &sync)
		}); err != nil {
			t.Fatal(err)
		}
		return mode, seq, sync
	}
	mode0, seq0, sync0 := show(false, nil)
	for _, async := range []bool{false, true} {
		for _, settings := range []*txSettings{nil, leaseSettings} {
			mode, seq, sync := show(async, settings)
			if (sync == "off") != (async || sync0 == "off") ||
				(settings != nil && (mode != "force_generic_plan" || seq != "off")) {
				t.Errorf("async %v, settings %v: inside, plan_cache_mode %s, enable_seqscan %s, synchronous_commit %s", async, settings != nil, mode, seq, sync)
			}
			if mode, seq, sync := show(false, nil); mode != mode0 || seq != seq0 || sync != sync0 {
				t.Errorf("async %v, settings %v: after, plan_cache_mode %s, enable_seqscan %s, synchronous_commit %s; want %s, %s, %s",
					async, settings != nil, mode, seq, sync, mode0, seq0, sync0)
			}
		}
	}
}

// TestPipeTxQueryCommit: COMMIT sent with the last query commits what was
// queued and the query's own writes; when the query fails, the server skips
// the COMMIT and nothing is kept.
func TestPipeTxQueryCommit(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	// put queues a put of object queued, then inserts object inserted in
	// the query that carries the COMMIT.
	put := func(queued, inserted string) error {
		return s.inPipe(ctx, false, func(p *pipeTx) error {
			p.Exec(ctx, putObjectSQL, "pipe", queued)
			rows, err := p.QueryCommit(ctx, `INSERT INTO objects (kind, id, body, updated_at) VALUES ('pipe', $1, '\x00', 0) RETURNING id`, inserted)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			return rows.Err()
		})
	}
	if err := put("a", "b"); err != nil {
		t.Fatal(err)
	}
	if n := countObjects(t, s, "pipe"); n != 2 {
		t.Fatalf("%d objects after QueryCommit, want 2", n)
	}
	err := put("c", "a")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		t.Fatalf("failing QueryCommit: %v, want the unique violation", err)
	}
	if n := countObjects(t, s, "pipe"); n != 2 {
		t.Fatalf("%d objects after a failed QueryCommit, want still 2", n)
	}
}
