package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane/internal/bench"
	"github.com/ratelane/ratelane/internal/upstream"
)

// The Go peers (River, asynq) share one workload driver: it owns the
// simulator, the clock and the counting, and talks to the peer only through
// the small queue interface below. Each peer's adapter turns that interface
// into its library's idiomatic calls (bulk insert, priorities, how a
// handler asks to wait after a 429), so every peer gets the same work,
// measured the same way, and is scored by internal/bench's scorers.

// class says which priority a flood job has; the zero value is neither.
type class string

const (
	classInteractive class = "interactive" // flood's high-priority jobs
	classBatch       class = "batch"       // flood's low-priority backlog
)

// job is one unit of work as every Go peer stores it (River job args,
// asynq task payload).
type job struct {
	// URL is the simulator route to POST to; empty for a no-op job.
	URL string `json:"url,omitempty"`
	// Dest names the destination whose limiter paces the job (upstreams).
	Dest string `json:"dest,omitempty"`
	// Class is the flood priority class, empty elsewhere.
	Class class `json:"class,omitempty"`
	// EnqueuedNs is when the job was handed to the queue, Unix nanoseconds
	// (enqueue-to-start is measured from it).
	EnqueuedNs int64 `json:"enqueued_ns,omitempty"`
}

// rateLimitedError is what the shared handler returns when the upstream
// answered 429: each adapter turns it into its library's way of waiting
// RetryAfter without counting a failure (River: JobSnooze; asynq:
// RetryDelayFunc and IsFailure).
type rateLimitedError struct {
	// RetryAfter is the upstream's Retry-After; 0 when it sent none.
	RetryAfter time.Duration
}

// Error says the job was rate limited (no payload, no URL).
func (e *rateLimitedError) Error() string {
	return fmt.Sprintf("rate limited, retry after %v", e.RetryAfter)
}

// workFunc handles one job; id is the peer's id of the job, stable across
// retries (sent as webhook-id). It returns nil on success, a
// *rateLimitedError on 429, any other error for a retry with the peer's
// default backoff.
type workFunc func(ctx context.Context, id string, j job) error

// queue is one peer under test, opened empty with its handler registered
// and its workers not yet started.
type queue interface {
	// insert enqueues jobs with one bulk insert call where the peer has
	// one.
	insert(ctx context.Context, jobs []job) error
	// start starts the workers.
	start(ctx context.Context) error
	// close stops the workers and removes everything the peer created
	// (schema, file, Redis keys). It is called exactly once.
	close() error
}

// opener opens a fresh queue whose workers (workers at once) run work.
type opener func(ctx context.Context, env *env, workers int, work workFunc) (queue, error)

// env is what every peer may use: where the databases are, and the HTTP
// client the handlers post with.
type env struct {
	postgresURL string
	redisAddr   string
	redisDB     int
	bullmqDir   string
	smoke       bool
	http        *http.Client
	log         io.Writer
	// phase is where in the upstream simulator's second this run's
	// upstreams senders start (bench.Options.Phase), the same for every
	// system in the run.
	phase time.Duration
	// sqliteGapCheckpoint is ratelane-sqlite's
	// bench.Options.SQLiteGapCheckpoint and sqliteGapCheckpointBeside the
	// negation of its SQLiteGapCheckpointOnWriter
	// (--sqlite-gap-checkpoint, --sqlite-gap-checkpoint-beside), so that
	// the throughput of a load with no batch lane can be compared with the
	// gap checkpoints on and off.
	sqliteGapCheckpoint       int
	sqliteGapCheckpointBeside bool
}

// post delivers a job to a simulator route with id as webhook-id and maps
// the answer: 2xx nil, 429 (or 503 with Retry-After) *rateLimitedError,
// anything else an error.
func (e *env) post(ctx context.Context, url, id string) error {
	status, retryAfter, err := bench.Deliver(ctx, e.http, url, id)
	switch {
	case err != nil:
		return err
	case status >= 200 && status < 300:
		return nil
	case bench.RateLimited(status, retryAfter):
		return &rateLimitedError{RetryAfter: retryAfter}
	default:
		return fmt.Errorf("upstream answered %d", status)
	}
}

