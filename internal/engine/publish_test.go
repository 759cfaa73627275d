package engine_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// gatedPublisher counts Publish calls per job and, while gate is open
// (non-nil), blocks each call until the gate is closed.
type gatedPublisher struct {
	mu    sync.Mutex
	calls map[string]int
	gate  chan struct{}
	in    atomic.Int64 // calls started
	once  sync.Once
}

// release opens the gate for good (once; later calls do nothing).
func (p *gatedPublisher) release() {
	p.once.Do(func() {
		p.mu.Lock()
		close(p.gate)
		p.gate = nil
		p.mu.Unlock()
	})
}

func (p *gatedPublisher) Publish(ctx context.Context, j *job.Job) error {
	p.mu.Lock()
	p.calls[j.ID]++
	gate := p.gate
	p.mu.Unlock()
	p.in.Add(1)
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// TestPublishOnceAmongLiveEngines checks invariant 2 among live callers:
// while one engine's Publisher is still delivering a validated job, a
// second engine on the same store (another node) starts and sweeps the
// validated jobs, as every engine does at start. It must not deliver them
// a second time; without the publication claim it did.
func TestPublishOnceAmongLiveEngines(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	pub := &gatedPublisher{calls: map[string]int{}, gate: make(chan struct{})}
	release := pub.release
	kind, j := publishedKind(t, s, pub)
	start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"pub": kind}})
	t.Cleanup(release) // before the engine's Stop (cleanups run last first): Stop waits for the Publisher
	testkit.WaitFor(t, testkit.Timeout, "the job's publication to start on the first engine", func() bool { return pub.in.Load() == 1 })

	// The second node: its start-up sweep finds the validated job and must
	// be refused the claim while the first engine's call runs.
	claims := &claimCounter{Store: s}
	start(t, engine.Config{Store: claims, Kinds: map[string]engine.Kind{"pub": kind}})
	testkit.WaitFor(t, testkit.Timeout, "the second engine's start-up sweep to try the job", func() bool { return claims.refused.Load() >= 1 })
	if got := pub.in.Load(); got != 1 {
		t.Fatalf("%d Publisher calls started while the first engine's was still running, want none more", got-1)
	}
	release()
	waitFinal(t, s, testkit.Timeout)
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if c := pub.calls[j.ID]; c != 1 {
		t.Fatalf("%d Publisher calls, want 1", c)
	}
}

// publishedKind returns kind "pub", whose handler succeeds and whose
// publisher is pub, and a job of that kind inserted in s: the setup of
// the publication tests.
func publishedKind(t *testing.T, s store.Store, pub engine.Publisher) (engine.Kind, *job.Job) {
	t.Helper()
	kind := engine.Kind{Handler: engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
		return job.Outcome{Class: job.ClassSuccess, Result: []byte(`{"ok":true}`)}
	}), Publisher: pub}
	j := storetest.NewJob("acme", job.LaneBatch, "k")
	j.Kind = "pub"
	insertNow(t, s, j)
	return kind, j
}

// claimCounter is a store that counts the publication claims asked for
// and those it refused.
type claimCounter struct {
	store.Store
	calls, refused atomic.Int64
}

func (c *claimCounter) ClaimPublish(ctx context.Context, id, token string, now, until time.Time) error {
	c.calls.Add(1)
	err := c.Store.ClaimPublish(ctx, id, token, now, until)
	if errors.Is(err, store.ErrConflict) {
		c.refused.Add(1)
	}
	return err
}

// TestPublishAfterAbandonedClaim checks the other half: a claim whose
// holder died (taken here straight on the store, as a crashed node would
// have left it) is not overridden while it holds, and the job is
// published once it runs out, without waiting for the periodic sweep.
func TestPublishAfterAbandonedClaim(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	pub := &gatedPublisher{calls: map[string]int{}}
	ran := make(chan time.Time, 1)
	kind, j := publishedKind(t, s, pub)
	// A first engine validates the job, but its publisher never gets to
	// run: the dead node's claim below holds the publication.
	hold := &claimHolder{Store: s, ran: ran}
	start(t, engine.Config{Store: hold, Kinds: map[string]engine.Kind{"pub": kind}, LeaseFor: time.Second,
		HeartbeatEvery: 200 * time.Millisecond, ReapEvery: 50 * time.Millisecond})
	until := testkit.Recv(t, ran, testkit.Timeout, "the dead node's claim")
	var got *job.Job
	testkit.WaitFor(t, testkit.Timeout, "the job to be published after the dead claim ran out", func() bool {
		got = getJob(t, s, j.ID)
		return got.State == job.StatePublished
	})
	// The engine's clock, read where it publishes, against the claim's
	// end on the same clock: no measure of the test's own pace.
	if got.FinishedAt.Before(until) {
		t.Fatalf("published at %v, before the dead node's claim ran out at %v; the claim was overridden", got.FinishedAt, until)
	}
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if c := pub.calls[j.ID]; c != 1 {
		t.Fatalf("%d Publisher calls, want 1", c)
	}
}

// claimHolder takes a validated job's publication claim for a node that
// then dies, just before this engine's first claim of it.
type claimHolder struct {
	store.Store
	once sync.Once
	ran  chan time.Time // the dead claim's end
}

func (c *claimHolder) ClaimPublish(ctx context.Context, id, token string, now, until time.Time) error {
	c.once.Do(func() {
		if err := c.Store.ClaimPublish(ctx, id, "dead-node", now, now.Add(time.Second)); err != nil {
			panic(err)
		}
		c.ran <- now.Add(time.Second)
	})
	return c.Store.ClaimPublish(ctx, id, token, now, until)
}

// silentPublisher is a gatedPublisher (never gated) that is an
// engine.Deliverer: it delivers only what deliver says.
type silentPublisher struct {
	gatedPublisher
	deliver bool
}

func (p *silentPublisher) Delivers(*job.Job) bool { return p.deliver }

// TestPublishNothingToDeliverTakesNoClaim: a job whose Publisher says it
// delivers nothing is recorded published without a publication claim
// (one store write, not two) and without a Publisher call; one that
// delivers still claims and calls it once.
func TestPublishNothingToDeliverTakesNoClaim(t *testing.T) {
	t.Parallel()
	for _, deliver := range []bool{false, true} {
		s := newStore(t)
		pub := &silentPublisher{gatedPublisher: gatedPublisher{calls: map[string]int{}}, deliver: deliver}
		kind, j := publishedKind(t, s, pub)
		claims := &claimCounter{Store: s}
		start(t, engine.Config{Store: claims, Kinds: map[string]engine.Kind{"pub": kind}})
		testkit.WaitFor(t, testkit.Timeout, "the job's publication", func() bool {
			return getJob(t, s, j.ID).State == job.StatePublished
		})
		want := 0
		if deliver {
			want = 1
		}
		pub.mu.Lock()
		calls := pub.calls[j.ID]
		pub.mu.Unlock()
		if got := claims.calls.Load(); got != int64(want) || calls != want {
			t.Fatalf("Delivers %v: %d publication claims and %d Publisher calls; want %d of each", deliver, got, calls, want)
		}
	}
}
