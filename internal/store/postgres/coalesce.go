package postgres

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Coalescing of small inserts. Single-job HTTP enqueues arrive as many
// concurrent Insert calls of one job each. Each in its own transaction is a
// commit (a WAL flush) per job, and calls into one group queue on the
// group row, which each holds until its commit: 64 clients on 16 groups ran
// at ~800 inserts/s under load (docs/benchmarks.md, issue 13). An inserter
// instead takes every call waiting at the moment into one transaction:
// one round trip and one commit for all of them, with no timer: a call
// that finds a flusher free is sent at once, and calls that arrive while
// flushers are busy wait for the next free one and go together.
const (
	// coalesceMaxCall is the largest call coalesced; larger ones are
	// batches already and go alone.
	coalesceMaxCall = 64
	// coalesceMaxJobs bounds the jobs of one coalesced transaction.
	coalesceMaxJobs = 1000
	// coalesceFlushers is how many coalesced transactions may be in
	// flight at once: while one waits for its commit the next gathers.
	coalesceFlushers = 4
)

// inserter coalesces concurrent small Insert calls of one Store. Its
// flusher goroutines run only while calls wait; close waits for them.
type inserter struct {
	s  *Store
	wg sync.WaitGroup

	mu      sync.Mutex
	queue   []*insertCall
	running int // flushers started and not yet returned
	calls   int // calls queued or being inserted (pending)
}

// insertCall is one Insert call waiting in an inserter.
type insertCall struct {
	ctx  context.Context
	jobs []*job.Job
	def  admission.Config
	// check: ctx asks for the cost check (store.WithCostCheck); only
	// calls that agree go together, since the transaction takes the
	// first call's context values.
	check bool
	// Set by the flusher before done is closed.
	res []store.InsertResult
	err error
	// alone: the coalesced transaction failed on a statement, which one
	// call's jobs may have caused; each call is retried by itself so that
	// only its own jobs decide its result.
	alone bool
	done  chan struct{}
}

// insert inserts jobs with the calls waiting beside it. Once a flusher has
// taken the call it is waited for even if ctx ends, so that the caller
// learns whether its jobs were inserted; a call still queued when ctx ends
// is withdrawn and inserts nothing.
func (c *inserter) insert(ctx context.Context, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	call := &insertCall{ctx: ctx, jobs: jobs, def: def, check: store.CostCheck(ctx), done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, call)
	c.calls++
	if c.running < coalesceFlushers {
		c.running++
		c.wg.Add(1)
		go c.flush()
	}
	c.mu.Unlock()
	select {
	case <-call.done:
	case <-ctx.Done():
		if c.withdraw(call) {
			return nil, ctx.Err()
		}
		<-call.done
	}
	if call.alone {
		return c.s.insertNow(ctx, jobs, def)
	}
	return call.res, call.err
}

// withdraw removes call from the queue and reports whether it was still
// there (no flusher took it).
func (c *inserter) withdraw(call *insertCall) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, q := range c.queue {
		if q == call {
			c.queue = slices.Delete(c.queue, i, i+1)
			c.calls--
			return true
		}
	}
	return false
}

// flush inserts what waits until nothing does.
func (c *inserter) flush() {
	defer c.wg.Done()
	for {
		calls := c.take()
		if calls == nil {
			return
		}
		c.run(calls)
	}
}

// take removes and returns the oldest waiting call and the calls after it
// with the same default key configuration and cost check, up to coalesceMaxJobs jobs;
// nil (and the flusher ends) when none waits.
func (c *inserter) take() []*insertCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.running--
		return nil
	}
	first := c.queue[0]
	calls := []*insertCall{first}
	n := len(first.jobs)
	rest := c.queue[:0]
	for _, q := range c.queue[1:] {
		if n+len(q.jobs) <= coalesceMaxJobs && q.check == first.check && reflect.DeepEqual(q.def, first.def) {
			calls = append(calls, q)
			n += len(q.jobs)
		} else {
			rest = append(rest, q)
		}
	}
	clear(c.queue[len(rest):])
	c.queue = rest
	return calls
}

// run inserts the calls' jobs in one transaction and hands each call its
// part of the results.
func (c *inserter) run(calls []*insertCall) {
	defer func() {
		c.mu.Lock()
		c.calls -= len(calls)
		c.mu.Unlock()
		for _, q := range calls {
			close(q.done)
		}
	}()
	if len(calls) == 1 {
		q := calls[0]
		q.res, q.err = c.s.insertNow(q.ctx, q.jobs, q.def)
		return
	}
	var all []*job.Job
	for _, q := range calls {
		all = append(all, q.jobs...)
	}
	ctx, cancel := jointContext(calls)
	res, err := c.s.insertNow(ctx, all, calls[0].def)
	cancel()
	if err != nil {
		// A statement error (a taken id, a constraint) rolled the
		// transaction back and may be one call's doing: each call retries
		// alone. Any other error (the connection, every caller gone) is
		// every call's, and retrying could not tell whether a commit
		// whose answer was lost went through.
		var pe *pgconn.PgError
		alone := errors.As(err, &pe)
		for _, q := range calls {
			q.alone, q.err = alone, err
		}
		return
	}
	for _, q := range calls {
		q.res, res = res[:len(q.jobs):len(q.jobs)], res[len(q.jobs):]
	}
}

// jointContext returns a context for a transaction serving calls: it keeps
// the first call's values and ends when every call's context has ended, so
// a caller that gives up does not cancel the others' insert.
func jointContext(calls []*insertCall) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
	var left atomic.Int64
	left.Store(int64(len(calls)))
	stops := make([]func() bool, len(calls))
	for i, q := range calls {
		stops[i] = context.AfterFunc(q.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// pending returns how many calls are queued or being inserted.
func (c *inserter) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// close waits for the flushers; no insert may be running or start.
func (c *inserter) close() { c.wg.Wait() }
