package bench

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
)

// heldPublisher blocks each Publish until release is closed.
type heldPublisher struct {
	entered chan struct{}
	release chan struct{}
}

func (p heldPublisher) Publish(ctx context.Context, _ *ratelane.Job) error {
	p.entered <- struct{}{}
	select {
	case <-p.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestPublicationsWaitForTheSignal: the batch-isolation bench's wait for
// a job returns on the engine's publication signal with no read of the
// job after its first: with the fallback read an hour away, only the
// signal can end it.
func TestPublicationsWaitForTheSignal(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pubs := newPublications(time.Hour)
	pub := heldPublisher{entered: make(chan struct{}, 1), release: make(chan struct{})}
	dir := t.TempDir()
	cfg := ratelane.Config{Regions: []ratelane.Region{{Name: "us", SQLitePath: filepath.Join(dir, "us.db")}}, DataDir: dir,
		Plugins: []ratelane.Plugin{pubs}}
	cfg.HandleIn("", "noop", ratelane.WorkFunc(func(context.Context, *ratelane.Job, struct{}) (any, error) { return nil, nil }), pub)
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(ctx) }()
	res, err := c.Insert(ctx, ratelane.InsertParams{Kind: "noop", Region: "us", LimitKeys: []string{"k"}, Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int64
	done := make(chan error, 1)
	go func() { done <- pubs.wait(ctx, c, res.Job.ID, &reads) }()
	testkit.Recv(t, pub.entered, testkit.Timeout, "the publication to start") // validated, its publication under way
	testkit.WaitFor(t, testkit.Timeout, "the waiter's first read", func() bool { return reads.Load() >= 1 })
	close(pub.release)
	if err := testkit.Recv(t, done, testkit.Timeout, "the wait to return on the publication signal"); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads of the job, want 1 (the first; the signal ended the wait)", n)
	}
	j, err := c.Job(ctx, "us", res.Job.ID)
	if err != nil || j.State != ratelane.StatePublished {
		t.Fatalf("job after the wait: %v, %v; want published", j, err)
	}
}
