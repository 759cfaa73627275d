package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// historyCases pin the bounded attempt history (store.FoldsRecord): a
// job's pending passes fold into one record instead of adding one each.
var historyCases = map[string]func(*testing.T, Opener){
	"HistoryFoldsPending":  testHistoryFoldsPending,
	"HistoryFoldAllBounds": testHistoryFoldAllBounds,
}

// historyPasses is how many passes testHistoryFoldsPending drives. It was
// 1,500 (more than a day's polls of a provider batch at one a minute),
// the suite's costliest case: ~24 s per run under -race, and SQLite runs
// the suite three times (docs/benchmarks.md, "Session 44 (s44h2)"). What
// it checks does not depend on the count: whether a pass folds
// (store.FoldsInto) looks at the last record and the history's length,
// never at how many passes a fold holds, and the drivers' SQL adds one to
// the count. With 200 passes the last fold's count still goes from two
// digits to three between the two size readings.
const historyPasses = 200

// pendingPass is the transition of a driver job's pass that found its
// batch still running: back to retry_scheduled after delay, spending no
// budget, as engine.Decide writes it (Why "pending").
func pendingPass(j *job.Job, now time.Time, delay time.Duration, errText string) store.Transition {
	return store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateRetryScheduled, EligibleAt: now.Add(delay),
		Attempts: j.Attempts, Keys: store.KeyEffect{Now: now},
		Record: job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassPending, Delay: delay, Why: "pending", Error: errText}}
}

// leaseAt leases the one job of s at now, failing t if there is none.
func leaseAt(t *testing.T, s store.Store, now time.Time) *job.Job {
	t.Helper()
	got := lease(t, s, now, 1)
	if len(got) != 1 {
		t.Fatalf("lease at %v: %d jobs, want 1", now, len(got))
	}
	return got[0]
}

// testHistoryFoldsPending: a driver job's historyPasses passes of
// polls, with a failed poll and an advance among them, leave a history of
// five records that say how many passes each stands for and when the
// first and newest ended, on both the finish's and the advance's append;
// the history read back is store.AppendFolded's, and its size does not
// grow with the passes.
func testHistoryFoldsPending(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	j := NewJob("acme", job.LaneBatch, "k")
	j.State = job.StateAccepted
	insert(t, s, j)
	var want []job.AttemptRecord
	at := func(i int) time.Time { return T0.Add(time.Duration(i) * time.Minute) }
	// The advance that releases the job records a pending pass of its own
	// (store.Advance's append, not the finish's).
	adv := store.AdvanceParams{ID: j.ID, From: job.StateAccepted, To: job.StateWaiting, Now: T0,
		Record: job.AttemptRecord{At: T0, Outcome: job.ClassPending, Why: "pending"}}
	if _, err := s.Advance(ctx, adv); err != nil {
		t.Fatalf("advance: %v", err)
	}
	want = store.AppendFolded(want, adv.Record)
	var sizes []int
	for i := 1; i <= historyPasses; i++ {
		l := leaseAt(t, s, at(i))
		var tr store.Transition
		switch {
		case i == 1:
			// A transient failure keeps its own record and ends the run.
			tr = store.Transition{ID: l.ID, LeaseToken: l.LeaseToken, To: job.StateRetryScheduled, EligibleAt: at(i),
				Attempts: job.Attempts{Transient: 1}, Keys: store.KeyEffect{Now: at(i)},
				Record: job.AttemptRecord{At: at(i), Attempt: l.Attempt, Outcome: job.ClassTransient, Status: 503, Why: "backoff"}}
		case i == 100 || i == 101:
			// A failed poll is a pending pass with an error: a run of its
			// own, between runs of plain passes.
			tr = pendingPass(l, at(i), 0, "poll: provider answered 500")
		default:
			// The delay varies from pass to pass (the next item's time)
			// and does not break a run.
			tr = pendingPass(l, at(i), time.Duration(1+i%3)*time.Second, "")
		}
		mustOK(t, finish(t, s, tr))
		want = store.AppendFolded(want, tr.Record)
		if i == 150 {
			// An advance's pending record folds into the finishes' run.
			r := job.AttemptRecord{At: at(i), Attempt: l.Attempt, Outcome: job.ClassPending, Why: "pending"}
			if _, err := s.Advance(ctx, store.AdvanceParams{ID: j.ID, From: job.StateRetryScheduled, To: job.StateWaiting, Now: at(i), Record: r}); err != nil {
				t.Fatalf("advance at pass %d: %v", i, err)
			}
			want = store.AppendFolded(want, r)
		}
		if i == 151 || i == historyPasses {
			b, _ := json.Marshal(get(t, s, j.ID).History)
			sizes = append(sizes, len(b))
		}
	}
	got := get(t, s, j.ID)
	if !sameRecords(got.History, want) {
		t.Fatalf("history after %d passes:\n got %+v\nwant %+v", historyPasses, got.History, want)
	}
	if len(got.History) != 5 {
		t.Fatalf("history holds %d records, want 5 (pending, transient, pending run, failed polls, pending run): %+v", len(got.History), got.History)
	}
	passes := 0
	for _, r := range got.History {
		passes += max(r.Count, 1)
	}
	if passes != historyPasses+2 { // and the two advances
		t.Fatalf("the records stand for %d passes, want %d", passes, historyPasses+2)
	}
	last := got.History[len(got.History)-1]
	if last.Count != historyPasses-100 || !last.FirstAt.Equal(at(102)) || !last.At.Equal(at(historyPasses)) || last.Attempt != historyPasses {
		t.Fatalf("last record = %+v, want a fold of %d passes from %v to %v, attempt %d",
			last, historyPasses-100, at(102), at(historyPasses), historyPasses)
	}
	if fails := got.History[3]; fails.Count != 2 || fails.Error == "" {
		t.Fatalf("failed polls = %+v, want one record of 2 with the error", fails)
	}
	// Between pass 151 and the last, the passes changed only the last
	// record's times, attempt and count (a digit more).
	if sizes[1]-sizes[0] > 8 {
		t.Fatalf("encoded history at pass 151 and %d: %v bytes, want the same size but for a digit", historyPasses, sizes)
	}
}

