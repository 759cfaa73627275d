package ratelane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/metrics"
	"github.com/ratelane/ratelane/internal/schedule"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/postgres"
	"github.com/ratelane/ratelane/internal/store/sqlite"
)

// ErrNotFound is returned for a job or key that does not exist in the region.
var ErrNotFound = store.ErrNotFound

// ReservedKindError is the refusal of a built-in kind by Insert or
// InsertMany (and, over HTTP, by POST /v1/jobs and POST /v1/leases).
type ReservedKindError = job.ReservedKindError

// BuiltinKind is one reserved kind and what creates it.
type BuiltinKind = job.BuiltinKind

// ReservedKinds lists the built-in kinds that Insert refuses; kinds that
// start with "ratelane." are reserved as well.
func ReservedKinds() []BuiltinKind { return job.ReservedKinds() }

// WebhookKind is the job kind of webhook deliveries, kept for programs
// written before webhooks became a plug-in.
//
// Deprecated: use webhooks.Kind.
const WebhookKind = "webhook"

// ErrConflict is returned when a job is not in a state that allows the
// operation (cancelling a finished job, redriving one that is not terminal).
var ErrConflict = store.ErrConflict

// RegionBound is implemented by resources that belong to one region (a
// provider endpoint, a sink). Wiring one to another region's kind fails in
// NewClient, before any job runs.
type RegionBound interface {
	Region() string
}

// Client is ratelane's entry point: one store and one engine per region.
// It is safe for concurrent use.
type Client struct {
	cfg      Config
	regions  map[string]*regionRT
	order    []string
	registry *prometheus.Registry
	metrics  *metrics.Metrics
}

type regionRT struct {
	store store.Store
	// jobs is the region's one writer of job state: its engine, the HTTP
	// API's external workers, Cancel, Redrive, webhook redelivery and
	// review aggregation all go through it.
	jobs   *engine.Jobs
	obs    *observer
	engine *engine.Engine
	// subs finds the region's webhook subscribers for plug-ins (the
	// webhooks plug-in provides it; SetSubscribers).
	subs SubscriberLookup
	// producer enqueues the ticks of the region's schedules.
	producer *schedule.Producer
	// kinds are the kinds the region's engine runs; read-only after
	// NewClient.
	kinds map[string]engine.Kind
	// starts and stops are the plug-ins' lifecycle hooks (OnStart, OnStop).
	starts []func(context.Context)
	stops  []func()
	// stageTrace is the plug-ins' stage listener (OnStage), nil when none
	// asked: the engine then records its stages in histograms only.
	stageTrace func(engine.StageSpan)
}

