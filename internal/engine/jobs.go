package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Jobs is the one writer of a region's job state: every lease, heartbeat,
// outcome, cancel, redrive, parent advance and recorded publication of the
// region goes through it, whether it comes from the engine's own workers,
// an external worker over HTTP, an operator or a plug-in (webhook
// redelivery, review aggregation). So batch's share of starts is one
// policy, every outcome is classified by Decide, and every lease and
// finished attempt reaches the same Observer, whoever ran the job.
//
// An Engine makes one (Engine.Jobs) unless Config.Jobs hands it one; a
// process that serves the HTTP API for a region it runs no kinds of makes
// its own with NewJobs. One Jobs per region and process: its batch credit
// is in memory. It is safe for concurrent use.
type Jobs struct {
	cfg JobsConfig

	mu     sync.Mutex
	credit float64 // batch starts earned (BatchShare per start) and not yet taken
	rnd    *rand.Rand
	served map[string]time.Time // kind -> last lease asking for it; zero: an engine runs it
	// servedIn: the one lane an engine here runs the kind in (ServeIn);
	// absent: both.
	servedIn map[string]job.Lane
	stats    *statsCache // PredictWait's last read of the lanes' ages

	// Counts: starts and 429s by lane, and per limit key (counts.go).
	laneStarts, laneLimited map[job.Lane]int64
	keyCounts               map[string]*keyCount
	// statsReading is set while one caller refreshes stats.
	statsReading bool
	// partWatchers are told the parent of every part this writer moves
	// to a final state (parts.go).
	partWatchers []func(parentID string, lane job.Lane)
	// insertWatchers are told the results of every Insert of this writer
	// (watchInserts).
	insertWatchers []func(res []store.InsertResult)
	// inserts, when set, is the engine that leases in the write of an
	// interactive insert of InsertParts (leaseInserts).
	inserts insertLeaser
}

// JobsConfig configures a Jobs. Zero optional fields take the defaults of
// WithDefaults.
type JobsConfig struct {
	// Store is the region's store (required).
	Store store.Store
	// BatchShare is batch work's minimum share of starts while interactive
	// work is within budget; default 0.1. Negative means none.
	BatchShare float64
	// MaxCredit bounds the batch starts that may be owed at once; default
	// job.DefaultWorkers.
	MaxCredit int
	// InteractiveBudget is the interactive lane's latency budget; default
	// job.DefaultInteractiveBudget. Past it, batch's share is not taken.
	InteractiveBudget time.Duration
	// Backoff is the retry timing of outcomes without a server-given delay.
	Backoff Backoff
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives ids, never payloads; default slog.Default().
	Logger *slog.Logger
	// Observer, when set, is told of every lease and written outcome.
	Observer Observer
}

// WithDefaults returns c with zero fields replaced by their defaults.
func (c JobsConfig) WithDefaults() JobsConfig {
	c.BatchShare = cmp.Or(c.BatchShare, DefaultBatchShare)
	c.MaxCredit = cmp.Or(c.MaxCredit, job.DefaultWorkers)
	c.InteractiveBudget = cmp.Or(c.InteractiveBudget, job.DefaultInteractiveBudget)
	c.Backoff = c.Backoff.WithDefaults()
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// NewJobs returns the writer of cfg.Store's region.
func NewJobs(cfg JobsConfig) (*Jobs, error) {
	cfg = cfg.WithDefaults()
	switch {
	case cfg.Store == nil:
		return nil, errors.New("engine: JobsConfig.Store is required")
	case cfg.BatchShare > 1:
		return nil, fmt.Errorf("engine: BatchShare must be at most 1, got %v", cfg.BatchShare)
	case cfg.MaxCredit < 1:
		return nil, fmt.Errorf("engine: MaxCredit must be at least 1, got %d", cfg.MaxCredit)
	}
	return &Jobs{cfg: cfg, rnd: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5eed))}, nil
}

// Region is the region of the store the writer writes.
func (w *Jobs) Region() string { return w.cfg.Store.Region() }

// Store is the region's store, for reads.
func (w *Jobs) Store() store.Store { return w.cfg.Store }

