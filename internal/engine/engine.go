// Package engine runs jobs: it leases admitted jobs from one region's store,
// runs their handlers on a bounded worker pool, heartbeats long leases,
// turns each handler's outcome into a guarded transition (the only code that
// changes job state), recovers expired leases, expires deadlines, prunes
// finished jobs and publishes validated results exactly once.
//
// Nobody sleeps on a 429: a rate-limited outcome becomes a transition that
// pauses the limit key in the store and releases the lease at once.
package engine

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane/internal/cpulabel"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Handler runs one attempt of a job and says how it went. Handlers never
// change job state; they return an outcome and the engine decides.
type Handler interface {
	Handle(ctx context.Context, j *job.Job) job.Outcome
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, j *job.Job) job.Outcome

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, j *job.Job) job.Outcome { return f(ctx, j) }

// Publisher delivers a validated result. It must be idempotent (the engine
// may call it again after a crash between delivery and the compare-and-set
// that records it); the store's validated -> published compare-and-set makes
// the recorded publication happen once.
type Publisher interface {
	Publish(ctx context.Context, j *job.Job) error
}

// Kind is how the engine runs one job kind.
type Kind struct {
	Handler Handler
	// Publisher, when set, makes success go to validated and then publishes;
	// without it success goes straight to published.
	Publisher Publisher
	// MaxRunTime bounds one attempt of this kind; zero means
	// Config.MaxRunTime. See Config.MaxRunTime for what happens past it.
	MaxRunTime time.Duration

	// Aggregate, when set, makes the kind's jobs parents aggregated from
	// parts (parts.go): inserted accepted with their parts by
	// Jobs.InsertParts, advanced by the engine with Aggregate's outcome
	// once every part is final, exactly once across engines and crashes.
	// Handler may then be nil: the engine runs a redriven parent by
	// aggregating it again.
	Aggregate Aggregator
	// PartKinds are the kinds of the parent's parts; empty means every
	// child job of the parent's tenant and region. A kind whose parents
	// also have children that are not parts (deliveries of its result,
	// say) names its part kinds.
	PartKinds []string
	// SweepEvery is how often the engine re-checks this kind's parents
	// of parts finished since its last check and the wake-ups it missed;
	// every 15th check (and the first, at start) reads every accepted
	// parent, repairing a crash (sweepParents). Default DefaultSweepEvery.
	SweepEvery time.Duration
	// Computes declares that the kind's handler spends its time computing
	// in this process (parsing, validating, aggregating) rather than
	// waiting on something outside it (an HTTP call, a subscriber, a
	// provider's answer). Only computing batch-lane jobs take a turn of
	// the batch lane's CPU governor (Config.BatchCPUs): a waiting kind's
	// batch jobs are leased under their keys' pacing and the worker slots
	// alone, as they would be with the governor off, since a turn held
	// while waiting would leave a core idle and serialize the waits (one
	// turn ran webhook deliveries one at a time: docs/benchmarks.md,
	// "Session 15: the merge, quiet (lead)"). The zero value is waiting:
	// the governor never slows a kind that did not ask for it. A kind
	// with an Aggregate and no Handler computes (its redriven parents are
	// aggregated). The interactive lane ignores it.
	Computes bool
}

// DefaultMaxRunTime is Config.MaxRunTime's default: long enough for a slow
// LLM call or a large webhook batch, short enough that a handler stuck on a
// call with no timeout gives its job back within the hour.
const DefaultMaxRunTime = 15 * time.Minute

// DefaultBatchShare is batch work's minimum share of starts (Config and
// JobsConfig BatchShare) while the interactive lane is within its budget.
const DefaultBatchShare = 0.1

