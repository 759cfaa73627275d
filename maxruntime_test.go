package ratelane_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
)

// hangOnce ignores its context on the first attempt of a job, until
// released; later attempts succeed. It declares a 1 s maximum run time.
type hangOnce struct {
	release chan struct{}
	started chan struct{}
	once    sync.Once
}

func (h *hangOnce) MaxRunTime() time.Duration { return time.Second }

func (h *hangOnce) Work(ctx context.Context, j *ratelane.Job) (any, error) {
	if j.Attempt > 1 {
		return map[string]bool{"ok": true}, nil
	}
	h.once.Do(func() { close(h.started) })
	<-h.release // a call with no timeout, ignoring ctx
	return nil, nil
}

// TestHandlerMaxRunTime is issue 10 item 7 through the library: a
// handler that ignores its cancelled context past its kind's maximum run
// time (declared with RunTimeBound) is abandoned; the attempt is recorded
// as a timeout and the retry publishes while the stuck goroutine still
// blocks, which ratelane_handlers_stuck shows until it returns.
func TestHandlerMaxRunTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	h := &hangOnce{release: make(chan struct{}), started: make(chan struct{})}
	cfg := ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}}, Workers: 1, Registry: reg}
	cfg.Handle("hang", h)
	c := startClient(t, cfg)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(h.release) }) }) // runs before Stop
	res, err := c.Insert(ctx, ratelane.InsertParams{Kind: "hang", Region: "us", LimitKeys: []string{"k"}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, h.started, testkit.Timeout, "the first attempt to start")
	j := waitForJob(t, c, res.Job.ID, testkit.Timeout, "the stuck attempt to be abandoned and the retry to publish",
		func(j *ratelane.Job) bool { return j.State == ratelane.StatePublished })
	if len(j.History) != 2 || !strings.Contains(j.History[0].Error, "maximum run time 1s exceeded") || j.Attempts.Transient != 1 {
		t.Fatalf("history %+v, attempts %+v; want a timeout (transient) then a success", j.History, j.Attempts)
	}
	if got := gauge(t, reg, "ratelane_handlers_stuck"); got != 1 {
		t.Fatalf("ratelane_handlers_stuck = %v while the first attempt still blocks, want 1", got)
	}
	release.Do(func() { close(h.release) })
	testkit.WaitFor(t, testkit.Timeout, "ratelane_handlers_stuck to return to 0 after the handler returned",
		func() bool { return gauge(t, reg, "ratelane_handlers_stuck") == 0 })
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}
