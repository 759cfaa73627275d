package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestFinishWithAndWithoutLeaseFacts: a finish whose lease MarkLeased
// remembered (Store.leases) and one whose entry is gone (a reopened store,
// an emptied map) end the attempt the same way: the job is validated with
// its record, the key's concurrency slot is given back (the keys, group
// and cost came from the map or from RETURNING), and a second finish of
// the same lease conflicts on either path.
func TestFinishWithAndWithoutLeaseFacts(t *testing.T) {
	t.Parallel()
	for _, forget := range []bool{false, true} {
		name := "remembered"
		if forget {
			name = "forgotten"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := OpenTest(t, Config{Synchronous: SyncNormal})
			if _, err := s.UpsertLimit(ctx, admission.Config{Name: "k", Concurrency: 1}, storetest.T0); err != nil {
				t.Fatal(err)
			}
			a, b := storetest.NewJob("acme", job.LaneBatch, "k"), storetest.NewJob("acme", job.LaneBatch, "k")
			if _, err := s.Insert(ctx, []*job.Job{a, b}, storetest.Unpaced); err != nil {
				t.Fatal(err)
			}
			now := storetest.T0
			got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 2, LeaseFor: time.Minute})
			if err != nil || len(got) != 1 {
				t.Fatalf("lease with a cap of 1: %d jobs, %v; want 1", len(got), err)
			}
			first := got[0]
			var remembered bool
			if err := s.write(ctx, func(*writeTx) error {
				_, remembered = s.leases[first.ID]
				if forget {
					clear(s.leases)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !remembered {
				t.Fatal("MarkLeased did not remember the lease's keys, group and cost")
			}
			tr := successes([]*job.Job{first}, job.StateValidated, now)[0]
			errs, err := s.Finish(ctx, []store.Transition{tr})
			if err != nil || errs[0] != nil {
				t.Fatalf("finish: %v, %v", errs, err)
			}
			errs, err = s.Finish(ctx, []store.Transition{tr})
			if err != nil || !errors.Is(errs[0], store.ErrConflict) {
				t.Fatalf("second finish of the same lease: %v, %v; want ErrConflict", errs, err)
			}
			j, err := s.Get(ctx, first.ID)
			if err != nil {
				t.Fatal(err)
			}
			if j.State != job.StateValidated || len(j.History) != 1 || j.History[0].Outcome != job.ClassSuccess {
				t.Fatalf("finished job: state %s, history %+v; want validated with one success", j.State, j.History)
			}
			got, err = s.Lease(ctx, store.LeaseParams{Now: now.Add(time.Second), Max: 2, LeaseFor: time.Minute})
			if err != nil || len(got) != 1 || got[0].ID == first.ID {
				t.Fatalf("lease after the finish: %d jobs, %v; want the other job (the slot given back)", len(got), err)
			}
		})
	}
}

