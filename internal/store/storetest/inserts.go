package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// insertCases pin what a driver's insert path owes each caller however it
// batches the work: a bulk insert's per-item results, and concurrent calls
// that a driver may coalesce into one transaction.
var insertCases = map[string]func(*testing.T, Opener){
	"InsertBatchResults":          testInsertBatchResults,
	"ConcurrentInsertsOwnResults": testConcurrentInsertsOwnResults,
	"InsertBatchGroupsReady":      testInsertBatchGroupsReady,
	"InsertBatchEachRowItsOwn":    testInsertBatchEachRowItsOwn,
	"LimitKeyCount":               testLimitKeyCount,
	"InsertRefusesForeign":        testInsertRefusesForeign,
}

// A job names 1 to job.MaxLimitKeys limit keys: every driver stores one
// with 1 and with job.MaxLimitKeys, and refuses one with none or more, in
// Insert and in ClaimTick, before writing anything (the batch it came in
// is not inserted in part, no key is created). PostgreSQL could not store
// a job without keys (its group is NOT NULL) and SQLite stored both.
func testLimitKeyCount(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	many := make([]string, job.MaxLimitKeys+1)
	for i := range many {
		many[i] = fmt.Sprintf("k%d", i)
	}
	fine := []*job.Job{NewJob("t", job.LaneBatch, many[0]), NewJob("t", job.LaneBatch, many[:job.MaxLimitKeys]...)}
	for _, r := range insert(t, s, fine...) {
		if got := get(t, s, r.Job.ID); len(got.LimitKeys) != len(r.Job.LimitKeys) {
			t.Fatalf("job %s holds keys %v, want %v", got.ID, got.LimitKeys, r.Job.LimitKeys)
		}
	}
	for _, keys := range [][]string{nil, append(many[1:len(many):len(many)], "fresh")} {
		good, bad := NewJob("t", job.LaneBatch, "k0"), NewJob("t", job.LaneBatch, keys...)
		_, err := s.Insert(ctx, []*job.Job{good, bad}, Unpaced)
		wantRefused(t, s, err, fmt.Sprintf("insert with %d keys", len(keys)), good.ID, bad.ID)
		_, err = s.ClaimTick(ctx, store.ClaimTickParams{ScheduleID: "none", Tick: T0, Job: bad, Def: Unpaced})
		wantRefused(t, s, err, fmt.Sprintf("a tick with %d keys", len(keys)), bad.ID)
	}
	if _, err := s.GetLimit(ctx, "fresh"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused job's key was created: %v", err)
	}
}

// Every driver refuses, before writing, a job without an ID, of another
// region or in a state a new job is not in (SQLite stored the first two).
func testInsertRefusesForeign(t *testing.T, open Opener) {
	s := open(t)
	for _, tc := range []struct {
		name string
		edit func(*job.Job)
	}{
		{"no ID", func(j *job.Job) { j.ID = "" }},
		{"another region", func(j *job.Job) { j.Region = "elsewhere" }},
		{"running", func(j *job.Job) { j.State = job.StateRunning }},
	} {
		good, bad := NewJob("t", job.LaneBatch, "k"), NewJob("t", job.LaneBatch, "k")
		tc.edit(bad)
		_, err := s.Insert(context.Background(), []*job.Job{good, bad}, Unpaced)
		wantRefused(t, s, err, tc.name, good.ID)
		if bad.ID != "" {
			wantRefused(t, s, err, tc.name, bad.ID)
		}
	}
}

// wantRefused fails unless err is set and none of ids was stored.
func wantRefused(t *testing.T, s store.Store, err error, what string, ids ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want refused", what)
	}
	for _, id := range ids {
		if _, gerr := s.Get(context.Background(), id); !errors.Is(gerr, store.ErrNotFound) {
			t.Fatalf("%s: refused (%v) but job %s was stored: %v", what, err, id, gerr)
		}
	}
}

