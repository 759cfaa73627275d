package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// costCheckCases pin store.WithCostCheck: an insert so marked refuses
// exactly what store.CheckCosts refuses, with its error, and inserts
// nothing then, however the driver checks (PostgreSQL in SQL, inside the
// insert's transaction).
var costCheckCases = map[string]func(*testing.T, Opener){
	"InsertChecksCosts":           testInsertChecksCosts,
	"ConcurrentCostChecksOwnCall": testConcurrentCostChecksOwnCall,
}

// costKeys are keys whose largest admissible start (admission.Config.
// MaxCost) comes from each place it can: a burst, a defaulted burst (rate
// 2, and rate 0.5 whose default is 1), a burst below 1, windows, a
// per-start key (charged 1 whatever the cost) and one with a burst below
// 1, and none at all (unpaced, created by the insert).
var costKeys = []admission.Config{
	{Name: "burst2", Rate: 1, Burst: 2},
	{Name: "rate2", Rate: 2},
	{Name: "slow", Rate: 0.5},
	{Name: "half", Rate: 1, Burst: 0.5},
	{Name: "window3", Windows: []admission.Window{{Limit: 10, Period: time.Minute}, {Limit: 3, Period: time.Second, Fixed: true}}},
	{Name: "both", Rate: 10, Burst: 8, Windows: []admission.Window{{Limit: 6, Period: time.Minute}}},
	{Name: "rpm", Rate: 1, Burst: 1, PerStart: true},
	{Name: "rpmhalf", Rate: 1, Burst: 0.5, PerStart: true},
}

// Each insert marked WithCostCheck gets exactly CheckCosts' answer (read
// just before it, the same error text), refuses as the table says, and a
// refused one stores none of its jobs and creates none of its keys.
func testInsertChecksCosts(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	for _, c := range costKeys {
		setLimit(t, s, c)
	}
	paced := admission.Config{Rate: 1, Burst: 2}
	cases := []struct {
		keys    []string
		costs   []int64 // one job per cost, all naming keys
		def     admission.Config
		refused bool
	}{
		{[]string{"burst2"}, []int64{2}, Unpaced, false},
		{[]string{"burst2"}, []int64{3}, Unpaced, true},
		{[]string{"rate2"}, []int64{2}, Unpaced, false},
		{[]string{"rate2"}, []int64{3}, Unpaced, true},
		{[]string{"slow"}, []int64{1}, Unpaced, false},
		{[]string{"slow"}, []int64{2}, Unpaced, true},
		{[]string{"half"}, []int64{1}, Unpaced, true},
		{[]string{"window3"}, []int64{3}, Unpaced, false},
		{[]string{"window3"}, []int64{4}, Unpaced, true},
		{[]string{"both"}, []int64{6}, Unpaced, false},
		{[]string{"both"}, []int64{7}, Unpaced, true},
		{[]string{"rpm"}, []int64{5000}, Unpaced, false},
		{[]string{"rpm"}, []int64{admission.MaxCost + 1}, Unpaced, true},
		{[]string{"rpmhalf"}, []int64{1}, Unpaced, true},
		{[]string{"unpaced"}, []int64{admission.MaxCost}, Unpaced, false},
		{[]string{"unpaced"}, []int64{admission.MaxCost + 1}, Unpaced, true},
		{[]string{"unpaced"}, []int64{0}, Unpaced, true},
		{[]string{"unpaced", "burst2"}, []int64{1, 2, 3}, Unpaced, true}, // the batch as a whole
		{[]string{"burst2", "window3"}, []int64{2, 2}, Unpaced, false},
		{[]string{"fresh"}, []int64{3}, paced, true}, // checked against def
		{[]string{"fresh2", "burst2"}, []int64{1, 2}, paced, false},
		{[]string{"fresh"}, []int64{3}, Unpaced, false},
	}
	for i, c := range cases {
		what := fmt.Sprintf("case %d: keys %v, costs %v", i, c.keys, c.costs)
		jobs := make([]*job.Job, len(c.costs))
		for k, cost := range c.costs {
			jobs[k] = NewJob("acme", job.LaneInteractive, c.keys...)
			jobs[k].Cost = cost
		}
		existed := map[string]bool{}
		for _, name := range c.keys {
			_, err := s.GetLimit(ctx, name)
			existed[name] = err == nil
		}
		want := store.CheckCosts(ctx, s, jobs, c.def)
		if (want != nil) != c.refused {
			t.Fatalf("%s: CheckCosts = %v, want refused %v", what, want, c.refused)
		}
		_, err := s.Insert(store.WithCostCheck(ctx), jobs, c.def)
		if !c.refused {
			if err != nil {
				t.Fatalf("%s: checked insert: %v", what, err)
			}
			continue
		}
		var ve *job.ValidationError
		if !errors.As(err, &ve) || err.Error() != want.Error() {
			t.Fatalf("%s: checked insert = %v, want CheckCosts' %v", what, err, want)
		}
		ids := make([]string, len(jobs))
		for k, j := range jobs {
			ids[k] = j.ID
		}
		wantRefused(t, s, err, what, ids...)
		for _, name := range c.keys {
			if _, err := s.GetLimit(ctx, name); !existed[name] && !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s: the refused insert created key %s (%v)", what, name, err)
			}
		}
	}
	// Without the mark Insert checks nothing, as before.
	over := NewJob("acme", job.LaneInteractive, "burst2")
	over.Cost = 3
	insert(t, s, over)
}

// Concurrent checked single-job inserts, which a driver may coalesce into
// one transaction: only the call whose job is over cost is refused; the
// others, checked or not, are stored.
func testConcurrentCostChecksOwnCall(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.Config{Name: "burst2", Rate: 1, Burst: 2})
	const n = 24
	jobs := make([]*job.Job, n)
	errs := make([]error, n)
	for i := range jobs {
		jobs[i] = NewJob("acme", job.LaneInteractive, "burst2", fmt.Sprintf("k%d", i%3))
		if i%8 == 5 {
			jobs[i].Cost = 3
		}
	}
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() {
			ctx := context.Background()
			if i%2 == 1 {
				ctx = store.WithCostCheck(ctx)
			}
			_, errs[i] = s.Insert(ctx, []*job.Job{jobs[i]}, Unpaced)
		})
	}
	wg.Wait()
	for i, j := range jobs {
		var ve *job.ValidationError
		switch {
		case i%8 == 5:
			if !errors.As(errs[i], &ve) {
				t.Errorf("call %d, cost 3 on burst 2, checked: %v, want a validation error", i, errs[i])
			}
			wantRefused(t, s, errs[i], fmt.Sprintf("call %d", i), j.ID)
		case errs[i] != nil:
			t.Errorf("call %d: %v", i, errs[i])
		default:
			get(t, s, j.ID)
		}
	}
}
