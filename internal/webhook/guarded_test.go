package webhook

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// twoNodes returns two registries over one store (two nodes) and creates
// subscriber "s" through the first.
func twoNodes(t *testing.T) (*Registry, *Registry) {
	t.Helper()
	return twoNodesOn(t, "sqlite")
}

// twoNodesOn is twoNodes on a store of driver (newRegistryOn).
func twoNodesOn(t *testing.T, driver string) (*Registry, *Registry) {
	t.Helper()
	a, st, c := newRegistryOn(t, driver)
	b := node(t, st, c.Now)
	if _, _, _, err := a.Put(context.Background(), SubscriberSpec{ID: "s", URL: "https://example.com/hook", Topics: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// A write of a subscriber read before another node changed it is refused
// with store.ErrConflict and leaves the other node's change in place (it
// used to overwrite it: last write wins).
func TestSubscriberStaleWriteConflicts(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ctx := context.Background()
	prev, body, err := a.loadRaw(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Disable(ctx, "s", "maintenance"); err != nil { // the other node writes in between
		t.Fatal(err)
	}
	stale := prev
	stale.URL = "https://example.com/other"
	if _, err := a.saveIf(ctx, stale, prev, body); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale write: %v, want ErrConflict", err)
	}
	got, err := a.Get(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if got.Enabled || got.URL != "https://example.com/hook" || got.Version != 2 {
		t.Fatalf("subscriber %+v, want the other node's disable (version 2) and the old URL", got)
	}
}

// Two nodes rotating one subscriber's secret at once lose no update: every
// call either succeeds, and counts in the record's version, or returns a
// conflict; none is swallowed.
func TestConcurrentSubscriberUpdates(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, conflicts := 0, 0
	for i := range 16 {
		r := a
		if i%2 == 1 {
			r = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := r.RotateSecret(ctx, "s", time.Hour)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrConflict):
				conflicts++
			default:
				t.Errorf("rotate: %v", err)
			}
		}()
	}
	wg.Wait()
	got, err := a.Get(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != int64(1+ok) {
		t.Fatalf("version %d after %d successful rotations (%d conflicts): an update was lost", got.Version, ok, conflicts)
	}
	if ok == 0 {
		t.Fatal("no rotation succeeded")
	}
}

// Redelivering a dead delivery redrives it through the region's writer
// (RegistryConfig.Jobs), not the store directly: a writer with its own
// clock stamps the redrive.
func TestRedeliverRedrivesThroughJobs(t *testing.T) {
	t.Parallel()
	writerNow := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var w *engine.Jobs
	r, st, _ := newRegistry(t, func(c *RegistryConfig) {
		var err error
		if w, err = engine.NewJobs(engine.JobsConfig{Store: c.Store, Now: func() time.Time { return writerNow }}); err != nil {
			t.Fatal(err)
		}
		c.Jobs = w
	})
	ctx := context.Background()
	if _, _, _, err := r.Put(ctx, SubscriberSpec{ID: "s", URL: "https://example.com/hook", Topics: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	res, err := r.Publish(ctx, Event{Topic: "t", ID: "e1", Payload: []byte(`{}`)})
	if err != nil || len(res.Deliveries) != 1 {
		t.Fatalf("publish: %+v, %v", res, err)
	}
	id := res.Deliveries[0].ID
	if _, err := st.Cancel(ctx, id, writerNow.Add(-time.Hour)); err != nil { // a dead letter
		t.Fatal(err)
	}
	if _, err := r.Redeliver(ctx, id); err != nil {
		t.Fatal(err)
	}
	j, err := st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	last := j.History[len(j.History)-1]
	if j.State != job.StateWaiting || last.Outcome != job.ClassRedriven || !last.At.Equal(writerNow) {
		t.Fatalf("job %s, last history %+v; want waiting, redriven at the writer's clock %v", j.State, last, writerNow)
	}
}