// Batches of jobs without idempotency key, deadline or parent, alike but
// for one field each: a kind, tenant, lane, state, eligible or created
// time, priority, cost, budget, payload or key set unlike the rest. Every
// job is stored as inserted, whatever a driver binds once per batch for
// jobs that agree (SQLite: the kind, region, lane, tenant, state and
// times of a chunk whose jobs all share them).
func testInsertBatchEachRowItsOwn(t *testing.T, open Opener) {
	s := open(t)
	for odd := range 11 {
		jobs := make([]*job.Job, 16)
		for i := range jobs {
			jobs[i] = NewJob("t", job.LaneBatch, "k")
		}
		j := jobs[5]
		switch odd {
		case 1:
			j.Kind = "other"
		case 2:
			j.Tenant = "u"
		case 3:
			j.Lane = job.LaneInteractive
		case 4:
			j.State = job.StateAccepted
		case 5:
			j.EligibleAt = T0.Add(time.Minute)
		case 6:
			j.CreatedAt = T0.Add(-time.Minute)
		case 7:
			j.Priority, j.Cost = 2, 3
		case 8:
			j.Budgets.Transient++
		case 9:
			j.Payload = []byte(`{"odd":true}`)
		case 10:
			j.LimitKeys = []string{"k", "j"}
		}
		res := insert(t, s, jobs...)
		for i, r := range res {
			got := get(t, s, jobs[i].ID)
			got.History = nil
			if a, b := jsonOf(t, r.Job), jsonOf(t, got); a != b {
				t.Fatalf("batch %d, job %d: the insert returned\n%s\nbut the store holds\n%s", odd, i, a, b)
			}
		}
	}
}

// One batch holding several jobs of each of two groups, the earliest
// eligible one not first and an accepted job among them: each group is
// ready from its earliest waiting job, as if its jobs were inserted one by
// one (a driver that writes each group once per batch must take the
// minimum, not the first job's time).
func testInsertBatchGroupsReady(t *testing.T, open Opener) {
	s := open(t)
	var jobs []*job.Job
	for _, kind := range []string{"a", "b"} {
		late, early, accepted := NewJob("t", job.LaneBatch, "k"), NewJob("t", job.LaneBatch, "k"), NewJob("t", job.LaneBatch, "k")
		late.Kind, early.Kind, accepted.Kind = kind, kind, kind
		late.EligibleAt = T0.Add(time.Hour)
		accepted.State = job.StateAccepted
		jobs = append(jobs, accepted, late, early)
	}
	insert(t, s, jobs...)
	got := lease(t, s, T0, 10)
	ids := map[string]bool{}
	for _, j := range got {
		ids[j.ID] = true
	}
	if len(got) != 2 || !ids[jobs[2].ID] || !ids[jobs[5].ID] {
		t.Errorf("leased %d jobs at T0, want the two eligible ones (%s, %s)", len(got), jobs[2].ID, jobs[5].ID)
	}
}

// A large batch mixing new jobs, a key already used, a key used twice
// within the batch, accepted jobs, deadlines, empty payloads and keys named
// out of order: every item's result is the stored job, or the job holding
// its idempotency key.
func testInsertBatchResults(t *testing.T, open Opener) {
	s := open(t)
	old := NewJob("acme", job.LaneBatch, "k0")
	old.IdempotencyKey = "old"
	insert(t, s, old)
	jobs := make([]*job.Job, 300)
	for i := range jobs {
		j := NewJob(fmt.Sprintf("t%d", i%3), []job.Lane{job.LaneInteractive, job.LaneBatch}[i%2], fmt.Sprintf("k%d", i%7))
		switch i % 5 {
		case 1:
			j.LimitKeys = []string{"z", fmt.Sprintf("k%d", i%7), "a"} // out of order, kept as named
		case 2:
			j.State, j.Deadline, j.Priority = job.StateAccepted, T0.Add(time.Duration(i)*time.Second), -3
		case 3:
			j.Payload, j.EligibleAt, j.Depth = nil, T0.Add(time.Minute), "degraded"
		}
		jobs[i] = j
	}
	jobs[10].Tenant, jobs[10].IdempotencyKey = "acme", "old"
	jobs[20].IdempotencyKey, jobs[250].IdempotencyKey = "twice", "twice"
	jobs[250].Tenant = jobs[20].Tenant
	res := insert(t, s, jobs...)
	if len(res) != len(jobs) {
		t.Fatalf("%d results for %d jobs", len(res), len(jobs))
	}
	for i, r := range res {
		switch i {
		case 10:
			if !r.Existing || r.Job.ID != old.ID {
				t.Errorf("job 10 reuses key %q: got %s (existing %v), want the existing %s", "old", r.Job.ID, r.Existing, old.ID)
			}
		case 250:
			if !r.Existing || r.Job.ID != jobs[20].ID {
				t.Errorf("job 250 repeats job 20's key: got %s (existing %v), want %s", r.Job.ID, r.Existing, jobs[20].ID)
			}
		default:
			if r.Existing || r.Job.ID != jobs[i].ID {
				t.Fatalf("job %d: got %s (existing %v), want itself inserted", i, r.Job.ID, r.Existing)
			}
			got := get(t, s, jobs[i].ID)
			got.History = nil
			if a, b := jsonOf(t, r.Job), jsonOf(t, got); a != b {
				t.Fatalf("job %d: the insert returned\n%s\nbut the store holds\n%s", i, a, b)
			}
		}
	}
	for _, i := range []int{10, 250} {
		if _, err := s.Get(context.Background(), jobs[i].ID); err == nil {
			t.Errorf("job %d, a duplicate by its idempotency key, was stored", i)
		}
	}
	if got := stored(t, s); got != 1+300-2 {
		t.Errorf("the store holds %d jobs, want %d", got, 1+300-2)
	}
}