// Config configures an Engine. The zero value of every optional field is
// replaced by WithDefaults.
type Config struct {
	// Store is the region's store (required).
	Store store.Store
	// Region must equal Store.Region(): wiring a worker to another region's
	// store is a start-up error.
	Region string
	// Kinds maps job kinds to their handlers. Jobs of other kinds are not
	// leased, so several engines (or external workers) may share a store.
	// Empty makes a maintenance-only engine: it leases nothing and only
	// recovers expired leases, expires deadlines and prunes. A region
	// served only by external workers needs one, or a lease its worker
	// abandoned would never be recovered.
	Kinds map[string]Kind
	// Workers is the number of jobs run at once; default 16.
	Workers int
	// LeaseFor is the lease period; default 30 s.
	LeaseFor time.Duration
	// HeartbeatEvery is how often long-running jobs' leases are extended
	// and checked for cancellation; default 500 ms (cancel within 1 s).
	HeartbeatEvery time.Duration
	// PollInterval is how long an idle engine waits before leasing again
	// when nothing woke it; default 50 ms.
	PollInterval time.Duration
	// MaxRunTime bounds one attempt of a job whose kind sets no
	// Kind.MaxRunTime; default DefaultMaxRunTime. Past it the handler's
	// context is cancelled and its lease is no longer renewed; a handler
	// that has not returned one heartbeat later is abandoned: the attempt is
	// recorded as a transient failure (the job is retried or ends
	// transient_budget_exhausted, by its budget), its keys' in-flight
	// leases are released and its worker slot is freed, through the same
	// guarded transition as any outcome. The abandoned goroutine is counted
	// (LeaseObserver) until it returns; its late outcome is dropped. At
	// most Workers abandoned goroutines free their slot: past that, a stuck
	// handler keeps its slot, so a handler stuck on every job cannot grow
	// the goroutine count without bound (the pool shrinks instead, which
	// the stuck gauge shows).
	MaxRunTime time.Duration
	// ReapEvery is how often expired leases and deadlines are handled;
	// default LeaseFor / 10.
	ReapEvery time.Duration
	// BatchShare is batch work's minimum share of starts while interactive
	// work is within budget; default 0.1. Negative means none.
	BatchShare float64
	// BatchYieldMax, when positive, turns on the yield gate (yield.go):
	// the longest one piece of batch-lane work (a computing kind's batch
	// handler, Kind.Computes; a batch parent's aggregation; a batch job's
	// publication) waits while interactive work is in flight in this
	// engine, which counts from an interactive job's insert through this
	// engine's writer (queued.go) to its publication. A batch handler of
	// a kind that waits (a webhook delivery) is never held. Zero takes
	// batchYieldMaxDefault, zero: the gate is off by default (its quiet
	// A/B in session 35 did not move the interactive p99; yield.go).
	// When on, a computing piece waits at it with its governor turn held,
	// after the pacer's rest, so a review in flight meets no batch piece
	// started beside it (docs/benchmarks.md, "Session 35 (s35h4)").
	// Negative turns it off.
	BatchYieldMax time.Duration
	// BatchPieces is the batch budget (budget.go): the most pieces of
	// batch-lane work (a batch parent's aggregation, a stretch of the
	// periodic sweep, a batch job's publication, and with BatchCPUs on a
	// batch job's handler) that run at once in this engine while
	// interactive work is in flight here; with none in flight only
	// BatchCPUs bounds them. Default DefaultBatchPieces (1); negative
	// turns this bound off.
	BatchPieces int
	// BatchCPUs is the batch lane's CPU governor (budget.go): when
	// positive, the most pieces of batch-lane work that compute (as for
	// BatchPieces, and the handlers of kinds that declare Kind.Computes)
	// that run at once in this engine at any time, so that interactive
	// work always finds a free core. A computing batch job is leased only
	// with a free turn, so one waiting for a turn holds no worker slot and
	// no lease. Default DefaultBatchCPUs(GOMAXPROCS); negative: off
	// (computing handlers are then not bounded, and BatchPieces alone
	// applies).
	//
	// A kind that waits rather than computes takes no turn: a webhook
	// delivery is a batch-lane job whose handler spends its time on the
	// subscriber's answer, and when every batch handler took a turn, one
	// turn serialized deliveries (`bench upstreams --smoke`: the many mix
	// 1.05 → 6.29 of ideal: docs/benchmarks.md, "Session 15: the merge,
	// quiet (lead)"). DefaultBatchCPUs is the value measured for a batch
	// lane of review sweeps.
	BatchCPUs int
	// BatchCPUShare, between 0 and 1 exclusive, turns on the batch pacer
	// (pacer.go): while interactive work is in flight in this engine or
	// was within BatchPaceWindow, after a computing piece of batch-lane
	// work (one holding a BatchCPUs turn) ran for d, no such piece starts
	// for d·(1−share)/share, so the batch lane computes about this share
	// of wall time per turn; with no interactive work about it runs at
	// full speed. Needs BatchCPUs on. Zero takes DefaultBatchCPUShare
	// (0.1); negative or 1 and more: off.
	BatchCPUShare float64
	// BatchThreadPolicy is how the batch lane's computing pieces use
	// operating-system threads (threads.go): "" (the default) as every
	// goroutine does; BatchThreadsIdle ("idle", Linux) on SCHED_IDLE
	// threads, which the kernel runs only on a core no normal thread
	// wants. Give the process spare Ps for it (GOMAXPROCS above the
	// cores, BatchCPUs set explicitly): each such piece keeps its P while
	// the kernel starves its thread. Elsewhere, or where the kernel
	// refuses, it is logged and off.
	BatchThreadPolicy string
	// InteractiveBudget is the interactive lane's latency budget; default 30 s.
	InteractiveBudget time.Duration
	// Lanes are the lanes this engine serves; empty means both. A
	// lane-dedicated engine leases only its lanes' jobs and does only
	// their background work: its aggregation loops and periodic sweep
	// take only its lanes' parents (a wake-up of another lane's parent,
	// such as a cancelled part's, is left to the sweep of a node that
	// serves it) and it re-publishes only its lanes' validated jobs. The
	// region's maintenance (expired leases, deadlines, pruning) runs in
	// every engine whatever its lanes. A job of a lane no engine of the
	// region serves waits; Jobs.PredictWait then sees its kind unserved in
	// that lane. The point is isolation by the operating system: the
	// batch lane in a process of its own at a lower priority (nice), so
	// that its CPU and its Go scheduler are not the interactive lane's
	// (docs/architecture.md, "Lane-dedicated nodes").
	Lanes []job.Lane
	// Retention is how long finished jobs are kept; default 30 days.
	Retention time.Duration
	// Backoff is the retry timing policy.
	Backoff Backoff
	// MaxBatch bounds jobs per lease call and transitions per finish call;
	// default 256.
	MaxBatch int
	// InFlight is how many finish calls the engine keeps outstanding at
	// once; default 1. With 1, outcomes wait while a finish commits: on a
	// store whose transactions run in parallel and whose time per call is
	// mostly waiting (PostgreSQL: round trips and the WAL flush), 2
	// overlaps them. Two finishes lock rows in one order, as two nodes'
	// would, so nothing else changes. On a store with one writer (SQLite)
	// the calls only queue behind it. One loop at a time takes the
	// waiting outcomes into its batch (loops.go gather): the overlap is of
	// the finish calls, not of the gathering, which split a burst of
	// outcomes into two calls.
	//
	// Lease calls are one at a time whatever InFlight is: each asks for
	// every free worker slot, and a second one beside it could only ask
	// for the slots freed meanwhile, from groups the first holds locked
	// (PostgreSQL reads and locks up to 2*Max+16 ready groups, SKIP
	// LOCKED) until its commit: with two, 62 % of a throughput drain's
	// lease calls came back empty (docs/benchmarks.md, "Session 12
	// (s12h3)"). Other nodes' leases still run beside this one's. The
	// exception is a finish that leases (store.FinishLeaser, only while
	// the fetch loop is idle: loops.go finishLease): the fetch loop may
	// wake during it and lease too. Both take their worker slots first, so
	// together they never lease more jobs than there are free slots.
	InFlight int
	// Publishers is how many validated jobs of either lane are published
	// at once, on a pool of their own (publish.go): a slow Publisher holds
	// one of them, never the finishing of other jobs; default
	// DefaultPublishers. Interactive jobs also have Workers publishers of
	// their own.
	Publishers int
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives ids and counts, never payloads; default slog.Default().
	Logger *slog.Logger
	// Observer, when set, is told of every lease and finished attempt
	// (metrics). Ignored when Jobs is set: the writer's Observer counts.
	Observer Observer
	// StageTrace, when set, is told of every stage a job passes (the
	// spans the stage histograms count, with the job's ids): a per-job
	// timeline for tracing an interactive tail (the batch-isolation
	// bench's --trace-tail). It is called on the engine's goroutines and
	// must be fast and safe for concurrent use; nil costs nothing.
	StageTrace func(StageSpan)
	// Jobs, when set, is the region's writer the engine leases and reports
	// through, shared with the HTTP API's external workers so both follow
	// one batch-share policy and reach one Observer; its BatchShare,
	// InteractiveBudget, Backoff and Observer apply, not this Config's.
	// Nil makes one from this Config.
	Jobs *Jobs
}

// Observer is told what the engine did, for metrics. Implementations must
// be fast and safe for concurrent use.
type Observer interface {
	Finished(j *job.Job, o job.Outcome, t store.Transition)
	Leased(n int)
}

