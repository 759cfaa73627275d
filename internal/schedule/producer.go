package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Config configures a Producer. Zero optional fields take the defaults of
// WithDefaults.
type Config struct {
	// Store is the region's store (required): due schedules are read from it.
	Store store.Store
	// Jobs is the region's writer of job state (required): it claims
	// ticks and inserts their jobs, like every other job, so its stats
	// and observer see them. Not an interface a store also satisfies: the
	// store's ClaimTick would write around it (internal/deptest).
	Jobs *engine.Jobs
	// Regions are the configured region names produced jobs are validated
	// against; empty accepts the store's region.
	Regions []string
	// DefaultLimit configures limit keys a produced job names that do not
	// exist yet, as for every insert.
	DefaultLimit admission.Config
	// Poll is how often due schedules are looked for; default 1 s. A tick
	// is enqueued at most about Poll late.
	Poll time.Duration
	// Batch is how many due schedules one poll handles; default 100.
	Batch int
	// Now is the clock Start reads; default time.Now.
	Now func() time.Time
	// Logger receives ids and times, never payloads; default slog.Default().
	Logger *slog.Logger
	// OnEnqueue, when set, is called after a poll that enqueued jobs (an
	// engine's Notify, so a worker leases them without waiting a poll).
	OnEnqueue func()
	// Observe, when set, is told what every poll did (metrics).
	Observe func(Result)
}

