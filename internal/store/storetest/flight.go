package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// flightCases are the cases of a window's starts in flight.
var flightCases = map[string]func(*testing.T, Opener){
	"WindowCountsUntilFinish": testWindowCountsUntilFinish,
	"WindowLogsAtAnswer":      testWindowLogsAtAnswer,
}

// testWindowCountsUntilFinish checks, on every driver, that a window
// counts a start from its lease until its finish and logs it at the
// finish (admission.State.End), so that a request that reaches the
// upstream late cannot share an upstream window with one leased a period
// later: a sliding window of 2 per second still full of two running jobs
// 1.5 s after their lease; freed one period after each finish, be it a
// success or a cancel; and a fixed window of 1 per aligned second that
// carries a job running across the second into the next window and
// counts it there when it finishes. The key's flights round-trip through
// the driver between every call.
func testWindowCountsUntilFinish(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	setLimit(t, s, admission.Config{Name: "slide", Windows: []admission.Window{{Limit: 2, Period: time.Second}}})
	setLimit(t, s, admission.Config{Name: "fixed", Windows: []admission.Window{{Limit: 1, Period: time.Second, Fixed: true}}})
	slide := newJobs(4, "acme", job.LaneBatch, "slide")
	insert(t, s, slide...)
	at := msAfterT0
	leaseN := func(ms, want int) []*job.Job { t.Helper(); return leaseExactly(t, s, ms, want) }
	first := leaseN(0, 2)
	leaseN(1500, 0) // both still running: the upstream may not have counted them yet
	mustOK(t, finish(t, s, success(first[0], at(1600))))
	if _, err := s.Cancel(ctx, first[1].ID, at(1700)); err != nil {
		t.Fatal(err)
	}
	leaseN(2500, 0) // logged at +1.6 s and +1.7 s
	leaseN(2600, 1)
	leaseN(2700, 1)
	if k, err := s.GetLimit(ctx, "slide"); err != nil || k.InFlight != 2 {
		t.Fatalf("slide key in flight = %d, %v; want 2", k.InFlight, err)
	}

	long, next := NewJob("acme", job.LaneBatch, "fixed"), NewJob("acme", job.LaneBatch, "fixed")
	long.EligibleAt, next.EligibleAt = at(10_900), at(10_900)
	insert(t, s, long)
	running := leaseN(10_900, 1) // counted in [10 s, 11 s)
	insert(t, s, next)
	leaseN(11_200, 0) // still running: it may arrive in [11 s, 12 s)
	mustOK(t, finish(t, s, success(running[0], at(11_300))))
	leaseN(11_500, 0) // it finished in [11 s, 12 s): counted there
	leaseN(12_000, 1)
}

// testWindowLogsAtAnswer checks, on every driver, that a finish carrying
// the time its answer was in (store.KeyEffect.Answered, the handler's
// return) logs a window's start then, not at the later finish write: the
// upstream counted the request before it answered, so the slot is free
// one period after the answer. An Answered after Now (a clock behind)
// logs at Now, and the outcome's other effects apply at Now.
func testWindowLogsAtAnswer(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	setLimit(t, s, admission.Config{Name: "answer", Windows: []admission.Window{{Limit: 1, Period: time.Second}}})
	js := newJobs(3, "acme", job.LaneBatch, "answer")
	insert(t, s, js...)
	at := msAfterT0
	leaseN := func(ms, want int) []*job.Job { t.Helper(); return leaseExactly(t, s, ms, want) }
	first := leaseN(0, 1)
	tr := success(first[0], at(400)) // written at +400 ms ...
	tr.Keys.Answered = at(100)       // ... for an answer in at +100 ms
	mustOK(t, finish(t, s, tr))
	leaseN(1050, 0) // logged at +100 ms: the window holds it until +1.1 s
	second := leaseN(1150, 1)
	tr = success(second[0], at(1300))
	tr.Keys.Answered = at(1900) // after Now: logged at Now
	mustOK(t, finish(t, s, tr))
	leaseN(2250, 0)
	leaseN(2350, 1)
	if k, err := s.GetLimit(ctx, "answer"); err != nil || k.InFlight != 1 {
		t.Fatalf("answer key in flight = %d, %v; want 1", k.InFlight, err)
	}
}

// msAfterT0 is T0 (on a whole second) plus ms milliseconds.
func msAfterT0(ms int) time.Time { return T0.Add(time.Duration(ms) * time.Millisecond) }

// leaseExactly leases up to 10 jobs at T0+ms and fails the test unless
// exactly want were admitted.
func leaseExactly(t *testing.T, s store.Store, ms, want int) []*job.Job {
	t.Helper()
	got := lease(t, s, msAfterT0(ms), 10)
	if len(got) != want {
		t.Fatalf("lease at +%dms admitted %d jobs, want %d", ms, len(got), want)
	}
	return got
}