// WithDefaults returns c with zero fields replaced by their defaults.
func (c Config) WithDefaults() Config {
	c.Workers = cmp.Or(c.Workers, job.DefaultWorkers)
	c.LeaseFor = cmp.Or(c.LeaseFor, job.DefaultLeaseFor)
	c.HeartbeatEvery = cmp.Or(c.HeartbeatEvery, 500*time.Millisecond)
	c.PollInterval = cmp.Or(c.PollInterval, 50*time.Millisecond)
	c.MaxRunTime = cmp.Or(c.MaxRunTime, DefaultMaxRunTime)
	c.ReapEvery = cmp.Or(c.ReapEvery, c.LeaseFor/10)
	c.BatchYieldMax = cmp.Or(c.BatchYieldMax, batchYieldMaxDefault)
	c.BatchShare = cmp.Or(c.BatchShare, DefaultBatchShare)
	c.InteractiveBudget = cmp.Or(c.InteractiveBudget, job.DefaultInteractiveBudget)
	c.Retention = cmp.Or(c.Retention, job.DefaultRetention)
	c.MaxBatch = cmp.Or(c.MaxBatch, 256)
	c.InFlight = cmp.Or(c.InFlight, 1)
	c.Publishers = cmp.Or(c.Publishers, DefaultPublishers)
	c.BatchPieces = cmp.Or(c.BatchPieces, DefaultBatchPieces)
	c.BatchCPUs = cmp.Or(c.BatchCPUs, DefaultBatchCPUs(runtime.GOMAXPROCS(0)))
	c.BatchCPUShare = cmp.Or(c.BatchCPUShare, DefaultBatchCPUShare)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Backoff = c.Backoff.WithDefaults()
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("engine: Store is required")
	case c.Region == "":
		return errors.New("engine: Region is required")
	case c.Store.Region() != c.Region:
		return fmt.Errorf("engine: region %q is wired to the store of region %q; each region needs its own store", c.Region, c.Store.Region())
	case c.Workers < 1 || c.Workers > 10000:
		return fmt.Errorf("engine: Workers must be between 1 and 10000, got %d", c.Workers)
	case c.LeaseFor < time.Second:
		return fmt.Errorf("engine: LeaseFor must be at least 1s, got %v", c.LeaseFor)
	case c.HeartbeatEvery >= c.LeaseFor:
		return fmt.Errorf("engine: HeartbeatEvery (%v) must be shorter than LeaseFor (%v)", c.HeartbeatEvery, c.LeaseFor)
	case c.BatchShare > 1:
		return fmt.Errorf("engine: BatchShare must be at most 1, got %v", c.BatchShare)
	case math.IsNaN(c.BatchCPUShare):
		return errors.New("engine: BatchCPUShare is not a number")
	case c.InFlight < 1 || c.InFlight > 8:
		return fmt.Errorf("engine: InFlight must be between 1 and 8, got %d", c.InFlight)
	case c.Publishers < 1 || c.Publishers > 256:
		return fmt.Errorf("engine: Publishers must be between 1 and 256, got %d", c.Publishers)
	case c.MaxRunTime < c.HeartbeatEvery || c.MaxRunTime > job.MaxDelay:
		return fmt.Errorf("engine: MaxRunTime must be from HeartbeatEvery (%v) to %v, got %v", c.HeartbeatEvery, job.MaxDelay, c.MaxRunTime)
	case c.Jobs != nil && c.Jobs.Store() != c.Store:
		return fmt.Errorf("engine: Jobs writes the store of region %q, not this engine's", c.Jobs.Region())
	}
	for _, l := range c.Lanes {
		if !slices.Contains(job.Lanes, l) {
			return fmt.Errorf("engine: unknown lane %q in Lanes (want %s or %s)", l, job.LaneInteractive, job.LaneBatch)
		}
	}
	for kind, k := range c.Kinds {
		if k.Handler == nil && k.Aggregate == nil {
			return fmt.Errorf("engine: kind %q has no handler", kind)
		}
		if k.MaxRunTime != 0 && (k.MaxRunTime < c.HeartbeatEvery || k.MaxRunTime > job.MaxDelay) {
			return fmt.Errorf("engine: kind %q: MaxRunTime must be from HeartbeatEvery (%v) to %v, got %v", kind, c.HeartbeatEvery, job.MaxDelay, k.MaxRunTime)
		}
	}
	return nil
}

// Engine runs the jobs of one region. Start it once; Stop is idempotent.
type Engine struct {
	cfg   Config
	kinds []string
	log   *slog.Logger

	jobs *Jobs // the region's one writer of job state
	// threads is the batch lane's thread policy (Config.BatchThreadPolicy).
	threads *threadPolicy

	wake chan struct{}
	// notifies counts Notify calls, each before its send on wake; the
	// fetch loop's seenNotifies is its value as the loop's last read
	// (pollMayLease) or lease began, noSeen after a lease that failed. A
	// wake-up with notifies still at seenNotifies is stale: every Notify
	// it carries came before that read or lease, which saw what they
	// announced, so the loop waits on instead of leasing (fetchLoop).
	notifies     atomic.Uint64
	seenNotifies uint64 // the fetch loop's only
	// woke is when the fetch loop's last wait ended, for a traced
	// queued stage (leaseNote); zero for a lease that followed another.
	woke    time.Time // the fetch loop's only
	results chan result
	// gathering (one token) is held by the finish loop that is taking
	// outcomes from results into its batch (loops.go gather), so that
	// with InFlight > 1 the loops do not split one burst of outcomes
	// between them. A channel rather than a sync.Mutex: a goroutine
	// waiting on a channel is durably blocked in a synctest bubble, one
	// waiting on a mutex is not, and the bubble's clock would stand still.
	gathering chan struct{}
	slots     chan struct{}
	stop      chan struct{}
	stopOnce  sync.Once
	wg        sync.WaitGroup
	ctx       context.Context
	cancel    context.CancelFunc
	// laneCtx is ctx marked with each lane, [0] interactive and [1]
	// batch (see laneContext); set with ctx in Start.
	laneCtx [2]context.Context

	// lastFull is whether the fetch loop's last lease returned every job
	// it asked for (so more were likely ready); only the fetch loop reads
	// and writes it.
	lastFull bool

	// life guards started and stopped, so that Stop before Start and
	// Start after Stop are answered, not a panic.
	life    sync.Mutex
	started bool
	stopped bool

	mu      sync.Mutex
	running map[string]*runningJob

	// stuck holds the abandoned attempts whose handler has not returned;
	// freed counts those of them that gave their worker slot back (both
	// guarded by mu).
	stuck map[*runningJob]struct{}
	freed int
	// draining is set (under mu) when Stop's deadline passed: every
	// handler still running is abandoned at the next heartbeat tick, so
	// Stop returns.
	draining bool

	// reapHook, set only by tests (export_test.go), runs between the
	// reaper's selection of expired leases and their recovery.
	reapHook func(expired []*job.Job)

	// aggKinds are the kinds with an Aggregator; parents and
	// batchParents queue the parent ids of the interactive and the batch
	// lane for their own aggregation loops (parts.go).
	aggKinds     []string
	parents      chan parentWake
	batchParents chan parentWake
	// sweeps counts the aggregation loop's completed sweep passes
	// (Sweeps).
	sweeps atomic.Uint64
	// missed holds the wake-ups this engine did not serve: dropped from
	// a full queue, or whose aggregation failed or was transient. The
	// next sweep pass aggregates them by id (takeMissed); missedAll says
	// more than maxMissed were dropped, and the next pass walks every
	// parent instead.
	missedMu  sync.Mutex
	missed    map[string]parentWake
	missedAll bool
	// sweptAt is the batch budget's pieces (batchWork) when the last
	// sweep pass ended: a pass whose reads find it moved takes a turn for
	// them (sweepParentsVia).
	sweptAt atomic.Int64

	// lane is the only lane the engine serves (Config.Lanes), "" when it
	// serves both: the store's lease and ready-parents filter.
	lane job.Lane

	// computing are the kinds that declare Kind.Computes: only their
	// batch jobs take a turn of the CPU governor (budget.go).
	computing []string

	// admits holds, earliest first, the times at which groups the lease
	// calls skipped (a key refused them) may be admitted; only the fetch
	// loop touches it, under admitMu.
	admitMu sync.Mutex
	admits  timeHeap
	// idle counts the fetch loops done with a lease that took fewer jobs
	// than it asked for (or none), from the moment it returned until a
	// wake-up or poll; rearm makes one of them recompute its wait (an
	// admission time another caller pushed) without leasing. A finish
	// while a fetch loop is idle leases in the same write (finishLease).
	idle  atomic.Int32
	rearm chan struct{}
	// live is set while the engine runs (from Start until Stop): an
	// insert leases in its own write only then (beginInsertLease).
	// sawInsertLease is set by every insert that leased in its own write
	// (endInsertLease): the next wake-up of an idle fetch loop first
	// reads whether a lease would take anything, as a poll does.
	live           atomic.Bool
	sawInsertLease atomic.Bool
	// wakeWhy is why the engine's own code last woke the fetch loop
	// (noteWake): a wake reason, wakeNotify when none.
	wakeWhy atomic.Uint32

	// claimPrefix and claims make each publication claim's token unique
	// to this engine and call (publish.go); publishRetryAt is when, in
	// Unix nanoseconds of cfg.Now, maintainLoop retries publications
	// another caller held (0: nothing to retry).
	claimPrefix    string
	claims         atomic.Uint64
	publishRetryAt atomic.Int64
	// pub is the publication pool (publish.go).
	pub pubPool
	// yield holds batch-lane work while interactive work runs (yield.go).
	yield *yieldGate
	// overlap times batch computing against interactive work in flight
	// (overlap.go); nil in an engine with no computing batch work.
	overlap *overlap
	// budget bounds batch-lane work at all times and more while
	// interactive work runs: the batch lane's CPU governor (budget.go).
	budget *batchBudget
	// interactive counts interactive work in flight for the yield gate,
	// the budget and the batch pacer (inflight.go): an atomic count, so
	// every interactive job enters and leaves it for nearly nothing.
	interactive *inFlight
	// queued counts interactive jobs inserted and not yet leased as
	// interactive work in flight (queued.go); nil while the yield gate
	// and the batch pacer are off.
	queued *queuedWork
	// stages times each lane's jobs through the engine (stages.go).
	stages stageTimes
	// handling counts the interactive jobs leased whose outcome is not
	// yet handed to the finisher: gather yields for another outcome after
	// an interactive one only while one may come (a batch outcome yields
	// once, always). gatherYield is that yield (runtime.Gosched; a test's
	// counter).
	handling    atomic.Int32
	gatherYield func()
}

