package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/cpulabel"
	"github.com/ratelane/ratelane/review"
)

// interactiveReviews submits the batch-isolation workloads' interactive
// reviews (interactiveRequest) and times each from its Submit until the
// bench sees it published: batch-isolation's phases and batch-floor's
// windows pace them each their own way (a tick of the workload's rate,
// next) and submit each through submit, so that both workloads submit,
// wait for and time a review the same way and their figures stay
// comparable.
type interactiveReviews struct {
	ctx  context.Context
	rv   *review.Plugin
	c    *ratelane.Client
	pubs *publications
	// reads counts the bench's own store reads waiting for the reviews
	// (publications.wait): what the measurement costs the process it
	// measures.
	reads atomic.Int64
	tr    *tailTrace // nil: no --trace-tail
	xt    *execTrace // nil: no --exec-trace

	seq  int // the last review's number; the pacing loop alone touches it
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error // failed reviews since the last failures
}

// next waits for tick. When ctx ends first it waits for the reviews in
// flight and returns ctx's error.
func (ir *interactiveReviews) next(tick <-chan time.Time) error {
	select {
	case <-ir.ctx.Done():
		ir.wg.Wait()
		return ir.ctx.Err()
	case <-tick:
		return nil
	}
}

// submit starts the next review in a goroutine; phase names it in the
// traces. Once it is published, record gets its submit instant and
// latency, under a lock (one record at a time); a review that fails is
// kept for failures instead.
func (ir *interactiveReviews) submit(phase string, record func(start time.Time, lat time.Duration)) {
	ir.seq++
	n := ir.seq
	ir.wg.Add(1)
	go func() {
		defer ir.wg.Done()
		start, err := ir.one(phase, n)
		lat := time.Since(start)
		ir.mu.Lock()
		defer ir.mu.Unlock()
		if err != nil {
			ir.errs = append(ir.errs, err)
			return
		}
		record(start, lat)
	}()
}

// one submits review n and waits until it is published; it returns when
// it submitted it.
func (ir *interactiveReviews) one(phase string, n int) (time.Time, error) {
	cpulabel.Set(cpulabel.Interactive)
	start := time.Now()
	s, err := ir.rv.Submit(ir.ctx, interactiveRequest(n))
	if err != nil {
		return start, err
	}
	submitted := time.Now()
	cpulabel.Set(cpulabel.BenchWait) // the bench's own reads
	if err := ir.pubs.wait(ir.ctx, ir.c, s.ID, &ir.reads); err != nil {
		return start, err
	}
	end := time.Now()
	ir.tr.review(s.ID, phase, start, end)
	ir.xt.review(ir.ctx, phase, s.ID, start, submitted, end)
	return start, nil
}

// wait waits for every review submitted so far to be published (or fail).
func (ir *interactiveReviews) wait() { ir.wg.Wait() }

// failures joins the reviews that failed since the last call into one
// error (nil for none) and forgets them.
func (ir *interactiveReviews) failures() error {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	err := joinFailures(ir.errs)
	ir.errs = nil
	return err
}

// joinFailures joins a phase's failed reviews into one error (nil for none).
func joinFailures(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%d interactive reviews failed, the first: %w", len(errs), errs[0])
}

// interactiveRequest is interactive review n of the batch-isolation
// workloads: one file, on the "interactive" provider, published nowhere.
func interactiveRequest(n int) review.Request {
	return review.Request{Region: "us", Provider: "interactive", Repo: "acme/app", Change: fmt.Sprint(n),
		Diff: fileDiff("app", n), Depth: "full", Publish: review.Publish{Kind: "none"}}
}
