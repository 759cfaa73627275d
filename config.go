package ratelane

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/rltype"
)

// Region configures one region's store. Exactly one of SQLitePath and
// PostgresURL is used; with neither, the region gets an SQLite file named
// after it in Config.DataDir.
type Region struct {
	// Name is the region, e.g. "us" or "eu".
	Name string
	// SQLitePath is the region's SQLite database file.
	SQLitePath string
	// Synchronous is "FULL" (default: durable on power loss) or "NORMAL"
	// (durable on process crash only) for SQLite.
	Synchronous string
	// SQLiteBatchHold is how long the SQLite writer may keep a transaction
	// of batch-lane writes open while interactive work is in flight, so an
	// interactive write joins it instead of waiting for its commit
	// (sqlite.Config.BatchHold): each batch-lane write may wait that much
	// longer for its commit, and another process writing the same file
	// (a batch node) that much longer for SQLite's lock. The hold lasts
	// only while this process has interactive work in flight, so a
	// batch-only node never holds. Zero takes the default (10 ms);
	// negative turns the hold off.
	SQLiteBatchHold time.Duration
	// SQLiteBatchSyncDefer has no effect.
	//
	// Deprecated: has no effect since session 35: every SQLite commit
	// fsyncs itself. Committing batch-lane writes without an fsync moved
	// the fsyncs off the writer but did not reduce them, and a longer
	// window doubled a sweep (docs/configuration.md, docs/benchmarks.md
	// "Session 34 (s34h2)"). `ratelane serve` warns when a config file
	// sets it.
	SQLiteBatchSyncDefer time.Duration
	// SQLiteGapCheckpoint is the WAL frames not yet checkpointed at which
	// the SQLite store runs WAL checkpoints in the gaps between
	// interactive work, on a connection of its own beside the writer
	// (unless SQLiteGapCheckpointOnWriter), instead of inside whichever
	// commit crosses SQLite's 1,000-frame autocheckpoint
	// (sqlite.Config.GapCheckpoint; 4× it stays as the safety net). Zero
	// means the default, 1,000 frames; negative turns gap checkpoints off
	// and leaves checkpoints to SQLite. Beside the writer they lowered the
	// interactive tail under a batch sweep and without one
	// (docs/configuration.md).
	SQLiteGapCheckpoint int
	// SQLiteReadMmapSize, when positive, is the bytes of the database file
	// each of the SQLite store's read connections memory-maps (PRAGMA
	// mmap_size; sqlite.Config.ReadMmapSize). Zero (the default) leaves
	// the readers on pread: under commits a reader unmaps and maps again
	// at each read, which costs what the pread saves (docs/benchmarks.md,
	// "Session 37 (s37h5)"), and an I/O error on a mapped page ends the
	// process with a signal rather than an error.
	SQLiteReadMmapSize int64
	// SQLiteGapCheckpointOnWriter runs the gap checkpoints
	// (SQLiteGapCheckpoint) on the SQLite writer's connection between its
	// transactions rather than beside it (the default), where an
	// interactive write arriving during one waits for it
	// (sqlite.Config.GapCheckpointOnWriter).
	SQLiteGapCheckpointOnWriter bool
	// SQLiteGapCheckpointBeside has no effect.
	//
	// Deprecated: gap checkpoints run beside the writer by default since
	// session 38; SQLiteGapCheckpointOnWriter runs them on the writer's
	// connection instead, and a negative SQLiteGapCheckpoint turns them
	// off. The field stays so that code setting it still compiles.
	SQLiteGapCheckpointBeside bool
	// SQLiteWriterNice, when not zero, locks the SQLite store's writer
	// goroutine to one OS thread and sets that thread's nice to it (-20 to
	// 19, lower runs first; sqlite.Config.WriterNice): a slow interactive
	// COMMIT on a busy machine is mostly its thread waiting in the OS run
	// queue after the fdatasync's I/O completed (docs/benchmarks.md,
	// "Session 38 (s38h2)"). Negative values need CAP_SYS_NICE; Linux
	// only. Zero (the default) leaves the writer's thread to Go.
	SQLiteWriterNice int
	// PostgresURL is the region's PostgreSQL database.
	PostgresURL string
	// PostgresSchema is the schema holding the region's tables; default
	// "ratelane_<name>".
	PostgresSchema string
	// PostgresAsyncLease commits PostgreSQL lease transactions without
	// waiting for their WAL flush (synchronous_commit off for them only).
	// If the database server crashes, the leases of the last few hundred
	// milliseconds may be lost: those jobs run again, as after any lost
	// lease, and their keys may admit that many extra starts. Outcomes,
	// inserts and every other write stay durable. Default false, and
	// recommended off (docs/configuration.md).
	PostgresAsyncLease bool
}