// maxAdmits bounds the admission times remembered; past it the poll
// interval covers the rest.
const maxAdmits = 4096

// runningJob is one attempt in progress. returned and abandoned are
// guarded by Engine.mu: exactly one of them becomes true, and whichever does
// hands the attempt's outcome to the finisher.
type runningJob struct {
	job     *job.Job
	started time.Time
	maxRun  time.Duration
	cancel  context.CancelCauseFunc

	// turn is a batch job's governor turn (nil if it holds none), and
	// interactive the engine's count an interactive job's attempt is in
	// flight in (nil for a batch job): leave ends either, once (left).
	turn        *handlerTurn
	interactive *inFlight
	left        atomic.Bool

	overrun   bool // past maxRun: context cancelled, lease no longer renewed
	returned  bool // the handler returned and its outcome was handed on
	abandoned bool // the engine gave up on it and recorded a timeout
	slotFreed bool // the abandoned attempt's worker slot was given back
	stopping  bool // abandoned because Stop's deadline passed, not its maximum run time
}

// leave ends the attempt's interactive work (inFlight) or gives its
// governor turn back: when its handler returns, or when the engine
// abandons it, so a stuck handler does not hold the batch lane. Only the
// first call does anything.
func (r *runningJob) leave() {
	if r.turn != nil {
		r.turn.end() // once by itself
	} else if r.interactive != nil && r.left.CompareAndSwap(false, true) {
		r.interactive.leave()
	}
}

type result struct {
	job *job.Job
	out job.Outcome
	// answered is when the handler returned; zero for an outcome the
	// engine made up (an abandoned handler's).
	answered time.Time
	// fuse, when set, is the aggregation of the job's parent, of which it
	// is the last open part, to write with its finish (fusedPart).
	fuse *fusedParent
}

// interactiveGrace is how long after this engine's interactive work in
// flight falls to zero a single-writer store still treats it as in
// flight (store.InteractiveWatcher): about the time from a handler's
// return to its finish's write, which the finisher makes after the
// handler has left the count.
const interactiveGrace = 2 * time.Millisecond