// NewClient opens every region's store (creating and migrating it), checks
// region wiring, upserts the configured limits and returns a client ready to
// Start.
func NewClient(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, regions: map[string]*regionRT{}, registry: cfg.Registry}
	if c.registry == nil {
		c.registry = prometheus.NewRegistry()
		c.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m, err := metrics.New(c.registry)
	if err != nil {
		return nil, fmt.Errorf("ratelane: metrics: %w", err)
	}
	c.metrics = m
	for _, r := range cfg.Regions {
		if err := c.openRegion(ctx, r); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func (c *Client) openRegion(ctx context.Context, r Region) error {
	st, err := openStore(ctx, r, c.cfg.Logger)
	if err != nil {
		return fmt.Errorf("ratelane: open region %q: %w", r.Name, err)
	}
	rt := &regionRT{store: st}
	c.regions[r.Name] = rt
	c.metrics.AddRegion(r.Name, st)
	c.order = append(c.order, r.Name)
	for _, l := range c.cfg.Limits {
		// Declared, not upserted: an unchanged declaration leaves the key
		// as an operator's SetLimit or PUT /v1/limits left it.
		if _, _, err := st.DeclareLimit(ctx, l, c.cfg.Now()); err != nil {
			return fmt.Errorf("ratelane: region %q: limit %q: %w", r.Name, l.Name, err)
		}
	}
	kinds, err := c.kindsFor(r.Name)
	if err != nil {
		return err
	}
	rt.obs = &observer{metrics: c.metrics}
	rt.jobs, err = engine.NewJobs(engine.JobsConfig{
		Store: st, BatchShare: c.cfg.BatchShare, MaxCredit: c.cfg.Workers, InteractiveBudget: c.cfg.InteractiveBudget,
		Now: c.cfg.Now, Logger: c.cfg.Logger, Observer: rt.obs,
	})
	if err != nil {
		return fmt.Errorf("ratelane: region %q: %w", r.Name, err)
	}
	if err := c.openSchedules(rt, r.Name); err != nil {
		return fmt.Errorf("ratelane: region %q: schedules: %w", r.Name, err)
	}
	if err := c.bindPlugins(ctx, r.Name, rt, kinds); err != nil {
		return fmt.Errorf("ratelane: region %q: %w", r.Name, err)
	}
	rt.kinds = kinds
	// A region with no kinds of its own still gets an engine: it only
	// reaps, so that leases its external workers abandon are recovered.
	rt.engine, err = engine.New(engine.Config{
		Store: st, Region: r.Name, Kinds: kinds, Workers: c.cfg.Workers, LeaseFor: c.cfg.LeaseFor,
		InteractiveBudget: c.cfg.InteractiveBudget, BatchShare: c.cfg.BatchShare, BatchYieldMax: c.cfg.BatchYieldMax, BatchPieces: c.cfg.BatchPieces, BatchCPUs: c.cfg.BatchCPUs, BatchCPUShare: c.cfg.BatchCPUShare, BatchThreadPolicy: c.cfg.BatchThreadPolicy, Retention: c.cfg.Retention,
		Lanes: c.cfg.Lanes,
		Now:   c.cfg.Now, Logger: c.cfg.Logger, Jobs: rt.jobs, MaxRunTime: c.cfg.MaxRunTime,
		InFlight: inFlight(r), StageTrace: rt.stageTrace,
	})
	if err != nil {
		return err
	}
	c.metrics.AddYield(r.Name, rt.engine)
	return nil
}

// kindsFor returns the kinds a region runs, refusing a region-bound handler
// or publisher that belongs to another region.
func (c *Client) kindsFor(region string) (map[string]engine.Kind, error) {
	for _, b := range c.cfg.bound {
		if b.region != "" && b.region != region {
			continue
		}
		for _, res := range []any{b.handler, b.publisher, b.aggregator} {
			if rb, ok := res.(RegionBound); ok && rb.Region() != region {
				return nil, fmt.Errorf("ratelane: kind %q in region %q is wired to a resource of region %q; "+
					"register region-bound handlers per region with HandleIn", b.kind, region, rb.Region())
			}
		}
	}
	out := map[string]engine.Kind{}
	for _, r := range []string{"", region} {
		for kind, k := range c.cfg.kinds[r] {
			out[kind] = k
		}
	}
	return out, nil
}

// inFlight is the engine's Config.InFlight for region r: 2 on
// PostgreSQL, where a finish call is mostly waiting for round trips and
// the WAL flush, so two overlap (docs/benchmarks.md, issue 13); 1 on
// SQLite, whose single writer would only queue them.
func inFlight(r Region) int {
	if r.PostgresURL != "" {
		return 2
	}
	return 1
}

func openStore(ctx context.Context, r Region, log *slog.Logger) (store.Store, error) {
	if r.PostgresURL != "" {
		st, err := postgres.Open(ctx, postgres.Config{URL: r.PostgresURL, Schema: r.PostgresSchema, Region: r.Name, AsyncLease: r.PostgresAsyncLease})
		if err != nil {
			return nil, err
		}
		// Migrations are embedded and applied at start; they take an
		// advisory lock, so many nodes starting at once is safe. Ready then
		// reads the jobs table, so a schema this role cannot read fails the
		// start rather than the first request.
		if err := errors.Join(st.Migrate(ctx), st.Ready(ctx)); err != nil {
			st.Close()
			return nil, err
		}
		log.Info("store opened", "region", r.Name, "driver", "postgres", "schema", st.Schema())
		return st, nil
	}
	warnLooseModes(log, r.Name, r.SQLitePath)
	st, err := sqlite.Open(ctx, sqlite.Config{Path: r.SQLitePath, Region: r.Name, Synchronous: r.Synchronous, BatchHold: r.SQLiteBatchHold,
		GapCheckpoint: r.SQLiteGapCheckpoint, ReadMmapSize: r.SQLiteReadMmapSize,
		GapCheckpointOnWriter: r.SQLiteGapCheckpointOnWriter, WriterNice: r.SQLiteWriterNice})
	if err != nil {
		return nil, err
	}
	d := st.Durability()
	log.Info("store opened", "region", r.Name, "driver", "sqlite", "sqlite_driver", sqlite.Driver, "path", r.SQLitePath,
		"journal_mode", d.JournalMode, "synchronous", d.Synchronous, "integrity", "quick_check ok")
	return st, nil
}

// Regions returns the configured region names in configuration order.
func (c *Client) Regions() []string { return append([]string(nil), c.order...) }

// Store returns a region's store, for the HTTP API and tools in this module.
func (c *Client) store(region string) (store.Store, error) {
	rt, ok := c.regions[region]
	if !ok {
		return nil, fmt.Errorf("ratelane: unknown region %q; configured regions are %v", region, c.order)
	}
	return rt.store, nil
}

// Start starts every region's engine. Jobs of kinds with handlers begin to
// run.
func (c *Client) Start(ctx context.Context) error {
	for _, name := range c.order {
		if e := c.regions[name].engine; e != nil {
			if err := e.Start(ctx); err != nil {
				return err
			}
		}
		for _, fn := range c.regions[name].starts {
			fn(ctx)
		}
		c.regions[name].producer.Start(ctx)
	}
	return nil
}

// Stop drains every engine: no new leases, running handlers get until ctx's
// deadline to finish, then are cancelled (their jobs retry elsewhere or
// after restart). Stop then closes the stores. It is idempotent.
func (c *Client) Stop(ctx context.Context) error {
	for _, name := range c.order {
		c.regions[name].producer.Stop() // before the engine: it may notify it
		if e := c.regions[name].engine; e != nil {
			e.Stop(ctx)
		}
		for _, fn := range c.regions[name].stops {
			fn()
		}
	}
	return c.Close()
}

// Close closes the stores without draining; prefer Stop.
func (c *Client) Close() error {
	var errs []error
	for _, rt := range c.regions {
		errs = append(errs, rt.store.Close())
	}
	return errors.Join(errs...)
}

// InsertParams describes a job to insert.
type InsertParams struct {
	Kind   string
	Region string
	// Lane defaults to LaneBatch.
	Lane Lane
	// Tenant defaults to "default".
	Tenant    string
	LimitKeys []string
	// Args is marshalled to the JSON payload; or set Payload directly.
	Args    any
	Payload json.RawMessage
	// IdempotencyKey makes the insert happen once per tenant while jobs are
	// retained: a second insert returns the first job.
	IdempotencyKey string
	// RunAt or Delay schedule the job for later (at most 7 days ahead).
	RunAt    time.Time
	Delay    time.Duration
	Deadline time.Time
	// Priority orders jobs within a group: higher first (-100..100).
	Priority int
	// Cost is what one start takes from each key's bucket; default 1.
	Cost    int64
	Budgets Budgets
}

// InsertResult is the result of one insert.
type InsertResult struct {
	Job *Job
	// Existing is true when the idempotency key matched an existing job,
	// which is returned instead of a new one.
	Existing bool
}

// Insert validates and durably inserts one job. Built-in kinds (webhook
// deliveries, reviews and their parts; see ReservedKinds) are refused with
// a *ReservedKindError: ratelane creates those itself, through the
// webhooks plug-in's Publish and the review plug-in's Submit.
func (c *Client) Insert(ctx context.Context, p InsertParams) (InsertResult, error) {
	res, err := c.InsertMany(ctx, []InsertParams{p})
	if err != nil {
		return InsertResult{}, err
	}
	return res[0], nil
}

// InsertMany validates every job, then inserts them with one durable write
// per region. Nothing is inserted when any job is invalid.
func (c *Client) InsertMany(ctx context.Context, ps []InsertParams) ([]InsertResult, error) {
	now := c.cfg.Now()
	jobs := make([]*job.Job, len(ps))
	byRegion := map[string][]int{}
	for i, p := range ps {
		j, err := c.prepare(p, now)
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
		jobs[i] = j
		byRegion[j.Region] = append(byRegion[j.Region], i)
	}
	out := make([]InsertResult, len(ps))
	for region, idx := range byRegion {
		batch := make([]*job.Job, len(idx))
		for k, i := range idx {
			batch[k] = jobs[i]
		}
		// The store checks the costs inside its write (store.WithCostCheck):
		// on PostgreSQL a read of the keys before it was a round trip of
		// its own, ahead of every insert.
		res, err := c.regions[region].jobs.Insert(store.WithCostCheck(ctx), batch, c.cfg.DefaultLimit)
		var ve *job.ValidationError
		if errors.As(err, &ve) {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("ratelane: insert in region %q: %w", region, err)
		}
		for k, i := range idx {
			out[i] = InsertResult{Job: res[k].Job, Existing: res[k].Existing}
		}
		if e := c.regions[region].engine; e != nil {
			e.Notify()
		}
	}
	return out, nil
}

func (c *Client) prepare(p InsertParams, now time.Time) (*job.Job, error) {
	if err := job.CheckPublicKind("kind", p.Kind); err != nil {
		return nil, err
	}
	payload := p.Payload
	if p.Args != nil {
		b, err := json.Marshal(p.Args)
		if err != nil {
			return nil, fmt.Errorf("marshal args: %w", err)
		}
		payload = b
	}
	if p.Delay < 0 {
		return nil, fmt.Errorf("delay must not be negative, got %v", p.Delay)
	}
	j := &job.Job{
		Kind: p.Kind, Region: p.Region, Lane: p.Lane, Tenant: p.Tenant, LimitKeys: p.LimitKeys,
		Payload: payload, IdempotencyKey: p.IdempotencyKey, EligibleAt: p.RunAt, Deadline: p.Deadline,
		Priority: p.Priority, Cost: p.Cost, Budgets: p.Budgets,
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	j.Prepare(id.String(), now, p.Delay, false)
	if err := j.Validate(c.order); err != nil {
		return nil, err
	}
	return j, j.CheckSchedule(now)
}

// Job returns one job of a region, with its attempt history.
func (c *Client) Job(ctx context.Context, region, id string) (*Job, error) {
	st, err := c.store(region)
	if err != nil {
		return nil, err
	}
	return st.Get(ctx, id)
}

// Cancel ends a job that is not final as terminal/cancelled; a running
// handler's context is cancelled within about a second.
func (c *Client) Cancel(ctx context.Context, region, id string) (*Job, error) {
	return c.move(ctx, region, id, (*engine.Jobs).Cancel) // a cancelled running job released its keys
}

// Redrive returns a terminal job (a dead letter) to waiting with fresh
// budgets; the redrive is recorded in its history.
func (c *Client) Redrive(ctx context.Context, region, id string) (*Job, error) {
	return c.move(ctx, region, id, (*engine.Jobs).Redrive)
}

// move is an operator's move of one job (Cancel, Redrive) through the
// region's writer; one that happened wakes the region's engine, which may
// lease the job, or another on the keys it released, at once.
func (c *Client) move(ctx context.Context, region, id string, op func(*engine.Jobs, context.Context, string) (*job.Job, error)) (*Job, error) {
	w, err := c.writer(region)
	if err != nil {
		return nil, err
	}
	j, err := op(w, ctx, id)
	if err == nil {
		c.notify(region)
	}
	return j, err
}

// writer returns the region's one writer of job state.
func (c *Client) writer(region string) (*engine.Jobs, error) {
	if _, err := c.store(region); err != nil {
		return nil, err
	}
	return c.regions[region].jobs, nil
}

// SetLimit creates or reconfigures a limit key in a region, keeping its live
// state (pause, in-flight count).
func (c *Client) SetLimit(ctx context.Context, region string, l Limit) (LimitState, error) {
	if err := l.Validate(); err != nil {
		return LimitState{}, err
	}
	st, err := c.store(region)
	if err != nil {
		return LimitState{}, err
	}
	return st.UpsertLimit(ctx, l, c.cfg.Now())
}

// Limits returns every limit key of a region with its live state.
func (c *Client) Limits(ctx context.Context, region string) ([]LimitState, error) {
	st, err := c.store(region)
	if err != nil {
		return nil, err
	}
	return st.ListLimits(ctx)
}

// ListParams filters List; zero fields match everything.
type ListParams struct {
	Tenant string
	State  State
	Kind   string
	Lane   Lane
	// LimitKey matches jobs that name this limit key.
	LimitKey string
	// After is the last id of the previous page.
	After string
	// Limit is the page size (at most 1000; default 100).
	Limit int
}

// List returns a region's jobs matching p, newest first, without their
// attempt histories (use Job for one job's history).
func (c *Client) List(ctx context.Context, region string, p ListParams) ([]*Job, error) {
	st, err := c.store(region)
	if err != nil {
		return nil, err
	}
	return st.List(ctx, store.ListParams{Tenant: p.Tenant, State: p.State, Kind: p.Kind, Lane: p.Lane, LimitKey: p.LimitKey,
		After: p.After, Limit: p.Limit})
}