// WithDefaults returns c with zero fields replaced by their defaults.
func (c Config) WithDefaults() Config {
	c.Poll = cmp.Or(c.Poll, time.Second)
	c.Batch = cmp.Or(c.Batch, 100)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Producer enqueues the due ticks of one region's schedules. Run one per
// region on every node: the store's guarded claim makes exactly one of them
// enqueue each tick. Start launches its loop; RunOnce is one poll at an
// explicit time. It is safe for concurrent use.
type Producer struct {
	cfg  Config
	mu   sync.Mutex
	stop chan struct{}
	done chan struct{}
}

// New validates cfg (after WithDefaults) and returns a stopped Producer.
func New(cfg Config) (*Producer, error) {
	cfg = cfg.WithDefaults()
	switch {
	case cfg.Store == nil || cfg.Jobs == nil:
		return nil, errors.New("schedule: Config.Store and Config.Jobs are required")
	case cfg.Poll < 10*time.Millisecond:
		return nil, fmt.Errorf("schedule: Poll must be at least 10ms, got %s", cfg.Poll)
	case cfg.Batch < 1:
		return nil, fmt.Errorf("schedule: Batch must be at least 1, got %d", cfg.Batch)
	}
	return &Producer{cfg: cfg}, nil
}

// Result counts what one poll did.
type Result struct {
	// Enqueued is the ticks whose job this poll inserted.
	Enqueued int
	// Skipped is the ticks the missed-tick policy dropped (or whose job
	// could no longer be built or admitted).
	Skipped int64
	// Lost is the claims another node (or a concurrent edit) won.
	Lost int
}

// RunOnce handles the schedules due at now: for each, the policy's plan,
// then one guarded claim per tick. A claim another node won stops that
// schedule for this poll; an error stops the poll.
func (p *Producer) RunOnce(ctx context.Context, now time.Time) (Result, error) {
	due, err := p.cfg.Store.DueSchedules(ctx, now, p.cfg.Batch)
	if err != nil {
		return Result{}, fmt.Errorf("due schedules: %w", err)
	}
	var res Result
	for _, sc := range due {
		if err := p.produce(ctx, sc, now, &res); err != nil {
			if p.cfg.Observe != nil {
				p.cfg.Observe(res)
			}
			return res, fmt.Errorf("schedule %s: %w", sc.ID, err)
		}
	}
	if res.Enqueued > 0 && p.cfg.OnEnqueue != nil {
		p.cfg.OnEnqueue()
	}
	if p.cfg.Observe != nil {
		p.cfg.Observe(res)
	}
	return res, nil
}

func (p *Producer) produce(ctx context.Context, sc *store.Schedule, now time.Time, res *Result) error {
	log := p.cfg.Logger.With("schedule_id", sc.ID, "region", sc.Region, "tenant", sc.Tenant)
	spec, err := SpecOf(sc)
	if err != nil {
		log.Error("schedule spec no longer parses; not producing", "err", err)
		return nil
	}
	tmpl, err := DecodeTemplate(sc.Template)
	if err != nil {
		log.Error("schedule template no longer decodes; not producing", "err", err)
		return nil
	}
	plan := PolicyOf(sc).Plan(spec, sc.NextAt, now)
	if plan.Next.IsZero() {
		plan.Next = now.AddDate(100, 0, 0) // a cron date that never comes again
	}
	expect, skipped := sc.NextAt, plan.Skipped
	if len(plan.Ticks) == 0 {
		return lostIsDone(p.claim(ctx, store.ClaimTickParams{ScheduleID: sc.ID, Expect: expect, Next: plan.Next, Skipped: skipped, Now: now}, res, log))
	}
	for i, tick := range plan.Ticks {
		next := plan.Next
		if i+1 < len(plan.Ticks) {
			next = plan.Ticks[i+1]
		}
		cp := store.ClaimTickParams{ScheduleID: sc.ID, Expect: expect, Next: next, Skipped: skipped, Now: now, Def: p.cfg.DefaultLimit}
		j, err := p.tickJob(ctx, tmpl, sc, tick, now)
		if err != nil {
			// A key reconfigured since the schedule was made may no longer
			// admit the cost, or a kind became built-in: skip the tick (it
			// is counted) rather than stall the schedule.
			log.Warn("schedule tick skipped: its job is not admissible", "tick", tick, "err", err)
			cp.Skipped++
		} else {
			cp.Tick, cp.Job = tick, j
		}
		if err := p.claim(ctx, cp, res, log); err != nil {
			return lostIsDone(err)
		}
		expect, skipped = next, 0
	}
	return nil
}

func (p *Producer) tickJob(ctx context.Context, tmpl Template, sc *store.Schedule, tick, now time.Time) (*job.Job, error) {
	j, err := tmpl.Job(sc, tick, now, p.cfg.Regions)
	if err != nil {
		return nil, err
	}
	if err := store.CheckCosts(ctx, p.cfg.Store, []*job.Job{j}, p.cfg.DefaultLimit); err != nil {
		return nil, err
	}
	return j, nil
}

// errLost ends a schedule's poll once another claimant won.
var errLost = errors.New("claim lost")

// lostIsDone is err, except that a lost claim is the normal end of a
// schedule's poll on all but one node.
func lostIsDone(err error) error {
	if errors.Is(err, errLost) {
		return nil
	}
	return err
}

func (p *Producer) claim(ctx context.Context, cp store.ClaimTickParams, res *Result, log *slog.Logger) error {
	got, err := p.cfg.Jobs.ClaimTick(ctx, cp)
	switch {
	case errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound):
		res.Lost++ // another node claimed it, or the schedule was edited, paused or deleted
		return errLost
	case err != nil:
		return err
	}
	res.Skipped += cp.Skipped
	if cp.Skipped > 0 {
		log.Info("schedule ticks skipped by the missed-tick policy", "skipped", cp.Skipped)
	}
	if cp.Job != nil && !got.Existing {
		res.Enqueued++
		log.Debug("schedule tick enqueued", "tick", cp.Tick, "job_id", got.Job.ID)
	}
	return nil
}

// Start launches the polling loop; it returns at once. Stop ends it.
func (p *Producer) Start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stop != nil {
		return
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go p.loop(context.WithoutCancel(ctx), p.stop, p.done)
}

func (p *Producer) loop(ctx context.Context, stop, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	t := time.NewTicker(p.cfg.Poll)
	defer t.Stop()
	for {
		if _, err := p.RunOnce(ctx, p.cfg.Now()); err != nil && ctx.Err() == nil {
			p.cfg.Logger.Error("schedule poll failed", "err", err)
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// Stop ends the loop and waits for the poll in progress; idempotent.
func (p *Producer) Stop() {
	p.mu.Lock()
	stop, done := p.stop, p.done
	p.stop = nil
	p.mu.Unlock()
	if stop == nil {
		return
	}
	close(stop)
	<-done
}