// New validates cfg and returns an engine ready to Start.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	threads, err := newThreadPolicy(cfg.BatchThreadPolicy, cfg.Logger)
	if err != nil {
		return nil, err
	}
	yield := newYieldGate(cfg.BatchYieldMax)
	interactive := newInFlight(yield.listener())
	e := &Engine{
		cfg: cfg, log: cfg.Logger.With("region", cfg.Region),
		yield:       yield,
		interactive: interactive,
		budget:      newBatchBudget(cfg.BatchPieces, cfg.BatchCPUs, nil, interactive),
		threads:     threads,
		wake:        make(chan struct{}, 1),
		rearm:       make(chan struct{}, 1),
		results:     make(chan result, cfg.Workers),
		gathering:   make(chan struct{}, 1),
		slots:       make(chan struct{}, cfg.Workers),
		stop:        make(chan struct{}),
		running:     map[string]*runningJob{},
		stuck:       map[*runningJob]struct{}{},
		jobs:        cfg.Jobs,
		gatherYield: runtime.Gosched,

		claimPrefix: claimPrefix(),
	}
	if ls := cfg.Lanes; len(ls) > 0 && !slices.ContainsFunc(job.Lanes, func(l job.Lane) bool { return !slices.Contains(ls, l) }) {
		e.lane = "" // every lane named: as with none
	} else if len(ls) > 0 {
		e.lane = ls[0]
	}
	e.budget.notify = func() { e.noteWake(wakeTurn); e.Notify() } // a turn kept for the fetch loop's next lease
	e.pub.init()
	if e.jobs == nil {
		var err error
		e.jobs, err = NewJobs(JobsConfig{
			Store: cfg.Store, BatchShare: cfg.BatchShare, MaxCredit: cfg.Workers, InteractiveBudget: cfg.InteractiveBudget,
			Backoff: cfg.Backoff, Now: cfg.Now, Logger: cfg.Logger, Observer: cfg.Observer,
		})
		if err != nil {
			return nil, err
		}
	}
	kinds := make(map[string]Kind, len(cfg.Kinds))
	for name, k := range cfg.Kinds {
		if k.Aggregate != nil {
			e.aggKinds = append(e.aggKinds, name)
			if k.Handler == nil {
				k.Handler = e.aggregateHandler(k)
				k.Computes = true
			}
		}
		kinds[name] = k
		e.kinds = append(e.kinds, name)
		if k.Computes {
			e.computing = append(e.computing, name)
		}
	}
	e.cfg.Kinds = kinds // a copy: the caller's map is not changed
	if e.aggregates() {
		e.parents = make(chan parentWake, 1024)
		e.batchParents = make(chan parentWake, 1024)
		e.jobs.watchParts(e.wakeParent)
	}
	e.jobs.ServeIn(e.lane, e.kinds...)
	if e.serves(job.LaneBatch) && (len(e.computing) > 0 || e.aggregates()) {
		// Only computing pieces rest: an engine with none (no computing
		// kind, no aggregation) has nothing to pace, and its interactive
		// jobs skip the pacer's bookkeeping altogether.
		e.budget.pacer = newBatchPacer(cfg.BatchCPUShare, e.interactive)
		// The same engines time their computing pieces against
		// interactive work in flight (Engine.OverlapCounts).
		e.overlap = newOverlap(e.interactive)
		e.budget.overlap = e.overlap
	}
	if e.yield.listener() != nil || e.budget.pacer != nil { // accepted work is about too
		// Only waiting jobs: an interactive parent is inserted accepted,
		// and no lease takes it.
		e.queued = &queuedWork{interactive: e.interactive, ready: func(j *job.Job) bool {
			return j.State == job.StateWaiting && e.leasesNow(j)
		}}
		e.jobs.watchInserts(e.queued.inserted)
	}
	if len(e.kinds) > 0 && e.serves(job.LaneInteractive) {
		e.jobs.leaseInserts(e)
	}
	if w, ok := cfg.Store.(store.InteractiveWatcher); ok {
		// A single writer keeps a batch-lane transaction open a little
		// while this engine's interactive work is in flight, so that its
		// next write (a lease, a finish, a publication) joins it rather
		// than queue behind its commit. The finish is written after the
		// handler has left the count (the finisher's), so the hold lasts
		// interactiveGrace past the count's fall to zero: ended there, it
		// put the batch lane's commit right where the finish arrived
		// (docs/benchmarks.md, "Session 31 (s31h3)").
		interactive.stamp = true
		w.WatchInteractive(func() bool {
			return interactive.n.Load() > 0 || interactive.idleWithin(interactiveGrace, time.Now())
		})
	}
	return e, nil
}

// leasesNow reports whether j is interactive work the engine would lease
// now: an interactive job of one of its kinds, not scheduled for later.
func (e *Engine) leasesNow(j *job.Job) bool {
	_, runs := e.cfg.Kinds[j.Kind]
	return runs && j.Lane == job.LaneInteractive && e.serves(j.Lane) && !e.later(j)
}

// later reports whether j, just inserted, is scheduled for later. A job
// eligible when it was created is not, and needs no clock read (one per
// insert, a sixth of a microsecond on a VM's clock).
func (e *Engine) later(j *job.Job) bool {
	return j.EligibleAt.After(j.CreatedAt) && j.EligibleAt.After(e.cfg.Now())
}

// serves reports whether the engine serves lane l (Config.Lanes).
func (e *Engine) serves(l job.Lane) bool { return e.lane == "" || e.lane == l }

// Jobs is the writer the engine leases and reports through: hand it to the
// HTTP API so external workers of the region share it.
func (e *Engine) Jobs() *Jobs { return e.jobs }

// ErrStopped is returned by Start after Stop: an engine runs once.
var ErrStopped = errors.New("engine: stopped")

// errStopping is the cause given to handlers cancelled by Stop's deadline.
var errStopping = errors.New("engine stopping")

// errMaxRunTime is the cause given to a handler past its kind's maximum
// run time.
var errMaxRunTime = errors.New("maximum run time exceeded")

// errLeaseLost is the cause given to a handler whose lease was lost or whose
// job was cancelled.
var errLeaseLost = errors.New("lease lost or job cancelled")

// Start launches the engine's goroutines and returns. Handlers' contexts
// derive from ctx.
func (e *Engine) Start(ctx context.Context) error {
	e.life.Lock()
	defer e.life.Unlock()
	switch {
	case e.stopped:
		return ErrStopped
	case e.started:
		return errors.New("engine: already started")
	}
	e.started = true
	e.ctx, e.cancel = context.WithCancel(ctx)
	e.laneCtx = [2]context.Context{store.WithLane(e.ctx, job.LaneInteractive), store.WithLane(e.ctx, job.LaneBatch)}
	if len(e.kinds) > 0 { // a maintenance-only engine leases nothing
		e.wg.Add(1)
		go e.fetchLoop() // one: see Config.InFlight
	}
	if e.aggregates() {
		e.wg.Add(2)
		go e.aggregateLoop()
		go e.batchAggregateLoop()
	}
	for range e.cfg.InFlight {
		e.wg.Add(1)
		go e.finishLoop()
	}
	e.startPublishers(ctx)
	e.wg.Add(2)
	go e.heartbeatLoop()
	go e.maintainLoop()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.publishPending()
	}()
	e.live.Store(true)
	return nil
}