// TestPlainFinishByRowid: a success's finish (endAttemptPlainSQL) finds
// its row by the rowid the lease read, as EXPLAIN QUERY PLAN reports it,
// and when rowids no longer name the jobs they named at the lease (here
// two leased jobs swap rowids and a third moves, as a VACUUM may renumber
// them), each finish still ends its own job, once, by the id guard.
func TestPlainFinishByRowid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	plan := queryPlan(t, s, endAttemptPlainSQLs[job.StateValidated], 1, 1, "{}", 1, "x", "t", 1)
	if !strings.Contains(plan, "USING INTEGER PRIMARY KEY (rowid=?)") {
		t.Fatalf("plain finish plan %q, want a search by rowid", plan)
	}
	now, got := storetest.T0, leasedOnK(t, s, 3)
	a, b, c := got[0].ID, got[1].ID, got[2].ID
	var ra, rb int64
	if err := s.write(ctx, func(tx *writeTx) error {
		ra, rb = s.leases[a].rowid, s.leases[b].rowid
		for _, id := range []string{a, b, c} {
			var rowid int64
			if err := tx.QueryRow(`SELECT rowid FROM jobs WHERE id = ?`, id).Scan(&rowid); err != nil {
				return err
			}
			if f, ok := s.leases[id]; !ok || f.rowid != rowid {
				t.Errorf("lease of %s remembered rowid %d (%v), want %d", id, f.rowid, ok, rowid)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Swap a's and b's rowids (through -1) and move c to a rowid no row had.
	if err := s.write(ctx, func(tx *writeTx) error {
		for _, st := range []struct {
			id    string
			rowid int64
		}{{a, -1}, {b, ra}, {a, rb}, {c, 1 << 40}} {
			if _, err := tx.Exec(`UPDATE jobs SET rowid = ? WHERE id = ?`, st.rowid, st.id); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ts := successes(got, job.StatePublished, now)
	errs, err := s.Finish(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Errorf("finish of %s: %v", ts[i].ID, e)
		}
	}
	for _, j := range got {
		stored, err := s.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if stored.State != job.StatePublished || len(stored.History) != 1 {
			t.Errorf("job %s after finish: state %s, %d records; want published with one", j.ID, stored.State, len(stored.History))
		}
	}
	errs, err = s.Finish(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if !errors.Is(e, store.ErrConflict) {
			t.Errorf("second finish of %s: %v, want ErrConflict", ts[i].ID, e)
		}
	}
}

// TestRememberedFinishWritesReasonAndCounters: a remembered lease whose
// finish changes the failure counters or sets a reason (not the plain
// statement's case, which keeps both) writes them: one job goes back to
// waiting with a congestion attempt counted, the other ends terminal with
// its reason and a transient attempt counted.
func TestRememberedFinishWritesReasonAndCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	now, got := storetest.T0, leasedOnK(t, s, 2)
	back, end := got[0], got[1]
	ts := []store.Transition{
		{ID: back.ID, LeaseToken: back.LeaseToken, To: job.StateWaiting, Attempts: job.Attempts{Congestion: 1},
			Record: job.AttemptRecord{At: now, Attempt: back.Attempt, Outcome: job.ClassRateLimited},
			Keys:   store.KeyEffect{Now: now}},
		{ID: end.ID, LeaseToken: end.LeaseToken, To: job.StateTerminal, Reason: "gave up", Attempts: job.Attempts{Transient: 1},
			Record: job.AttemptRecord{At: now, Attempt: end.Attempt, Outcome: job.ClassTransient},
			Keys:   store.KeyEffect{Now: now}},
	}
	errs, err := s.Finish(ctx, ts)
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("finish: %v, %v", errs, err)
	}
	j, err := s.Get(ctx, back.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != job.StateWaiting || j.Attempts.Congestion != 1 || len(j.History) != 1 {
		t.Errorf("job sent back: state %s, attempts %+v, %d records; want waiting, one congestion attempt, one record", j.State, j.Attempts, len(j.History))
	}
	j, err = s.Get(ctx, end.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != job.StateTerminal || string(j.Reason) != "gave up" || j.Attempts.Transient != 1 || len(j.History) != 1 {
		t.Errorf("job ended: state %s, reason %q, attempts %+v, %d records; want terminal, %q, one transient attempt, one record",
			j.State, j.Reason, j.Attempts, len(j.History), "gave up")
	}
}

// TestRunFinishForgetsRowidsAfterOtherCommit: a finish of several
// successes of one lease call goes as one UPDATE by the rowids the lease
// read (endRuns), without the id check, on the ground that rowids change
// only by another connection's commit (a VACUUM), which empties the
// remembered lease facts (checkDataVersion). Here another connection swaps
// the rowids of a, a job of the run, and d, a job of the same lease call
// left running: had the facts survived, the run's UPDATE would have ended
// d in a's place (same token, attempt and state: every guard but the id
// passes, and as many rows change as the run has).
func TestRunFinishForgetsRowidsAfterOtherCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	now, got := storetest.T0, leasedOnK(t, s, 4)
	a, d := got[0].ID, got[3].ID
	other, err := sql.Open(driverName, dsn(s.Path(), SyncNormal, false))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var ra, rd int64
	for id, r := range map[string]*int64{a: &ra, d: &rd} {
		if err := other.QueryRowContext(ctx, `SELECT rowid FROM jobs WHERE id = ?`, id).Scan(r); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		id    string
		rowid int64
	}{{a, -1}, {d, ra}, {a, rd}} {
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET rowid = ? WHERE id = ?`, st.rowid, st.id); err != nil {
			t.Fatal(errors.Join(err, tx.Rollback()))
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	finishSucceeded(t, s, got[:3], job.StatePublished, now)
	for _, j := range got {
		want := job.StatePublished
		if j.ID == d {
			want = job.StateRunning
		}
		stored, err := s.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if stored.State != want {
			t.Errorf("job %s after the finish: %s, want %s", j.ID, stored.State, want)
		}
	}
}

// leasedOnK inserts n batch jobs on the unpaced key k and leases them all
// at storetest.T0 for a minute: the running jobs the finish tests above
// end. It fails the test unless all n are leased.
func leasedOnK(t *testing.T, s *Store, n int) []*job.Job {
	t.Helper()
	ctx := context.Background()
	jobs := make([]*job.Job, n)
	for i := range jobs {
		jobs[i] = storetest.NewJob("acme", job.LaneBatch, "k")
	}
	if _, err := s.Insert(ctx, jobs, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	got, err := s.Lease(ctx, store.LeaseParams{Now: storetest.T0, Max: n, LeaseFor: time.Minute})
	if err != nil || len(got) != n {
		t.Fatalf("lease: %d jobs, %v; want %d", len(got), err, n)
	}
	return got
}

// TestAppendKeepsImpliedRecord: a record appended to a published job whose
// first success is implied by its row (a NULL history) joins that success
// instead of replacing it, and a second append keeps both; an append to an
// unknown job writes nothing and is no error. No path appends to a
// published job today; appendRecord is where one would.
func TestAppendKeepsImpliedRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := OpenTest(t, Config{})
	j := leasedOnK(t, s, 1)[0]
	at := storetest.T0.Add(time.Second)
	if errs, err := s.Finish(ctx, successes([]*job.Job{j}, job.StatePublished, at)); err != nil || errs[0] != nil {
		t.Fatalf("finish: %v, %v", errs, err)
	}
	var hist sql.NullString
	if err := s.onWriterConn(func(c *sql.Conn) error {
		return c.QueryRowContext(ctx, `SELECT history FROM jobs WHERE id = ?`, j.ID).Scan(&hist)
	}); err != nil || hist.Valid {
		t.Fatalf("history column %v, %v; want NULL (the success implied)", hist, err)
	}
	later := []job.AttemptRecord{
		{At: at.Add(time.Minute), Outcome: job.ClassRedriven, Why: "a later record"},
		{At: at.Add(2 * time.Minute), Outcome: job.ClassCancelled},
	}
	for _, r := range later {
		if err := s.write(ctx, func(tx *writeTx) error { return s.appendRecord(tx, j.ID, r) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.write(ctx, func(tx *writeTx) error { return s.appendRecord(tx, "no-such-job", later[0]) }); err != nil {
		t.Fatalf("append to an unknown job: %v", err)
	}
	got, err := s.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]job.AttemptRecord{{At: at, Attempt: 1, Outcome: job.ClassSuccess}}, later...)
	if len(got.History) != len(want) {
		t.Fatalf("history %+v, want %+v", got.History, want)
	}
	for i, r := range got.History {
		if r.At = r.At.UTC(); r != want[i] {
			t.Fatalf("history[%d] = %+v, want %+v", i, r, want[i])
		}
	}
}