// LeaseParams says what a worker asks Lease for.
type LeaseParams struct {
	// Max is the most jobs to lease (at least 1).
	Max int
	// LeaseFor is the lease period.
	LeaseFor time.Duration
	// Kinds are the job kinds the worker runs (required: a worker never
	// takes another's kinds).
	Kinds []string
	// Tenant, when set, leases that tenant's jobs only.
	Tenant string
	// Lane, when set, leases that lane's jobs only (store.LeaseParams.Lane).
	Lane job.Lane
	// BatchMax bounds the batch-lane jobs leased (store.LeaseParams.BatchMax:
	// negative none, zero no bound).
	BatchMax int
	// BatchMaxKinds are the kinds BatchMax counts (store.LeaseParams.BatchMaxKinds:
	// empty, every kind).
	BatchMaxKinds []string
	// NextAdmission, when set, is told the earliest time a key that
	// refused this call may admit again.
	NextAdmission func(at time.Time)
	// Released, when set, is ReportLease's alone: the call leases only
	// when the outcomes released something, and Released is told whether
	// they did (store.LeaseParams.Released).
	Released func(released bool)
}

// Lease leases up to p.Max admitted jobs. Batch gets its minimum share of
// starts from the credit every lease of this writer earns, whoever leases:
// batch earns BatchShare per start, not per call, so on a paced key (a job
// or two per call) it does not go first on every call.
func (w *Jobs) Lease(ctx context.Context, p LeaseParams) ([]*job.Job, error) {
	sp := w.leaseParams(p)
	jobs, err := w.cfg.Store.Lease(ctx, sp)
	w.leased(jobs, sp.Now)
	return jobs, err
}

// mayLease reports whether a Lease with p might take a job now: false
// only when the store tells by a read that it would take nothing and
// write nothing (store.LeaseProber); true on any other store and when
// the read fails (the lease then decides, as without the read). The kinds
// count as asked for either way (leasedKinds): a worker polling them
// serves them whether or not it writes.
func (w *Jobs) mayLease(ctx context.Context, p LeaseParams) bool {
	pr, ok := w.cfg.Store.(store.LeaseProber)
	if !ok {
		return true
	}
	now := w.cfg.Now()
	w.leasedKinds(p.Kinds, now)
	noteLease("read:maylease", LeaseParams{}, nil) // counted as a lease call that took nothing
	may, err := pr.MayLease(ctx, store.LeaseParams{Now: now, Max: p.Max, Kinds: p.Kinds, Tenant: p.Tenant, Lane: p.Lane,
		BatchMax: p.BatchMax, BatchMaxKinds: p.BatchMaxKinds})
	return may || err != nil
}

// leaseParams is the store's lease call for p at the writer's clock, with
// batch's share of it.
func (w *Jobs) leaseParams(p LeaseParams) store.LeaseParams {
	now := w.cfg.Now()
	w.leasedKinds(p.Kinds, now)
	w.mu.Lock()
	batchMin := min(int(w.credit), p.Max)
	w.mu.Unlock()
	return store.LeaseParams{
		Now: now, Max: p.Max, LeaseFor: p.LeaseFor, Kinds: p.Kinds, Tenant: p.Tenant, Lane: p.Lane,
		BatchMin: batchMin, BatchMax: p.BatchMax, BatchMaxKinds: p.BatchMaxKinds, InteractiveBudget: w.cfg.InteractiveBudget, NextAdmission: p.NextAdmission,
		Released: p.Released,
	}
}

// leased counts jobs a lease at now returned: batch credit, per-key
// counts and the Observer.
func (w *Jobs) leased(jobs []*job.Job, now time.Time) {
	batch := 0
	for _, j := range jobs {
		if j.Lane == job.LaneBatch {
			batch++
		}
	}
	w.mu.Lock()
	if w.cfg.BatchShare > 0 {
		w.credit = min(max(0, w.credit+w.cfg.BatchShare*float64(len(jobs))-float64(batch)), float64(w.cfg.MaxCredit))
	}
	w.countLeased(jobs, now)
	w.mu.Unlock()
	if w.cfg.Observer != nil && len(jobs) > 0 {
		w.cfg.Observer.Leased(len(jobs))
	}
}

// Heartbeat extends the lease token's hold on job id to now + leaseFor and
// returns the new expiry. store.ErrConflict or store.ErrNotFound mean the
// lease was lost (expired and recovered, or the job was cancelled).
func (w *Jobs) Heartbeat(ctx context.Context, id, token string, leaseFor time.Duration) (time.Time, error) {
	until := w.cfg.Now().Add(leaseFor)
	return until, w.cfg.Store.Heartbeat(ctx, id, token, until)
}

// Report is one attempt's outcome, for Jobs.Report.
type Report struct {
	// Job is the leased job, with the lease token that ran it.
	Job *job.Job
	// Outcome is what the attempt returned.
	Outcome job.Outcome
	// Validates says the kind has a publication step: success goes to
	// validated (and the engine publishes), not straight to published.
	Validates bool
	// Answered is when the handler returned (its answer was in), if
	// known; zero means the time of the report. Windows log the start at
	// it (store.KeyEffect.Answered), not at the later finish write.
	Answered time.Time
	// fuse, when set, aggregates the job's parent, of which it is the
	// last open part, with the transition Decide chose, for the same
	// write (see fused.go).
	fuse *fusedParent
}