// testHistoryFoldAllBounds: pending passes that differ from the last
// record (a failed poll, then a plain one, alternating) add records only
// until the history holds store.HistoryFoldAll; from there every pending
// pass folds into a pending last record, so the history stops growing,
// while a record of another outcome is still appended.
func testHistoryFoldAllBounds(t *testing.T, open Opener) {
	s := open(t)
	j := NewJob("acme", job.LaneBatch, "k")
	insert(t, s, j)
	var want []job.AttemptRecord
	const passes = 3 * store.HistoryFoldAll
	for i := range passes {
		now := T0.Add(time.Duration(i) * time.Second)
		l := leaseAt(t, s, now)
		errText := ""
		if i%2 == 1 {
			errText = fmt.Sprintf("poll %d failed: <500> \"x\" é", i) // escapes survive a fold
		}
		tr := pendingPass(l, now, 0, errText)
		if i == passes-2 {
			tr = store.Transition{ID: l.ID, LeaseToken: l.LeaseToken, To: job.StateRetryScheduled, EligibleAt: now,
				Attempts: job.Attempts{Transient: 1}, Keys: store.KeyEffect{Now: now},
				Record: job.AttemptRecord{At: now, Attempt: l.Attempt, Outcome: job.ClassTransient, Why: "backoff"}}
		}
		mustOK(t, finish(t, s, tr))
		want = store.AppendFolded(want, tr.Record)
	}
	got := get(t, s, j.ID).History
	if !sameRecords(got, want) {
		t.Fatalf("history:\n got %+v\nwant %+v", got, want)
	}
	if len(got) != store.HistoryFoldAll+2 {
		t.Fatalf("history holds %d records, want %d: the bound, the transient failure, the pass after it", len(got), store.HistoryFoldAll+2)
	}
}

// PollPasses is a day of a provider batch's polls at one a minute, the
// drivers' BenchmarkPendingPasses' length.
const PollPasses = 1440

// PendingPasses inserts one batch job in s and drives it through n
// pending passes a minute apart, each a lease and a pending finish back to
// retry_scheduled (a provider batch's polls, as engine.Decide writes
// them); after, when not nil, runs after each pass with the job's id. It
// returns the id. The drivers' benchmarks of a day of polls (BenchmarkPendingPasses)
// share it.
func PendingPasses(tb testing.TB, s store.Store, n int, after func(id string)) string {
	tb.Helper()
	ctx := context.Background()
	j := NewJob("acme", job.LaneBatch, "k")
	if _, err := s.Insert(ctx, []*job.Job{j}, Unpaced); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		now := T0.Add(time.Duration(i) * time.Minute)
		got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 1, LeaseFor: time.Minute})
		if err != nil || len(got) != 1 {
			tb.Fatalf("lease %d: %d jobs, %v", i, len(got), err)
		}
		errs, err := s.Finish(ctx, []store.Transition{pendingPass(got[0], now, time.Minute, "")})
		if err != nil || errs[0] != nil {
			tb.Fatalf("finish %d: %v %v", i, err, errs)
		}
		if after != nil {
			after(j.ID)
		}
	}
	return j.ID
}
