package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// A finish whose jobs' keys are all unpaced and whose outcomes write no
// key is one round trip, the COMMIT sent with its statements (two before:
// the COMMIT went alone). One that meets a paced key is rolled back and
// finished in the usual two, which release the paced key's lease; the
// finishes after it take two round trips without trying one first, for
// oneTripPause finishes.
func TestFinishOneRoundTrip(t *testing.T) {
	t.Parallel()
	s, rt := tracedStore(t)
	ctx := context.Background()
	t0 := storetest.T0
	leaseAll := func(now time.Time) []*job.Job {
		t.Helper()
		got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 10, LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	finish := func(now time.Time, jobs ...*job.Job) (trips, begins int64) {
		t.Helper()
		ts := make([]store.Transition, len(jobs))
		for i, j := range jobs {
			ts[i] = store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StatePublished, Attempts: j.Attempts,
				Record: job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassSuccess},
				Keys:   store.KeyEffect{Now: now, Success: true}}
		}
		trips0, begins0 := rt.trips.Load(), rt.begins.Load()
		errs, err := s.Finish(ctx, ts)
		trips, begins = rt.trips.Load()-trips0, rt.begins.Load()-begins0
		if err != nil {
			t.Fatal(err)
		}
		for i, err := range errs {
			if err != nil {
				t.Fatalf("transition %d: %v", i, err)
			}
		}
		for _, j := range jobs {
			if got, err := s.Get(ctx, j.ID); err != nil || got.State != job.StatePublished {
				t.Fatalf("job after its finish: %v, %v; want published", got, err)
			}
		}
		return trips, begins
	}
	insert := func(keys ...string) {
		t.Helper()
		if _, err := s.Insert(ctx, []*job.Job{storetest.NewJob("acme", job.LaneBatch, keys...)}, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
	}

	insert("u1")
	insert("u1", "u2")
	insert("u2")
	if trips, begins := finish(t0, leaseAll(t0)...); trips != 1 || begins != 1 {
		t.Fatalf("a finish on unpaced keys took %d round trips, %d transactions; want 1, 1", trips, begins)
	}

	if _, err := s.UpsertLimit(ctx, admission.Config{Name: "p", Concurrency: 1}, t0); err != nil {
		t.Fatal(err)
	}
	insert("u1", "p")
	// The failed try, its rollback, then the finish's two round trips.
	if trips, _ := finish(t0, leaseAll(t0)...); trips != 4 {
		t.Fatalf("a finish on a paced key took %d round trips, want 4", trips)
	}
	if k, err := s.GetLimit(ctx, "p"); err != nil || k.InFlight != 0 {
		t.Fatalf("paced key after its finish: in flight %d, %v; want 0", k.InFlight, err)
	}
	insert("u1")
	if trips, _ := finish(t0, leaseAll(t0)...); trips != 2 {
		t.Fatalf("a finish on unpaced keys right after one on a paced key took %d round trips, want 2", trips)
	}
	s.pacedFinishes.Store(0)
	insert("u2")
	if trips, _ := finish(t0, leaseAll(t0)...); trips != 1 {
		t.Fatalf("a finish on unpaced keys took %d round trips, want 1", trips)
	}
}