// Config configures a Client. Zero fields take the defaults documented on
// each; WithDefaults fills them in and NewClient validates the result.
type Config struct {
	// DataDir holds the SQLite files of regions that name no store;
	// default "./ratelane-data".
	DataDir string
	// Regions lists the regions this process serves; default us and eu on
	// SQLite in DataDir.
	Regions []Region
	// Workers is each region's worker pool size; default 16.
	Workers int
	// LeaseFor is the lease period; default 30 s.
	LeaseFor time.Duration
	// MaxRunTime bounds one attempt of any job; default 15 min
	// (engine.DefaultMaxRunTime). Past it the handler's context is
	// cancelled; a handler that still has not returned one heartbeat later
	// is abandoned, its attempt recorded as a transient failure and its
	// lease and keys released (docs/operations.md, "Stuck handlers").
	MaxRunTime time.Duration
	// InteractiveBudget is the interactive lane's latency budget; default 30 s.
	InteractiveBudget time.Duration
	// BatchBudget is the batch lane's latency budget; default 24 h.
	BatchBudget time.Duration
	// BatchShare is batch's minimum share of starts while interactive work
	// is within budget; default 0.1.
	BatchShare float64
	// BatchYieldMax, when positive, makes batch-lane work in this process
	// that computes (review and extraction sweeps, not webhook
	// deliveries) wait while interactive work is accepted or in flight,
	// at most this long per piece (engine.Config.BatchYieldMax; 100 ms,
	// engine.DefaultBatchYieldMax, is the value to try). Zero takes the
	// engine's default, off: in session 35's quiet A/B the gate cut the
	// reviews' overlap with batch computing but not their p99
	// (docs/benchmarks.md, "Session 35: the merge (lead)"); negative
	// turns it off too.
	BatchYieldMax time.Duration
	// BatchPieces is the batch lane's CPU budget in this process: while
	// interactive work is in flight here, at most this many pieces of
	// batch-lane work (a batch handler between two of its yields, a batch
	// review's aggregation, a stretch of the periodic sweep, a batch
	// publication) run at once; with no interactive work batch work runs
	// at full width. Default 1 (engine.DefaultBatchPieces); negative turns
	// the budget off.
	BatchPieces int
	// BatchCPUs is the batch lane's CPU governor in this process: at most
	// this many pieces of batch-lane work that compute (as for
	// BatchPieces, and the handlers of computing kinds: ComputeBound) run
	// at once at any time, so interactive work always finds a free core; a
	// computing batch job is leased only when a turn is free, so one that
	// waits for a turn holds no worker slot and no lease. Kinds that wait
	// (webhook deliveries, anything not declaring ComputeBound) take no
	// turn. Zero: the default, engine.DefaultBatchCPUs(GOMAXPROCS), half
	// the CPUs and at least one; negative: off (docs/configuration.md).
	BatchCPUs int
	// BatchCPUShare, between 0 and 1 exclusive, turns on the batch pacer
	// in this process: while interactive work is in flight here or was in
	// the last second (engine.BatchPaceWindow), after a computing piece of
	// batch-lane work ran for d no such piece starts for
	// d·(1−share)/share, so a sweep computes about this share of wall time
	// and takes longer while interactive work is about; with none about it
	// runs at full speed. Needs BatchCPUs on. Zero: the default, 0.1
	// (engine.DefaultBatchCPUShare); negative or 1 and more: off
	// (docs/configuration.md).
	BatchCPUShare float64
	// BatchThreadPolicy is how this process's batch lane uses OS threads:
	// "" (the default) as any goroutine; "idle" (Linux) runs its computing
	// pieces (the handlers of ComputeBound kinds, aggregations, sweep
	// stretches) on SCHED_IDLE threads, which the kernel gives a core only
	// when no normal thread wants one. Each such piece keeps its P while
	// starved, so give the process spare Ps: GOMAXPROCS raised by
	// BatchCPUs (per region), BatchCPUs set explicitly so it does not
	// follow (engine.IdleThreadProcs; `ratelane serve` does both for
	// batch_lane.thread_policy). Unprivileged, only the handlers move
	// (one thread each, ended with the job); elsewhere it is logged and
	// off (docs/configuration.md).
	BatchThreadPolicy string
	// Lanes are the lanes this process's engines serve in every region;
	// empty means both (LaneInteractive, LaneBatch). A node of one lane
	// leases only that lane's jobs and runs only its background work
	// (aggregation and publication of its parents, its sweep): run the
	// batch lane in a process of its own at a lower OS priority (nice)
	// beside an interactive-only node on the same store, so that a sweep
	// does not take the interactive lane's CPU (docs/architecture.md,
	// "Lane-dedicated nodes"). A lane no node serves is not run; its
	// jobs wait and the intake's prediction sees the kind unserved.
	Lanes []Lane
	// Retention is how long finished jobs are kept (and idempotency keys
	// remembered); default 30 days.
	Retention time.Duration
	// DefaultLimit configures limit keys first seen in a job and not
	// configured before; the zero value paces nothing.
	DefaultLimit Limit
	// Limits are declared in every region at start: a key is configured
	// as its declaration says when it is new or the declaration differs
	// from the one last applied to it (store.DeclareLimit), and left
	// alone otherwise, so that a change made since with SetLimit or PUT
	// /v1/limits lasts across restarts until the declaration changes.
	Limits []Limit
	// Logger receives ids, never payloads; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now. Tests replace it.
	Now func() time.Time
	// Registry receives ratelane's metrics and is served at /metrics by
	// the HTTP API; default a new registry with Go and process collectors.
	// ratelane never uses the global registry: it is also a library.
	Registry *prometheus.Registry

	// Plugins add built-in features (reviews: package review; webhook
	// subscribers, events and deliveries: package webhooks) with their
	// kinds, HTTP routes and commands; see Plugin. NewClient binds each to
	// every region, in order.
	Plugins []Plugin

	// kinds[region][kind]; the region "" applies to every region.
	kinds map[string]map[string]engine.Kind
	bound []boundResource
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.DataDir = cmp.Or(c.DataDir, "./ratelane-data")
	if len(c.Regions) == 0 {
		c.Regions = []Region{{Name: "us"}, {Name: "eu"}}
	}
	regions := make([]Region, len(c.Regions))
	for i, r := range c.Regions {
		if r.PostgresURL == "" && r.SQLitePath == "" {
			r.SQLitePath = filepath.Join(c.DataDir, r.Name+".db")
		}
		if r.PostgresURL != "" && r.PostgresSchema == "" {
			r.PostgresSchema = "ratelane_" + r.Name
		}
		regions[i] = r
	}
	c.Regions = regions
	c.InteractiveBudget = cmp.Or(c.InteractiveBudget, rltype.DefaultInteractiveBudget)
	c.BatchBudget = cmp.Or(c.BatchBudget, rltype.DefaultBatchBudget)
	c.Retention = cmp.Or(c.Retention, rltype.DefaultRetention)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

var regionName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

func (c Config) validate() error {
	seen := map[string]bool{}
	for _, r := range c.Regions {
		if !regionName.MatchString(r.Name) {
			return fmt.Errorf("ratelane: region name %q must be 1-32 lower-case letters, digits or dashes, starting with a letter", r.Name)
		}
		if seen[r.Name] {
			return fmt.Errorf("ratelane: region %q is configured twice", r.Name)
		}
		seen[r.Name] = true
		if r.PostgresURL != "" && r.SQLitePath != "" {
			return fmt.Errorf("ratelane: region %q names both an SQLite path and a PostgreSQL URL; choose one", r.Name)
		}
	}
	for _, l := range c.Lanes {
		if !slices.Contains(rltype.Lanes, l) {
			return fmt.Errorf("ratelane: unknown lane %q in Lanes (want %s or %s)", l, LaneInteractive, LaneBatch)
		}
	}
	if c.InteractiveBudget < 0 || c.BatchBudget < 0 || c.Retention < time.Hour {
		return errors.New("ratelane: budgets must be positive and Retention at least 1h")
	}
	for _, l := range c.Limits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("ratelane: limit %q: %w", l.Name, err)
		}
	}
	return nil
}

