package bench

import (
	"context"
	"fmt"
	"os"
	"runtime/trace"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/engine"
)

// ExecTraceMax bounds the batch-isolation workload's --exec-trace capture,
// which starts with the baseline phase (20 s): a runtime/trace of a 2-core
// process under a sweep grows by a few hundred KB a second, and the sweep's
// first 25 s hold a few hundred in-sweep reviews.
const ExecTraceMax = 45 * time.Second

// execTrace is the batch-isolation workload's --exec-trace recorder: a
// runtime/trace (go tool trace) of the baseline phase and the sweep's
// first stretch, ExecTraceMax in all, annotated so that an interactive review's latency can be laid on the
// goroutines that served it. Its log events (category, then message):
//
//   - "rl.sync": the wall clock at the capture's start (Unix ns), to map
//     the wall times below onto the trace's clock;
//   - "rl.phase": the phase that begins ("sweep");
//   - "rl.stage": "lane stage id parent start end" for every
//     interactive-lane stage span (engine.StageSpan; Unix ns), logged on
//     the goroutine that ended the stage (the worker for start and run,
//     the finisher, the aggregation loop, the publisher);
//   - "rl.review": "phase id start submitted end" for every interactive
//     review (Unix ns: submitted, Submit's return; end, the bench's
//     notice of the publication), logged on the bench's goroutine that
//     submitted and waited for it.
//
// Ids and times only: no payload, prompt or diff.
type execTrace struct {
	path string
	// bound is the capture's longest run; ExecTraceMax when zero.
	bound time.Duration
	f     *os.File
	stop  chan struct{}
	done  chan struct{}
}

// Name names the recorder's plug-in.
func (x *execTrace) Name() string { return "bench-exec-trace" }

// Bind listens for the region's stage spans.
func (x *execTrace) Bind(_ context.Context, r *ratelane.PluginRegion) error {
	return r.OnStage(x.span)
}

// span logs an interactive stage span while the capture runs.
func (x *execTrace) span(s engine.StageSpan) {
	if s.Lane != "interactive" || !trace.IsEnabled() {
		return
	}
	trace.Log(context.Background(), "rl.stage", fmt.Sprintf("%s %s %s %s %d %d", s.Lane, s.Stage, s.ID, orDash(s.Parent),
		s.Start.UnixNano(), s.End.UnixNano()))
}

// review logs one interactive review while the capture runs.
func (x *execTrace) review(ctx context.Context, phase, id string, start, submitted, end time.Time) {
	if x == nil || !trace.IsEnabled() {
		return
	}
	trace.Log(ctx, "rl.review", fmt.Sprintf("%s %s %d %d %d", phase, id, start.UnixNano(), submitted.UnixNano(), end.UnixNano()))
}

// phase logs the start of a phase while the capture runs.
func (x *execTrace) phase(name string) {
	if x == nil || !trace.IsEnabled() {
		return
	}
	trace.Log(context.Background(), "rl.phase", name)
}

// orDash is s, or "-" when empty (a field of a space-separated message).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// start begins the capture; it ends after at most its bound, or at
// finish, whichever is first.
func (x *execTrace) start() error {
	if x == nil {
		return nil
	}
	f, err := os.Create(x.path)
	if err != nil {
		return fmt.Errorf("--exec-trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return fmt.Errorf("--exec-trace: %w", err)
	}
	trace.Log(context.Background(), "rl.sync", fmt.Sprint(time.Now().UnixNano()))
	x.f, x.stop, x.done = f, make(chan struct{}), make(chan struct{})
	go func() {
		defer close(x.done)
		bound := x.bound
		if bound <= 0 {
			bound = ExecTraceMax
		}
		t := time.NewTimer(bound)
		defer t.Stop()
		select {
		case <-t.C:
		case <-x.stop:
		}
		trace.Stop()
	}()
	return nil
}

// finish ends the capture (if it still runs) and closes its file.
func (x *execTrace) finish() error {
	if x == nil || x.f == nil {
		return nil
	}
	close(x.stop)
	<-x.done
	err := x.f.Close()
	x.f = nil
	return err
}