// Reported is what became of one Report.
type Reported struct {
	// Transition is the transition Decide chose.
	Transition store.Transition
	// Err is nil when it was written; store.ErrConflict when the lease no
	// longer held the job.
	Err error
}

// Report turns outcomes into transitions with Decide and writes them in
// one guarded Finish; every one written is told to the Observer. The error
// is the store's when nothing could be written.
func (w *Jobs) Report(ctx context.Context, rs []Report) ([]Reported, error) {
	return w.report(ctx, rs, nil)
}

// report is Report calling written, when not nil, once the outcomes are
// written and before the Observer hears of any: the engine records its
// finish stage there, so what an Observer's listener reads next (the
// stage histograms) already counts the finish.
func (w *Jobs) report(ctx context.Context, rs []Report, written func()) ([]Reported, error) {
	now, ts := w.transitions(ctx, rs)
	errs, err := w.cfg.Store.Finish(ctx, ts)
	if err != nil {
		return nil, err
	}
	return w.reported(rs, ts, errs, now, written), nil
}

// CanReportLease reports whether the region's store finishes and leases
// in one write (store.FinishLeaser), which ReportLease needs.
func (w *Jobs) CanReportLease() bool {
	_, ok := w.cfg.Store.(store.FinishLeaser)
	return ok
}

// ReportLease is Report and then Lease in one durable write of the store,
// which must be a store.FinishLeaser (see CanReportLease): the lease sees
// what the outcomes released, such as a slot of a key held at its
// concurrency cap. With p.Max 0 it leases nothing (with p.Released, it is
// a Report that tells whether it released something). When it fails
// nothing was written: the caller may Report alone.
func (w *Jobs) ReportLease(ctx context.Context, rs []Report, p LeaseParams) ([]Reported, []*job.Job, error) {
	return w.reportLease(ctx, rs, p, nil)
}

// reportLease is ReportLease calling written as report does.
func (w *Jobs) reportLease(ctx context.Context, rs []Report, p LeaseParams, written func()) ([]Reported, []*job.Job, error) {
	fl, ok := w.cfg.Store.(store.FinishLeaser)
	if !ok {
		return nil, nil, errors.New("engine: the store cannot finish and lease in one write")
	}
	now, ts := w.transitions(ctx, rs)
	sp := store.LeaseParams{Released: p.Released}
	if p.Max > 0 {
		sp = w.leaseParams(p)
	}
	errs, jobs, err := fl.FinishLease(ctx, ts, sp)
	if err != nil {
		return nil, nil, err
	}
	out := w.reported(rs, ts, errs, now, written)
	if p.Max > 0 {
		w.leased(jobs, sp.Now)
	}
	return out, jobs, nil
}

// transitions decides each report's transition at the writer's clock,
// and the advance of the parent of a last open part that ends (fuse).
func (w *Jobs) transitions(ctx context.Context, rs []Report) (time.Time, []store.Transition) {
	now := w.cfg.Now()
	ts := make([]store.Transition, len(rs))
	w.mu.Lock()
	for i, r := range rs {
		ts[i] = Decide(r.Job, r.Outcome, now, r.Validates, w.cfg.Backoff, w.rnd.Float64())
		if !r.Answered.IsZero() && r.Answered.Before(now) {
			ts[i].Keys.Answered = r.Answered
		}
	}
	w.mu.Unlock()
	for i, r := range rs {
		if r.fuse != nil {
			ts[i].Parent = r.fuse.advance(ctx, ts[i])
		}
	}
	return now, ts
}

// reported counts the written transitions (rate-limited counts, the
// Observer, parts' parents) and pairs each with its error; written, when
// not nil, runs first (see report).
func (w *Jobs) reported(rs []Report, ts []store.Transition, errs []error, now time.Time, written func()) []Reported {
	if written != nil {
		written()
	}
	out := make([]Reported, len(rs))
	w.mu.Lock()
	for i, r := range rs {
		if errs[i] == nil && r.Outcome.Class == job.ClassRateLimited {
			w.countRateLimited(r.Job, r.Outcome, now)
		}
	}
	w.mu.Unlock()
	for i, r := range rs {
		out[i] = Reported{Transition: ts[i], Err: errs[i]}
		if errs[i] == nil && w.cfg.Observer != nil {
			w.cfg.Observer.Finished(r.Job, r.Outcome, ts[i])
		}
		if pa := ts[i].Parent; errs[i] == nil && pa != nil && pa.Job != nil {
			// Its parent was advanced with it: nothing to wake.
			w.advanced(pa.Advance, pa.Job)
			r.fuse.advanced(pa)
			continue
		}
		if errs[i] == nil && ts[i].To.Final() && r.Job.ParentID != "" {
			w.partFinal(r.Job.ParentID, r.Job.Lane)
		}
	}
	return out
}

