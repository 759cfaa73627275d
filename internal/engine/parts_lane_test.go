package engine_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
)

// laneAggregator records the parents it is asked about, in order, and
// holds the call for the parent named by hold (any parent for "first")
// until release is closed (entered is
// closed when it starts waiting). Batch-lane parents named in pending
// stay accepted (ClassPending, as a batch review waiting on its items
// does); every other parent succeeds.
type laneAggregator struct {
	mu      sync.Mutex
	calls   []string
	hold    string
	entered chan struct{}
	release chan struct{}
	pending map[string]bool
}

func (a *laneAggregator) Aggregate(_ context.Context, parent *job.Job, _ []*job.Job) job.Outcome {
	a.mu.Lock()
	a.calls = append(a.calls, parent.ID)
	hold, pending := a.hold == parent.ID || a.hold == "first", a.pending[parent.ID]
	if hold {
		a.hold = ""
	}
	a.mu.Unlock()
	if hold {
		close(a.entered)
		<-a.release
	}
	if pending {
		return job.Outcome{Class: job.ClassPending}
	}
	return job.Outcome{Class: job.ClassSuccess, Result: []byte(`{}`)}
}

func (a *laneAggregator) log() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

func parentIn(lane job.Lane) *job.Job {
	p := &job.Job{Kind: "report", Region: "us", Tenant: "acme", Lane: lane, LimitKeys: []string{"parts:report"}}
	p.Prepare(uuid.Must(uuid.NewV7()).String(), time.Now(), 0, true)
	return p
}

// TestPartsInteractiveWakeupsFirst: while the aggregation loop is busy,
// five batch-lane parents and then one interactive parent are woken; the
// interactive one is aggregated next, before any of the batch ones that
// were queued ahead of it, and every one of them is aggregated after.
func TestPartsInteractiveWakeupsFirst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		ctx := context.Background()
		agg := &laneAggregator{entered: make(chan struct{}), release: make(chan struct{})}
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"report": {Aggregate: agg, SweepEvery: time.Hour}}})
		synctest.Wait() // past the start sweep
		insert := func(p *job.Job) {
			t.Helper()
			if _, err := e.Jobs().InsertParts(ctx, p, nil, admission.Config{}); err != nil {
				t.Fatal(err)
			}
		}
		busy := parentIn(job.LaneBatch)
		agg.mu.Lock()
		agg.hold = busy.ID
		agg.mu.Unlock()
		insert(busy) // no parts: woken at once, and held
		<-agg.entered
		var batch []string
		for range 5 {
			p := parentIn(job.LaneBatch)
			insert(p)
			batch = append(batch, p.ID)
		}
		inter := parentIn(job.LaneInteractive)
		insert(inter)
		close(agg.release)
		for _, id := range append([]string{busy.ID, inter.ID}, batch...) {
			waitState(t, s, id, job.StatePublished)
		}
		want := append([]string{busy.ID, inter.ID}, batch...)
		if got := agg.log(); !slices.Equal(got, want) {
			t.Fatalf("aggregated in order %v, want the held one, the interactive one, then the batch ones in order %v", got, want)
		}
	})
}

// TestPartsSweepYieldsToInteractive: a periodic sweep over many
// batch-lane parents that are still waiting (a sweep's batch reviews)
// serves an interactive parent woken meanwhile before the next batch
// parent, rather than after the whole sweep.
func TestPartsSweepYieldsToInteractive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		ctx := context.Background()
		// The waiting parents come from another writer (another process),
		// so only the sweep finds them.
		other, err := engine.NewJobs(engine.JobsConfig{Store: s})
		if err != nil {
			t.Fatal(err)
		}
		agg := &laneAggregator{entered: make(chan struct{}), release: make(chan struct{}), pending: map[string]bool{}}
		var waiting []string
		for range 20 {
			p := parentIn(job.LaneBatch)
			if _, err := other.InsertParts(ctx, p, nil, admission.Config{}); err != nil {
				t.Fatal(err)
			}
			waiting = append(waiting, p.ID)
			agg.pending[p.ID] = true
		}
		agg.hold = "first"
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"report": {Aggregate: agg, SweepEvery: time.Hour}}})
		<-agg.entered // the start sweep, at its first parent
		inter := parentIn(job.LaneInteractive)
		if _, err := e.Jobs().InsertParts(ctx, inter, nil, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		close(agg.release)
		waitState(t, s, inter.ID, job.StatePublished)
		synctest.Wait()
		got := agg.log()
		if len(got) != len(waiting)+1 || !slices.Contains(waiting, got[0]) || got[1] != inter.ID {
			t.Fatalf("aggregated %v; want a waiting parent (held), then the interactive %s, then the other %d waiting parents",
				got, inter.ID, len(waiting)-1)
		}
		for _, id := range waiting {
			if j, err := s.Get(ctx, id); err != nil || j.State != job.StateAccepted {
				t.Fatalf("waiting parent %s: %v, %v; want it still accepted", id, j, err)
			}
		}
	})
}