// Handle registers the handler of one job kind in every region. Call it
// before NewClient; a kind with no handler is stored but never run by this
// process (an external worker may lease it over HTTP).
func (c *Config) Handle(kind string, h Handler) {
	c.HandleIn("", kind, h, nil)
}

// HandleIn registers a kind's handler and optional publisher for one region
// ("" for all). With a publisher, a successful attempt makes the job
// validated, the publisher delivers the result, and the compare-and-set
// validated -> published records it exactly once. A handler or publisher
// that implements RegionBound must belong to that region: NewClient refuses
// cross-region wiring.
func (c *Config) HandleIn(region, kind string, h Handler, p Publisher) {
	if c.kinds == nil {
		c.kinds = map[string]map[string]engine.Kind{}
	}
	if c.kinds[region] == nil {
		c.kinds[region] = map[string]engine.Kind{}
	}
	k := engine.Kind{Handler: adapt(h)}
	if rb, ok := h.(RunTimeBound); ok {
		k.MaxRunTime = rb.MaxRunTime()
	}
	if cb, ok := h.(ComputeBound); ok {
		k.Computes = cb.ComputeBound()
	}
	if p != nil {
		k.Publisher = p
	}
	c.kinds[region][kind] = k
	c.bound = append(c.bound, boundResource{region: region, kind: kind, handler: h, publisher: p})
}

// RunTimeBound is implemented by handlers that set their kind's maximum
// run time, overriding Config.MaxRunTime (e.g. a long LLM review or a
// short webhook delivery). NewClient refuses a value outside 500 ms (the
// heartbeat interval) to 7 days.
type RunTimeBound interface {
	MaxRunTime() time.Duration
}

// ComputeBound is implemented by handlers that declare what their
// attempts spend their time on. ComputeBound returns true for a handler
// that computes in this process (parses, scores, aggregates: CPU work)
// and false for one that waits on something outside it (an HTTP call, a
// provider, a subscriber). Only computing batch-lane jobs take a turn of
// the batch lane's CPU governor (Config.BatchCPUs), so a sweep of them
// leaves cores to interactive work; a waiting kind's batch jobs run as
// many at once as their limit keys and Workers allow, since a turn held
// while waiting would only idle a core and serialize the waits. A handler
// that does not implement it waits, as the built-in webhook deliveries do.
type ComputeBound interface {
	ComputeBound() bool
}

// boundResource remembers what was registered for the region check.
type boundResource struct {
	region, kind string
	handler      Handler
	publisher    Publisher
	aggregator   Aggregator
}
