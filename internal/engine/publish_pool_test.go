package engine_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// pubObserver records what the engine reports about publications.
type pubObserver struct {
	mu      sync.Mutex
	results map[string]int // kind/result -> count
	queued  int
}

func (o *pubObserver) Finished(*job.Job, job.Outcome, store.Transition) {}
func (o *pubObserver) Leased(int)                                       {}
func (o *pubObserver) Publication(kind, result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.results[kind+"/"+result]++
}
func (o *pubObserver) PublicationsQueued(delta int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.queued += delta
}

func (o *pubObserver) snapshot() (map[string]int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for k, v := range o.results {
		out[k] = v
	}
	return out, o.queued
}

func succeed() engine.Handler {
	return engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
		return job.Outcome{Class: job.ClassSuccess, Result: []byte(`{"ok":true}`)}
	})
}

func jobOf(kind string) *job.Job {
	j := storetest.NewJob("acme", job.LaneBatch, "k")
	j.Kind = kind
	return j
}

func stateOf(t *testing.T, s store.Store, id string) job.State {
	t.Helper()
	j, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j.State
}

// TestSlowPublisherDoesNotHoldFinishes: while one job's Publisher blocks
// (a GitHub call that takes its time), the engine still finishes other
// jobs and publishes other validated jobs. Publishers used to run inside
// the finish loop, so the blocked call held every later outcome of the
// engine unwritten.
func TestSlowPublisherDoesNotHoldFinishes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		slow := &gatedPublisher{calls: map[string]int{}, gate: make(chan struct{})}
		fast := &gatedPublisher{calls: map[string]int{}}
		obs := &pubObserver{results: map[string]int{}}
		blocked := jobOf("slow")
		insertNow(t, s, blocked)
		e := start(t, engine.Config{Store: s, Observer: obs, Kinds: map[string]engine.Kind{
			"slow":  {Handler: succeed(), Publisher: slow},
			"fast":  {Handler: succeed(), Publisher: fast},
			"plain": noop(),
		}})
		t.Cleanup(slow.release) // before the engine's Stop (cleanups run last first), even if the test fails
		synctest.Wait()
		if slow.in.Load() != 1 {
			t.Fatalf("%d calls of the slow publisher, want 1 (blocked)", slow.in.Load())
		}

		plain, published := jobOf("plain"), jobOf("fast")
		insertNow(t, s, plain, published)
		e.Notify()
		time.Sleep(time.Second) // virtual: a few polls
		synctest.Wait()
		if got := stateOf(t, s, plain.ID); got != job.StatePublished {
			t.Fatalf("a job without a publication step is %s while another job's Publisher blocks, want published", got)
		}
		fast.mu.Lock()
		calls := fast.calls[published.ID]
		fast.mu.Unlock()
		if got := stateOf(t, s, published.ID); got != job.StatePublished || calls != 1 {
			t.Fatalf("another validated job is %s after %d Publisher calls while one Publisher blocks, want published after 1", got, calls)
		}
		if got := stateOf(t, s, blocked.ID); got != job.StateValidated {
			t.Fatalf("the job whose Publisher blocks is %s, want validated", got)
		}
		if _, queued := obs.snapshot(); queued != 1 {
			t.Fatalf("%d publications queued or running, want 1 (the blocked one)", queued)
		}

		slow.release()
		synctest.Wait()
		if got := stateOf(t, s, blocked.ID); got != job.StatePublished {
			t.Fatalf("after its Publisher returned the job is %s, want published", got)
		}
		results, queued := obs.snapshot()
		if queued != 0 || results["slow/published"] != 1 || results["fast/published"] != 1 || len(results) != 2 {
			t.Fatalf("observed publications %v with %d still queued; want one published of each kind, none queued", results, queued)
		}
	})
}

// TestStopBoundsPublications: Stop's deadline bounds the publications
// too. A Publisher still running when it passes is cancelled, its claim
// released and its job left validated, so the next start (of this node
// or another) publishes it at once instead of after the claim runs out.
// Stop used to wait for the Publisher however long it took.
func TestStopBoundsPublications(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		slow := &gatedPublisher{calls: map[string]int{}, gate: make(chan struct{})}
		defer slow.release() // lets the old behaviour's goroutines end
		j := jobOf("slow")
		insertNow(t, s, j)
		e := start(t, engine.Config{Store: s, LeaseFor: time.Hour, Kinds: map[string]engine.Kind{
			"slow": {Handler: succeed(), Publisher: slow},
		}})
		synctest.Wait()
		if slow.in.Load() != 1 {
			t.Fatalf("%d calls of the slow publisher, want 1 (blocked)", slow.in.Load())
		}
		stopped := make(chan struct{})
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			e.Stop(ctx)
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(time.Minute): // virtual
			t.Fatal("Stop with a 1 s deadline still waits for a blocked Publisher after a minute")
		}
		if got := stateOf(t, s, j.ID); got != job.StateValidated {
			t.Fatalf("the job whose publication Stop cancelled is %s, want validated", got)
		}
		now := time.Now()
		if err := s.ClaimPublish(context.Background(), j.ID, "next-start", now, now.Add(time.Minute)); err != nil {
			t.Fatalf("the cancelled publication's claim was not released (%v): the next start would wait an hour", err)
		}
	})
}

// TestPublishQueueOverflow: validated jobs that find the pool's queue
// full stay validated and are queued again by a sweep one reap tick
// later, not at the next periodic sweep (30 ticks).
func TestPublishQueueOverflow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		pub := &gatedPublisher{calls: map[string]int{}, gate: make(chan struct{})}
		defer pub.release()
		first := jobOf("pub")
		insertNow(t, s, first)
		e, err := engine.New(engine.Config{Store: s, Region: "us", Publishers: 1, LeaseFor: time.Hour, ReapEvery: time.Second,
			PollInterval: 5 * time.Millisecond, Kinds: map[string]engine.Kind{"pub": {Handler: succeed(), Publisher: pub}}})
		if err != nil {
			t.Fatal(err)
		}
		engine.SetPublishQueue(e, 1)
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer e.Stop(context.Background())
		synctest.Wait() // the one publisher is blocked on first
		more := []*job.Job{jobOf("pub"), jobOf("pub"), jobOf("pub")}
		insertNow(t, s, more...)
		e.Notify()
		synctest.Wait() // validated: one queued, two overflowed
		for _, j := range more {
			if got := stateOf(t, s, j.ID); got != job.StateValidated {
				t.Fatalf("job %s is %s, want validated behind the blocked publisher", j.ID, got)
			}
		}
		pub.release()
		time.Sleep(5 * time.Second) // virtual: five reap ticks, far from the 30th
		synctest.Wait()
		for _, j := range append(more, first) {
			if got := stateOf(t, s, j.ID); got != job.StatePublished {
				t.Fatalf("job %s is %s five reap ticks after the publisher was freed, want published", j.ID, got)
			}
		}
		pub.mu.Lock()
		defer pub.mu.Unlock()
		for _, j := range append(more, first) {
			if pub.calls[j.ID] != 1 {
				t.Fatalf("job %s published %d times, want once", j.ID, pub.calls[j.ID])
			}
		}
	})
}