// ReplayObserver is an Observer that also counts inserts answered from an
// idempotency key (ratelane_idempotent_replays_total). It is a separate
// interface so Observers written before it keep compiling.
type ReplayObserver interface {
	IdempotentReplay()
}

// Insert durably inserts jobs (prepared and validated by the caller) with
// def configuring limit keys they name first; an insert answered from an
// idempotency key (InsertResult.Existing) is told to the Observer when it
// is a ReplayObserver. It never leases (see InsertParts): its callers,
// the HTTP API and the library's Client, answer their own callers once
// the insert is durable, and a lease in the write would make that wait
// longer.
func (w *Jobs) Insert(ctx context.Context, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	return w.insert(ctx, nil, jobs, def, false)
}

// insert is Insert with objs, the objects jobs reference, stored in the
// same write (store.ObjectsBulk.InsertWithObjects) when there are any.
// With lease, the insert leases in its own write when the writer's
// engine has free slots for the interactive jobs it brings and the store
// can (insertLeasing); otherwise it inserts alone.
func (w *Jobs) insert(ctx context.Context, objs []store.Object, jobs []*job.Job, def admission.Config, lease bool) ([]store.InsertResult, error) {
	// An arriving request (Engine.Arriving) is in flight until its insert
	// is answered: deferred, so after the watchers counted what it
	// inserted, and on a failed insert too.
	defer arrived(ctx)
	if lease {
		if res, ok, err := w.insertLeasing(ctx, objs, jobs, def); ok {
			return res, err
		}
	}
	var res []store.InsertResult
	var err error
	if len(objs) > 0 {
		res, err = w.cfg.Store.InsertWithObjects(ctx, objs, jobs, def)
	} else {
		res, err = w.cfg.Store.Insert(ctx, jobs, def)
	}
	if err != nil {
		return nil, err
	}
	w.inserted(res)
	w.replays(res)
	return res, nil
}

// inserted tells the lanes' statistics and the insert watchers of res,
// the results of a durable insert.
func (w *Jobs) inserted(res []store.InsertResult) {
	w.mu.Lock()
	if w.stats != nil {
		for _, r := range res {
			if !r.Existing {
				w.stats.inserted(r.Job)
			}
		}
	}
	watchers := w.insertWatchers
	w.mu.Unlock()
	for _, fn := range watchers {
		fn(res)
	}
}

// replays tells a ReplayObserver of each result of res answered from an
// idempotency key.
func (w *Jobs) replays(res []store.InsertResult) {
	if ro, ok := w.cfg.Observer.(ReplayObserver); ok {
		for _, r := range res {
			if r.Existing {
				ro.IdempotentReplay()
			}
		}
	}
}

// leaseInserts makes e the engine that leases in the writes of this
// writer's interactive inserts of parts (insertLeasing); the first engine
// to ask keeps it.
func (w *Jobs) leaseInserts(e insertLeaser) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inserts == nil {
		w.inserts = e
	}
}

// watchInserts registers fn to be told the results of each Insert of
// this writer, after they are durable; fn skips those answered from an
// idempotency key (InsertResult.Existing). fn must return quickly and
// must not keep res: it runs on the inserting caller's goroutine, and
// is handed the insert's own results, no copy made per insert.
func (w *Jobs) watchInserts(fn func(res []store.InsertResult)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.insertWatchers = append(w.insertWatchers, fn)
}

// Cancel ends a job that is not final as terminal/cancelled. A running
// job's worker learns it at its next heartbeat.
func (w *Jobs) Cancel(ctx context.Context, id string) (*job.Job, error) {
	j, err := w.cfg.Store.Cancel(ctx, id, w.cfg.Now())
	if err == nil && j.ParentID != "" {
		w.partFinal(j.ParentID, j.Lane) // a cancelled part is final: its parent may be ready
	}
	return j, err
}

// Redrive returns a terminal job (a dead letter) to waiting with fresh
// budgets; the redrive is recorded in its history.
func (w *Jobs) Redrive(ctx context.Context, id string) (*job.Job, error) {
	return w.cfg.Store.Redrive(ctx, id, w.cfg.Now())
}

// Delete removes a job and its history (an operator deleting a dead
// letter); store.ErrNotFound when there is none.
func (w *Jobs) Delete(ctx context.Context, id string) error {
	return w.cfg.Store.Delete(ctx, id)
}