// sim starts a simulator with routes; the caller closes it.
func newSim(routes map[string]upstream.RouteConfig) (*upstream.Server, error) {
	return upstream.New(upstream.Config{Routes: routes, Seed: 1})
}

// insertAll inserts jobs in bulk calls of at most batch jobs.
func insertAll(ctx context.Context, q queue, jobs []job, batch int) error {
	for i := 0; i < len(jobs); i += batch {
		if err := q.insert(ctx, jobs[i:min(len(jobs), i+batch)]); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	}
	return nil
}

// closeQueue closes q and, when the run itself succeeded, reports a
// failure to clean up as the run's error.
func closeQueue(q queue, err *error) {
	if cerr := q.close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("clean up: %w", cerr)
	}
}

// idSet is a concurrency-safe set of job ids.
type idSet struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// add adds id and reports whether it was new.
func (s *idSet) add(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]struct{}{}
	}
	if _, ok := s.ids[id]; ok {
		return false
	}
	s.ids[id] = struct{}{}
	return true
}

func (s *idSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

// durations is a concurrency-safe list of waits.
type durations struct {
	mu sync.Mutex
	ds []time.Duration
}

func (d *durations) add(w time.Duration) {
	d.mu.Lock()
	d.ds = append(d.ds, w)
	d.mu.Unlock()
}

// percentiles returns the nearest-rank percentiles ps of the waits, in ms.
func (d *durations) percentiles(ps ...float64) []float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = bench.Percentile(d.ds, p)
	}
	return out
}

// runThroughput runs the throughput workload (bench.Throughput) on a Go
// peer: bulk inserts with no worker running, the drain, then a steady load
// for enqueue-to-start.
func runThroughput(ctx context.Context, e *env, open opener) (_ bench.Result, err error) {
	plan := bench.Throughput(e.smoke)
	var (
		done    atomic.Int64
		measure atomic.Bool
		waits   durations
	)
	q, err := open(ctx, e, plan.Workers, func(_ context.Context, _ string, j job) error {
		if measure.Load() {
			waits.add(time.Since(time.Unix(0, j.EnqueuedNs)))
		}
		done.Add(1)
		return nil
	})
	if err != nil {
		return bench.Result{}, err
	}
	defer closeQueue(q, &err)
	t0 := time.Now()
	if err := insertAll(ctx, q, make([]job, plan.Jobs), plan.InsertBatch); err != nil {
		return bench.Result{}, err
	}
	var o bench.ThroughputOutcome
	o.InsertRate = float64(plan.Jobs) / time.Since(t0).Seconds()
	t1 := time.Now()
	if err := q.start(ctx); err != nil {
		return bench.Result{}, err
	}
	if err := bench.WaitFor(ctx, func() bool { return done.Load() >= int64(plan.Jobs) }); err != nil {
		return bench.Result{}, fmt.Errorf("drain: %w", err)
	}
	o.Rate = float64(plan.Jobs) / time.Since(t1).Seconds()

	measure.Store(true)
	o.Offered = plan.Offered(o.Rate)
	calls, err := bench.Every(ctx, plan.Period(o.Offered), plan.Latency, func() error {
		batch := make([]job, plan.SteadyBatch)
		for i := range batch {
			batch[i].EnqueuedNs = time.Now().UnixNano()
		}
		if err := q.insert(ctx, batch); err != nil {
			return fmt.Errorf("steady insert: %w", err)
		}
		return nil
	})
	if err != nil {
		return bench.Result{}, err
	}
	sent := calls * plan.SteadyBatch
	if err := bench.WaitFor(ctx, func() bool { return done.Load() >= int64(plan.Jobs+sent) }); err != nil {
		return bench.Result{}, fmt.Errorf("steady load: %w", err)
	}
	p := waits.percentiles(0.5, 0.99)
	o.P50Ms, o.P99Ms = p[0], p[1]
	return bench.ScoreThroughput(plan, o), nil
}