// stored counts the jobs in s.
func stored(t *testing.T, s store.Store) int64 {
	t.Helper()
	st, err := s.Stats(context.Background(), T0)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, states := range st.Counts {
		for _, c := range states {
			n += c
		}
	}
	return n
}

func jsonOf(t *testing.T, j *job.Job) string {
	t.Helper()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Concurrent single-job inserts, as the HTTP API makes them, each get
// their own result: their own job, or the job of the first call with
// their idempotency key; a call whose job id is taken fails alone.
func testConcurrentInsertsOwnResults(t *testing.T, open Opener) {
	s := open(t)
	taken := NewJob("acme", job.LaneInteractive, "k")
	insert(t, s, taken)
	const n = 48
	jobs := make([]*job.Job, n)
	res := make([]store.InsertResult, n)
	errs := make([]error, n)
	for i := range jobs {
		jobs[i] = NewJob("acme", job.LaneInteractive, fmt.Sprintf("k%d", i%4))
		switch {
		case i%8 == 3:
			jobs[i].ID = taken.ID
		case i%4 == 1:
			jobs[i].IdempotencyKey = fmt.Sprintf("pair-%d", i/8) // i and i+4 share it
		}
	}
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() {
			r, err := s.Insert(context.Background(), []*job.Job{jobs[i]}, Unpaced)
			if err == nil {
				res[i] = r[0]
			}
			errs[i] = err
		})
	}
	wg.Wait()
	winners := map[string]string{} // pair key -> the job that holds it
	for i, j := range jobs {
		switch {
		case i%8 == 3:
			if errs[i] == nil {
				t.Errorf("call %d reused a taken job id and succeeded", i)
			}
			continue
		case errs[i] != nil:
			t.Fatalf("call %d: %v", i, errs[i])
		case j.IdempotencyKey == "":
			if res[i].Existing || res[i].Job.ID != j.ID {
				t.Errorf("call %d got job %s (existing %v), want its own %s", i, res[i].Job.ID, res[i].Existing, j.ID)
			}
			continue
		}
		if !res[i].Existing {
			if w, ok := winners[j.IdempotencyKey]; ok {
				t.Errorf("key %s created twice: %s and %s", j.IdempotencyKey, w, j.ID)
			}
			winners[j.IdempotencyKey] = j.ID
		}
	}
	for i, j := range jobs {
		if i%8 == 3 || j.IdempotencyKey == "" {
			continue
		}
		w := winners[j.IdempotencyKey]
		if w == "" || res[i].Job.ID != w || res[i].Existing != (j.ID != w) {
			t.Errorf("call %d (key %s) got %s (existing %v); the key's job is %q", i, j.IdempotencyKey, res[i].Job.ID, res[i].Existing, w)
		}
		if _, err := s.Get(context.Background(), j.ID); (err == nil) != (j.ID == w) {
			t.Errorf("call %d: job stored = %v, want %v", i, err == nil, j.ID == w)
		}
	}
	if got := stored(t, s); got != 1+n-n/8-n/8 {
		t.Errorf("the store holds %d jobs, want %d (the taken id's job, the calls without key, one per pair)", got, 1+n-n/8-n/8)
	}
}