// Advance moves a parent job whose parts have all finished (a compare-and-
// set from p.From). A zero p.Now is the writer's clock. A parent that is
// itself a part and ends final wakes its own parent's aggregation. An
// advance that recorded the publication too (p.Publish) is told to a
// PublishedObserver as Published's is.
func (w *Jobs) Advance(ctx context.Context, p store.AdvanceParams) (*job.Job, error) {
	return w.advance(ctx, p, nil)
}

// advance is Advance of the job whose row its caller read as row: with
// p.Brief the store answers only the job's id and new state, and the
// rest is row's (briefed). With no row it asks for the whole job.
func (w *Jobs) advance(ctx context.Context, p store.AdvanceParams, row *job.Job) (*job.Job, error) {
	if p.Now.IsZero() {
		p.Now = w.cfg.Now()
	}
	if row == nil {
		p.Brief = false
	}
	j, err := w.cfg.Store.Advance(ctx, p)
	if err != nil {
		return j, err
	}
	j = briefed(p, j, row)
	w.advanced(p, j)
	return j, nil
}

// briefed is the job a brief advance p of row left (j, the store's
// answer, has its id and state), with row's identity: its kind, tenant,
// region, lane and parent, what the advance's callers read of it. Its
// other fields are unset. Without p.Brief it is j.
func briefed(p store.AdvanceParams, j, row *job.Job) *job.Job {
	if !p.Brief || j == nil || row == nil {
		return j
	}
	return &job.Job{ID: j.ID, State: j.State, Reason: p.Reason, Kind: row.Kind, Tenant: row.Tenant, Region: row.Region,
		Lane: row.Lane, ParentID: row.ParentID}
}

// advanceMany is Advance for each of ps, in order, on a store that takes
// them at once (store.ManyAdvancer): one goroutine queues them all and
// waits for them, and the writer commits them together. ok is false, and
// nothing is written, on a store that does not: the caller advances them
// one by one. rows[i], when not nil, is ps[i]'s job as its caller read
// it (advance's row).
func (w *Jobs) advanceMany(ctx context.Context, ps []store.AdvanceParams, rows []*job.Job) (js []*job.Job, errs []error, ok bool) {
	m, ok := w.cfg.Store.(store.ManyAdvancer)
	if !ok {
		return nil, nil, false
	}
	for i := range ps {
		if ps[i].Now.IsZero() {
			ps[i].Now = w.cfg.Now()
		}
		if rows[i] == nil {
			ps[i].Brief = false
		}
	}
	js, errs = m.AdvanceMany(ctx, ps)
	for i, err := range errs {
		if err == nil {
			js[i] = briefed(ps[i], js[i], rows[i])
			w.advanced(ps[i], js[i])
		}
	}
	return js, errs, true
}

// advanced tells of parent advance p, written and leaving the job j:
// the PublishedObserver when p recorded the publication too, and the
// aggregation of j's own parent when j is a part and ended final.
func (w *Jobs) advanced(p store.AdvanceParams, j *job.Job) {
	if po, ok := w.cfg.Observer.(PublishedObserver); ok && p.Publish && j.State == job.StatePublished {
		po.Published(j.ID) // its publication was recorded with it (AdvanceParams.Publish)
	}
	if j.State.Final() && j.ParentID != "" {
		w.partFinal(j.ParentID, j.Lane)
	}
}

// Published records that a validated job's result was delivered, with the
// compare-and-set validated -> published; store.ErrConflict means it was
// recorded already (or the job is no longer validated).
func (w *Jobs) Published(ctx context.Context, id string) error {
	err := w.cfg.Store.Publish(ctx, id, w.cfg.Now())
	if po, ok := w.cfg.Observer.(PublishedObserver); ok && err == nil {
		po.Published(id)
	}
	return err
}

// PublishedObserver is an Observer that is also told of every publication
// this writer records (validated -> published), after it is durable, so a
// caller waiting for a job's result can wait for the signal instead of
// polling the store. A separate interface, as ReplayObserver, so
// Observers written before it keep compiling. Published must return
// quickly.
type PublishedObserver interface {
	Published(id string)
}

// ClaimPublish takes, extends (same token) or, with until <= now,
// releases a validated job's publication claim (store.Store.ClaimPublish);
// store.ErrConflict means another live publisher holds it or the job is
// no longer validated.
func (w *Jobs) ClaimPublish(ctx context.Context, id, token string, until time.Time) error {
	return w.cfg.Store.ClaimPublish(ctx, id, token, w.cfg.Now(), until)
}