// runPaced runs the paced workload (bench.Paced) on a Go peer: every
// delivery inserted round-robin over the destinations, then the workers
// started, until every job succeeded once.
func runPaced(ctx context.Context, e *env, open opener) (_ bench.Result, err error) {
	plan := bench.Paced(e.smoke)
	sim, err := newSim(plan.Routes())
	if err != nil {
		return bench.Result{}, err
	}
	defer sim.Close()
	var ok idSet
	q, err := open(ctx, e, plan.Workers, func(ctx context.Context, id string, j job) error {
		err := e.post(ctx, j.URL, id)
		if err == nil {
			ok.add(id)
		}
		return err
	})
	if err != nil {
		return bench.Result{}, err
	}
	defer closeQueue(q, &err)
	var jobs []job
	for _, d := range plan.Order() {
		jobs = append(jobs, job{URL: sim.RouteURL(d.Name)})
	}
	if err := insertAll(ctx, q, jobs, 1000); err != nil {
		return bench.Result{}, err
	}
	start := time.Now()
	if err := q.start(ctx); err != nil {
		return bench.Result{}, err
	}
	if err := bench.WaitFor(ctx, func() bool { return ok.len() >= len(jobs) }); err != nil {
		return bench.Result{}, fmt.Errorf("%d of %d jobs succeeded: %w", ok.len(), len(jobs), err)
	}
	return bench.ScorePaced(plan, sim.Stats(), start), nil
}

// runFlood runs the flood workload (bench.Flood) on a Go peer: a batch
// backlog at low priority, then interactive jobs at high priority for the
// window; the rest of the backlog is discarded when the peer is closed.
func runFlood(ctx context.Context, e *env, open opener) (_ bench.Result, err error) {
	plan := bench.Flood(e.smoke)
	sim, err := newSim(plan.Routes())
	if err != nil {
		return bench.Result{}, err
	}
	defer sim.Close()
	url := sim.RouteURL(plan.Route)
	var (
		interDone idSet
		waits     durations
		batchOK   atomic.Int64
	)
	q, err := open(ctx, e, plan.Workers, func(ctx context.Context, id string, j job) error {
		err := e.post(ctx, j.URL, id)
		switch {
		case err != nil:
		case j.Class == classInteractive:
			// Enqueue to successful delivery: a first attempt that gets a
			// 429 has not served whoever is waiting.
			if interDone.add(id) {
				waits.add(time.Since(time.Unix(0, j.EnqueuedNs)))
			}
		default:
			batchOK.Add(1)
		}
		return err
	})
	if err != nil {
		return bench.Result{}, err
	}
	defer closeQueue(q, &err)
	backlog := make([]job, plan.Backlog)
	for i := range backlog {
		backlog[i] = job{URL: url, Class: classBatch}
	}
	if err := insertAll(ctx, q, backlog, 1000); err != nil {
		return bench.Result{}, err
	}
	if err := q.start(ctx); err != nil {
		return bench.Result{}, err
	}
	// Let the batch work reach its pace, then measure.
	if err := bench.Sleep(ctx, time.Second); err != nil {
		return bench.Result{}, err
	}
	b0, t0 := batchOK.Load(), time.Now()
	sent, err := bench.Every(ctx, time.Second/time.Duration(plan.InteractiveRate), plan.Window, func() error {
		j := job{URL: url, Class: classInteractive, EnqueuedNs: time.Now().UnixNano()}
		if err := q.insert(ctx, []job{j}); err != nil {
			return fmt.Errorf("interactive insert: %w", err)
		}
		return nil
	})
	if err != nil {
		return bench.Result{}, err
	}
	batch, span := batchOK.Load()-b0, time.Since(t0).Seconds()
	if err := bench.WaitFor(ctx, func() bool { return interDone.len() >= sent }); err != nil {
		return bench.Result{}, fmt.Errorf("%d of %d interactive jobs succeeded: %w", interDone.len(), sent, err)
	}
	p := waits.percentiles(0.5, 0.99, 1)
	return bench.ScoreFlood(plan, bench.FloodOutcome{
		Interactive: sent, P50Ms: p[0], P99Ms: p[1], MaxMs: p[2],
		BatchInWindow: batch, WindowSeconds: span,
	}, sim.Stats()), nil
}
