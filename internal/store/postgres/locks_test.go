package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/store"
)

// An open finish transaction holds its jobs' limit keys until it commits,
// fsync included. On an unpaced key that lock must not stop another
// node's lease (before, a finish of 64 jobs held all their keys FOR NO KEY
// UPDATE and a lease beside it skipped every group: 19% of leases came
// back empty), while a finish whose outcome writes the key (a refusal)
// still excludes leases, and a reconfiguration still waits for both, so
// that the in-flight count it takes when the key starts being paced is
// exact.
func TestUnpacedKeyLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := twoNodes(t)
	insertN(t, a, 4, 1, "u")
	first := leaseN(t, a, t0, 1)
	// hold runs the key lock of a finish of first[0] (endAttemptsSQL's,
	// without ending the job, so that two can hold it at once) in a
	// transaction left open, as node a's finish would hold it while it
	// commits. The returned func ends it (so does the test's cleanup,
	// before the pools close).
	hold := func(c context.Context, disturbing bool) (func(), error) {
		tx, err := a.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		end := func() { _ = tx.Rollback(ctx) }
		t.Cleanup(end)
		excl := []string{}
		if disturbing {
			excl = []string{first[0].ID}
		}
		keys, err := collectKeys(tx.Query(c, finishKeysSQL, []string{first[0].ID}, excl))
		if err == nil && keys["u"] == nil {
			t.Fatalf("finish key lock returned %v", keys)
		}
		return end, err
	}

	release, err := hold(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Lease(ctx, store.LeaseParams{Now: t0, Max: 1, LeaseFor: time.Minute})
	if err != nil || len(got) != 1 {
		t.Fatalf("beside a finish of a plain outcome on an unpaced key, node b leased %d (%v), want 1", len(got), err)
	}
	// A second plain finish does not wait for the first either.
	release2, err := hold(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	release2()
	// A reconfiguration waits for the finish.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = b.UpsertLimit(short, admission.Config{Name: "u", Concurrency: 5}, t0)
	cancel()
	if err == nil {
		t.Fatal("a reconfiguration did not wait for a finish holding the unpaced key")
	}
	release()

	// A finish whose outcome writes the key (a refusal's pause) locks it
	// exclusively: a second such finish waits for it. A lease beside it
	// still reads the key (it writes nothing there; the pause holds from
	// the finish's commit on, as it would had the lease come first).
	release, err = hold(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = hold(short, true)
	cancel()
	if err == nil {
		t.Fatal("two finishes writing one unpaced key did not exclude each other")
	}
	got, err = b.Lease(ctx, store.LeaseParams{Now: t0, Max: 1, LeaseFor: time.Minute})
	if err != nil || len(got) != 1 {
		t.Fatalf("beside a finish whose outcome writes the key, node b leased %d (%v), want 1", len(got), err)
	}
	release()

	st, err := b.UpsertLimit(ctx, admission.Config{Name: "u", Concurrency: 5}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st.InFlight != 3 {
		t.Fatalf("capping the key with 3 running jobs: in flight %d, want 3", st.InFlight)
	}
	if k, err := a.GetLimit(ctx, "u"); err != nil || k.InFlight != 3 {
		t.Fatalf("capped key: in flight %d (%v), want 3", k.InFlight, err)
	}
}

// finishKeysSQL is endAttemptsSQL's key lock on its own: the limit keys of
// the jobs $1, those of the jobs $2 exclusively, for jobs it does not end.
var finishKeysSQL = `WITH ended AS (SELECT limit_keys, id = ANY($2) AS disturbs FROM jobs WHERE id = ANY($1)),
	` + endedKeysCTEs + `
	` + lockEndedKeysSQL