// Notify tells the engine that new work may be ready (e.g. after an insert),
// so it leases at once instead of at its next poll.
func (e *Engine) Notify() {
	e.notifies.Add(1) // before the send: see Engine.notifies
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Stop stops leasing, waits for running handlers up to ctx's deadline (a
// graceful drain), cancels the rest (their leases expire and the jobs are
// retried), writes every outcome it has, lets the publication pool
// deliver what is queued within the same deadline (past it, running
// Publishers are cancelled and their jobs stay validated for the next
// start; a Publisher that ignores its cancelled context holds Stop until
// it returns), and returns. A handler that
// ignores its cancelled context holds Stop until it is abandoned, one
// heartbeat after the deadline (its attempt recorded as a transient
// failure), or, past Workers stuck goroutines, until it returns; Stop does
// not wait for abandoned goroutines. It is idempotent,
// and an engine never started stops at once (it cannot start after).
func (e *Engine) Stop(ctx context.Context) error {
	e.life.Lock()
	e.stopped = true
	started := e.started
	e.live.Store(false)
	e.life.Unlock()
	if !started {
		e.stopOnce.Do(func() { close(e.stop) })
		return nil
	}
	e.stopOnce.Do(func() {
		close(e.stop)
		drained := make(chan struct{})
		go func() {
			for range e.cfg.Workers {
				e.slots <- struct{}{}
			}
			close(drained)
		}()
		select {
		case <-drained:
		case <-ctx.Done():
			e.mu.Lock()
			e.draining = true // handlers still running a tick from now are abandoned
			e.mu.Unlock()
			e.cancelRunning(errStopping)
			<-drained
		}
		close(e.results)
		if e.cancel != nil { // nil when Stop comes without Start
			e.cancel()
		}
		e.wg.Wait()
		e.stopPublishers(ctx) // nothing queues publications any more
		dumpLeaseStats()
	})
	return nil
}

func (e *Engine) cancelRunning(cause error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.running {
		r.cancel(cause)
	}
}

func (e *Engine) stopping() bool {
	select {
	case <-e.stop:
		return true
	default:
		return false
	}
}

// fetchLoop leases as many jobs as there are free worker slots and starts
// them. After a lease that took every job it asked for it leases again at
// once (more may be ready); after one that took fewer, or none, it waits
// for a wake-up or the poll interval. It saw everything ready then: a
// lease at once would find only what became ready meanwhile, and each such
// thing wakes it (an insert's Notify, that of a finish that released
// something, a batch turn given back)
// or is leased by the finish of the jobs it started (finishLease). Leasing
// again after any lease that took a job made 42-44 % of all leases in the
// throughput workload's steady load take nothing (docs/benchmarks.md,
// "Session 27 (s27h4)").
//
// A poll (the timer, not a wake-up) first asks the store by a read whether
// a lease might take anything (Jobs.mayLease) and stays idle when not: on
// SQLite a lease that finds nothing is still a write transaction through
// the one writer, and at one interactive review per 100 ms the 50 ms poll
// was every second lease, empty (docs/benchmarks.md, "Session 29
// (s29h5)"). Work the poll is for (another node's insert, a retry or a
// deferred job come due, a key's admission time) is seen by that read.
// The first wake-up after an insert that leased in its own write
// (endInsertLease) reads first too: most likely it is that insert's
// Notify, and what the insert could take it took.
func (e *Engine) fetchLoop() {
	defer e.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	polled := false
	afterInsert := false // polled stands for an insert's wake-up (below)
	trigger := "start"   // what made this lease (leasestats_on.go)
	for {
		cpulabel.Set(cpulabel.Fetch) // again each time: the phase may have moved
		if polled && !e.stopping() && !e.pollMayLeaseSeen(!afterInsert) {
			noteLease("poll-read-none", LeaseParams{}, nil)
			e.idle.Add(1) // nothing to lease: idle again, as after an empty lease
		} else if !e.leaseAndRun(trigger) {
			trigger, e.woke = "again", time.Time{}
			continue
		}
		var ok bool
		for {
			polled, ok = e.idleWait(timer)
			if polled || !ok || e.notifies.Load() != e.seenNotifies {
				break
			}
			// A stale wake-up: its Notify came before the last read or
			// lease began, which saw its work (that lease took fewer
			// jobs than it asked for, or the read found nothing). A
			// poll that leased an insert's job between the insert and
			// its Notify, and the lease that Notify then woke, leased
			// that review twice, once empty (TestStaleWakeLeasesNothing;
			// docs/benchmarks.md, "Session 41 (s41h1)").
			noteLease("wake-stale:"+e.wakeReason(), LeaseParams{}, nil)
		}
		e.woke = e.noteNow()
		trigger = "poll"
		if !polled {
			trigger = "wake:" + e.wakeReason()
		}
		afterInsert = false
		if !polled && e.sawInsertLease.Swap(false) {
			// An insert leased what it could since (endInsertLease):
			// this wake-up, most likely that insert's Notify, leases
			// only if a read says a lease might take something.
			polled, afterInsert = true, true
		}
		e.idle.Add(-1)
		if !ok {
			return
		}
	}
}

// pollMayLeaseSeen is pollMayLease that, when the read finds nothing a
// lease could take, ends the queued interactive piece as an empty lease
// does (queuedWork.seen): nothing of the interactive lane is waiting, so
// no batch work should wait for it. An insert that leased in its own
// write (insertlease.go) leaves the wake-up its Notify brings to this
// read rather than to a lease; without it the piece of that insert's
// accepted parent, counted by the insert's watchers, stayed in flight
// until some later lease, holding the batch lane back for nothing.
//
// wants is pollMayLease's: false for an insert's wake-up, whose one read
// decides (the polls keep the batch lane's want of a turn up to date).
func (e *Engine) pollMayLeaseSeen(wants bool) bool {
	e.seenNotifies = e.notifies.Load() // before the read: see Engine.notifies
	gen := e.queued.leasing()
	if e.pollMayLease(wants) {
		return true
	}
	e.queued.seen(gen)
	return false
}

// pollMayLease is an idle poll's read before its lease (Jobs.mayLease):
// whether a lease might take anything now. Beside a batch sweep in the
// same engine the read finds the sweep's jobs ready, but with every
// turn of the CPU governor held a lease may take none of its computing
// kinds (BatchMax -1) and, with no interactive job ready, took nothing:
// 25 of 38 polls' leases in TestSweepPollsLeaseOnlyWhatTheyCanTake's
// stream on main. So when no turn is free the read asks about what such
// a lease could take (the store's read honours BatchMax: the interactive
// lane and the batch lane's kinds that take no turn); when that finds
// nothing, a second read tells whether the sweep's jobs are ready, and
// then it records that a batch job wants a turn (batchBudget.wanted), as
// the empty lease did, so that the next turn given back is kept for a
// lease and wakes the loop. A poll that leases reads once (it read up to
// three times before: docs/benchmarks.md, "Session 31 (s31h2)"). With
// wants false it makes no second read.
func (e *Engine) pollMayLease(wants bool) bool {
	p := e.leaseParams(1, 0, new(time.Time))
	if e.lane == job.LaneInteractive || len(e.computing) == 0 || e.budget.turnFree() {
		return e.jobs.mayLease(e.ctx, p)
	}
	p.BatchMax = -1
	if e.jobs.mayLease(e.ctx, p) {
		return true
	}
	if !wants {
		return false
	}
	p.BatchMax = 0
	if e.jobs.mayLease(e.ctx, p) {
		e.budget.wanted()
	}
	return false
}

// idleWait waits, counted as idle (by leaseAndRun), for a wake-up or the
// next poll, the timer re-armed whenever a finish that leased says an
// admission time may have moved; it reports whether the timer ended the
// wait (polled), and false (ok) when the engine stops.
func (e *Engine) idleWait(timer *time.Timer) (polled, ok bool) {
	for {
		timer.Reset(e.nextPoll())
		select {
		case <-e.stop:
			return false, false
		case <-e.wake:
			return false, true
		case <-timer.C:
			return true, true
		case <-e.rearm:
			timer.Stop()
		}
	}
}

// nextPoll is how long an idle fetch loop sleeps: until the earliest time a
// skipped group may be admitted, or the poll interval if that is sooner or
// unknown (new work from other nodes is only seen by polling).
func (e *Engine) nextPoll() time.Duration {
	now := e.cfg.Now()
	e.admitMu.Lock()
	defer e.admitMu.Unlock()
	for e.admits.Len() > 0 && !e.admits[0].After(now) {
		heap.Pop(&e.admits)
	}
	if e.admits.Len() == 0 {
		return e.cfg.PollInterval
	}
	return min(e.cfg.PollInterval, e.admits[0].Sub(now))
}

// leaseAndRun takes free slots, leases up to that many jobs and runs them.
// It reports whether the loop goes idle: the lease took fewer jobs than it
// asked for, or the engine stops. Then it counts the loop idle before it
// starts the jobs, so that their finish, however soon, leases in its own
// write (finishLease) rather than writing alone and waking the loop, whose
// lease would most likely find nothing.
func (e *Engine) leaseAndRun(trigger string) (idle bool) {
	// Before the slots and turns the lease asks by (see Engine.notifies):
	// a Notify that came while they were taken may be a turn given back
	// too late for this lease, and is not stale.
	seen := e.notifies.Load()
	free := e.takeSlots()
	if free == 0 {
		select { // all workers busy: wait for one
		case e.slots <- struct{}{}:
			free = 1 + e.takeSlots()
		case <-e.stop:
			e.lastFull = false
			e.idle.Add(1)
			return true
		}
	}
	if want := min(e.cfg.Workers, e.cfg.MaxBatch); free < want && (free < e.cfg.Workers/8 || e.lastFull) {
		// Give running jobs a moment (at most 1 ms) to free more slots, so
		// one lease call serves many: when only a few are free, and after
		// a lease that returned all it asked for (more are ready), whose
		// handlers were only just started when this loop came back.
		// Without the second, a drain of short jobs alternated two
		// cohorts, each lease asking only for the slots the previous one
		// had not taken (36 of 64 on PostgreSQL: 0.20 round trips per job
		// against 0.14; docs/benchmarks.md, "Session 13 (s13h4)"). Not
		// after a lease that found fewer ready than it asked for: waiting
		// then serves no backlog and only delays the start of a job that
		// becomes ready just after, such as a paced key's next, which a
		// window counts from (TestNoSlotWaitAfterAShortLease;
		// docs/benchmarks.md, "Session 13: the merge, quiet (lead)").
		free += e.moreSlots(want-free, time.Millisecond)
	}
	turns, batchMax := e.takeTurns(free)
	gen := e.queued.leasing()
	note := leaseNote{via: trigger, asked: e.noteNow(), woke: e.woke}
	jobs, err := e.lease(free, batchMax, trigger)
	e.seenNotifies = seen
	if err != nil {
		e.seenNotifies = noSeen // it saw nothing: any wake-up leases
		if !e.stopping() {
			e.log.Error("lease failed", "err", err)
		}
	}
	e.lastFull = len(jobs) > 0 && len(jobs) >= free
	if !e.lastFull {
		e.idle.Add(1)
	}
	e.runLeased(jobs, free, turns, note)
	e.queued.seen(gen) // the interactive jobs it took are in flight as handlers now
	return !e.lastFull
}

// moreSlots takes up to n more worker slots as they are released, for at
// most d, and returns how many it took.
func (e *Engine) moreSlots(n int, d time.Duration) int {
	t := time.NewTimer(d)
	defer t.Stop()
	got := 0
	for got < n {
		select {
		case e.slots <- struct{}{}:
			got++
		case <-t.C:
			return got
		case <-e.stop:
			return got
		}
	}
	return got
}

// takeSlots reserves every free worker slot (up to MaxBatch) without waiting.
func (e *Engine) takeSlots() int {
	n := 0
	for n < e.cfg.MaxBatch {
		select {
		case e.slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

func (e *Engine) lease(n, batchMax int, trigger string) ([]*job.Job, error) {
	if e.stopping() || len(e.kinds) == 0 { // no kinds would mean every kind to the store
		return nil, nil
	}
	var admit time.Time // set by the store before Lease returns
	p := e.leaseParams(n, batchMax, &admit)
	jobs, err := e.jobs.Lease(e.ctx, p)
	noteLease(trigger, p, jobs)
	e.noteAdmission(admit)
	return jobs, err
}

// noSeen is Engine.seenNotifies after a lease that failed: no count of
// Notify calls reaches it, so no wake-up is stale.
const noSeen = ^uint64(0)

// leaseParams asks for n jobs of the engine's kinds, at most batchMax of
// the batch lane (store.LeaseParams.BatchMax); the store sets *admit to
// the earliest time a group it skipped may be admitted.
func (e *Engine) leaseParams(n, batchMax int, admit *time.Time) LeaseParams {
	return LeaseParams{
		Max: n, BatchMax: batchMax, BatchMaxKinds: e.computing, LeaseFor: e.cfg.LeaseFor, Kinds: e.kinds, Lane: e.lane,
		NextAdmission: func(at time.Time) { *admit = at },
	}
}

// noteAdmission remembers when a skipped group may be admitted (zero:
// none), for the idle fetch loops' wait.
func (e *Engine) noteAdmission(admit time.Time) {
	e.admitMu.Lock()
	if !admit.IsZero() && e.admits.Len() < maxAdmits {
		heap.Push(&e.admits, admit)
	}
	e.admitMu.Unlock()
}

// runLeased runs jobs that a lease at now returned on the worker slots
// taken for them (free) and the batch turns (turns, budget.take), and
// gives the slots and turns not used back; note is how the lease came
// about, for their queued stage.
func (e *Engine) runLeased(jobs []*job.Job, free, turns int, note leaseNote) {
	now := e.cfg.Now()
	batch := 0
	for _, j := range jobs {
		e.observeQueued(j, now, note)
		if e.takesTurn(j) {
			batch++
		}
	}
	for i := len(jobs); i < free; i++ {
		<-e.slots // give back the slots not used
	}
	e.budget.leased(turns, batch, free)
	// Every interactive job of the lease counts as handling before the
	// first runs:
	// counted in run, a lease's second job was not yet counted when the
	// first's outcome, returned at once, reached gather, which then did
	// not yield for the burst (TestGatherYieldsOnlyForAnOutcomeThatMayCome
	// failed so in CI).
	for _, j := range jobs {
		if j.Lane == job.LaneInteractive {
			e.handling.Add(1)
		}
	}
	for _, j := range jobs {
		e.run(j, turns > 0 && e.takesTurn(j))
	}
}

// takesTurn reports whether j, leased, holds a turn of the CPU governor:
// a batch-lane job of a computing kind (Kind.Computes).
func (e *Engine) takesTurn(j *job.Job) bool {
	return j.Lane == job.LaneBatch && e.cfg.Kinds[j.Kind].Computes
}

// takeTurns is budget.take for a lease of up to n jobs: no turn, and no
// bound, when none of the engine's kinds computes.
func (e *Engine) takeTurns(n int) (turns, batchMax int) {
	if len(e.computing) == 0 {
		return 0, 0
	}
	return e.budget.take(n)
}

// run starts one job's handler on its own goroutine; the slot it holds is
// released when its outcome has been handed to the finisher, or when the
// engine abandons it (see Config.MaxRunTime).
//
// A batch job leased with a turn of the governor (turn) holds it until its
// handler returns or is abandoned; Yield passes it between the handler's
// pieces.
func (e *Engine) run(j *job.Job, turn bool) {
	// The handler's store writes are its job's lane's: a batch-lane
	// handler's writes yield to interactive ones at a single-writer store.
	ctx, cancel := context.WithCancelCause(e.laneContext(j.Lane))
	hctx, stopDeadline := ctx, context.CancelFunc(func() {})
	if !j.Deadline.IsZero() {
		hctx, stopDeadline = context.WithDeadline(ctx, j.Deadline)
	}
	r := &runningJob{job: j, started: e.cfg.Now(), maxRun: e.maxRunTime(j.Kind), cancel: cancel}
	var ht *handlerTurn
	if turn {
		ht = newHandlerTurn(e.budget)
		r.turn = ht
		hctx = withTurnHeld(hctx) // work it does inline takes no second turn
	} else if j.Lane != job.LaneBatch {
		r.interactive = e.interactive
		r.interactive.enter()
	}
	e.mu.Lock()
	e.running[j.ID] = r
	e.mu.Unlock()
	early := e.earlyReadOf(j)
	e.wg.Add(1)
	go func() {
		// A copy: were hctx assigned to inside this goroutine, it would be
		// moved to the heap, one allocation per job.
		hctx := hctx
		if cpulabel.On {
			cpulabel.Set(handlerLabel(j.Lane, ht != nil))
		}
		var th *idleThread
		if j.Lane == job.LaneBatch {
			hctx = e.batchHandlerYield(hctx, j, ht)
			// After the gate: a computing handler on an idle thread from
			// here to its return; this goroutine ends with the job, and
			// its thread with it where it cannot be restored. The pacer
			// charges its pieces their CPU time, and its writes the
			// writer's (pieceClock).
			th = e.threads.enter(e.threads.handlers && e.cfg.Kinds[j.Kind].Computes)
			if th != nil && ht != nil {
				ht.onThread(th)
				hctx = e.chargeThreadWrites(hctx, true)
			}
		}
		began := e.cfg.Now()
		e.observeStage(j.ID, j.ParentID, j.Kind, j.Lane, stStart, r.started, began)
		e.readPartsEarly(j, early) // its parent's parts, beside the handler (fused.go)
		out := e.handle(hctx, j)
		th.leave() // reads its clock a last time, for r.leave's charge
		r.leave()
		answered := e.cfg.Now()
		e.observeStage(j.ID, j.ParentID, j.Kind, j.Lane, stRun, began, answered)
		stopDeadline()
		cancel(nil)
		e.mu.Lock()
		if r.abandoned {
			// Its timeout was recorded and the engine's wait group
			// released when it was abandoned; the late outcome is dropped.
			delete(e.stuck, r)
			if r.slotFreed {
				e.freed--
			}
			e.mu.Unlock()
			e.stuckReturned(r)
			if !r.slotFreed {
				<-e.slots
			}
			return
		}
		r.returned = true
		if e.running[j.ID] == r { // not a later lease of the same job
			delete(e.running, j.ID)
		}
		e.mu.Unlock()
		res := result{job: j, out: out, answered: answered, fuse: e.fusedPart(j, out, early)}
		e.handed(j) // counted as handling since its lease (runLeased)
		e.results <- res
		<-e.slots
		e.wg.Done()
	}()
}

// batchHandlerYield holds a batch-lane handler at the yield gate before
// it starts, when its kind computes (Kind.Computes), and returns its
// context with what Yield needs. A kind that waits (a webhook delivery,
// waiting on its subscriber) is never held: it takes little CPU from
// interactive work, and holding it delayed every delivery behind each
// interactive review, as one governor turn for every batch handler did
// to `bench upstreams` (Config.BatchCPUs). It still passes its turn, if
// any, at Yield.
//
// Not the batch budget: a handler waiting for a turn would hold a worker
// slot, and a few of them would keep interactive jobs from being leased
// at all (docs/benchmarks.md, "Session 11 (s11h5)").
func (e *Engine) batchHandlerYield(ctx context.Context, j *job.Job, ht *handlerTurn) context.Context {
	y := handlerYield{turn: ht}
	if e.cfg.Kinds[j.Kind].Computes {
		held := e.yield.wait(ctx)
		y.gate = e.yield
		if ht != nil {
			e.budget.credit(held)
			ht.begin()
		}
	}
	return context.WithValue(ctx, yieldKey{}, y) // for Yield
}

// laneContext is the engine's context marked with lane for the store
// (store.WithLane): the two lanes' are made once, in Start, and shared by
// every attempt, which saves a context and a boxed lane per job.
func (e *Engine) laneContext(l job.Lane) context.Context {
	switch l {
	case job.LaneInteractive:
		return e.laneCtx[0]
	case job.LaneBatch:
		return e.laneCtx[1]
	}
	return store.WithLane(e.ctx, l)
}

// maxRunTime is the maximum run time of one attempt of kind.
func (e *Engine) maxRunTime(kind string) time.Duration {
	if d := e.cfg.Kinds[kind].MaxRunTime; d > 0 {
		return d
	}
	return e.cfg.MaxRunTime
}

// handle runs the handler, turning a panic into a transient outcome.
func (e *Engine) handle(ctx context.Context, j *job.Job) (out job.Outcome) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("handler panicked", "job_id", j.ID, "kind", j.Kind, "panic", fmt.Sprint(p))
			out = job.Outcome{Class: job.ClassTransient, Err: "handler panicked"}
		}
	}()
	k := e.cfg.Kinds[j.Kind]
	out = k.Handler.Handle(ctx, j)
	if ctx.Err() != nil && out.Class != job.ClassSuccess {
		if !j.Deadline.IsZero() && !e.cfg.Now().Before(j.Deadline) {
			return job.Outcome{Class: job.ClassPermanent, Reason: job.ReasonDeadlineExceeded, Err: "deadline exceeded while running"}
		}
		if errors.Is(context.Cause(ctx), errMaxRunTime) {
			return maxRunOutcome(e.maxRunTime(j.Kind))
		}
	}
	return out
}

// timeHeap is a min-heap of times (container/heap).
type timeHeap []time.Time

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *timeHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// handed ends j's count in handling (runLeased) as its outcome is handed
// to the finisher, by its handler's goroutine or by abandon.
func (e *Engine) handed(j *job.Job) {
	if j.Lane == job.LaneInteractive {
		e.handling.Add(-1)
	}
}
