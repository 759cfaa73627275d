// Package store defines the contract every ratelane storage driver meets: the
// Store interface, its parameter types and its errors, plus the parts of the
// lease and finish logic that are the same on every driver (they work on the
// small Tx primitives each driver provides inside its own transaction).
//
// A Store holds the jobs and limit keys of exactly one region. Every write
// that changes a job's state is guarded on the state (and lease token) the
// caller expects, so a worker that lost its lease cannot write an outcome and
// a validated job publishes at most once.
//
// Drivers live in subpackages (sqlite, postgres) and all pass the conformance
// suite in storetest.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
)

// Errors callers branch on.
var (
	// ErrNotFound: no job or key with that id in this store.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the row was not in the state the guarded write expected
	// (a lost lease, a second publish, a cancel of a finished job).
	ErrConflict = errors.New("conflict: job is not in the expected state")
)

// Store is one region's durable job and limit-key storage. Implementations
// are safe for concurrent use. Times passed in are the caller's clock; stores
// never read the wall clock for decisions, so tests control time.
type Store interface {
	// Region is the region this store holds. A store wired to a worker or
	// API of another region is a start-up error.
	Region() string
	// Migrate applies the embedded schema migrations (idempotent).
	Migrate(ctx context.Context) error
	// Close releases the store's connections.
	Close() error

	// Insert persists jobs. Each job arrives complete (ID, State accepted or
	// waiting, EligibleAt, CreatedAt set by the caller). A job whose
	// idempotency key (per tenant) already exists is not inserted; its
	// result carries the existing job and Existing=true. Unknown limit keys
	// are created with def. It is atomic, unless ctx is marked batch-lane
	// and WithPieces: a single-writer store may then commit it in pieces.
	// With ctx marked by WithCostCheck it first refuses, inserting
	// nothing, what CheckCosts would refuse, with CheckCosts' error.
	Insert(ctx context.Context, jobs []*job.Job, def admission.Config) ([]InsertResult, error)
	// Get returns one job or ErrNotFound.
	Get(ctx context.Context, id string) (*job.Job, error)
	// List returns jobs matching p, newest first, with cursor pagination.
	List(ctx context.Context, p ListParams) ([]*job.Job, error)
	// ReadyParents returns the accepted parents of p.Kind that have no
	// part that is not final (no open child of p.PartKinds and no open
	// batch item naming them; ReadyParentsQuery), newest first, with
	// cursor pagination: the engine's periodic parts sweep, whose cost is
	// then the ready parents' and not every waiting one's.
	ReadyParents(ctx context.Context, p ReadyParentsParams) ([]*job.Job, error)
	// PartsOf returns every child (ParentID) of the jobs ids, of any
	// kind, tenant and region, in one read: a parent's children together,
	// newest first, in no particular order of parents. The sweep reads
	// the parts of a page of ready parents with it, instead of a List per
	// parent. No ids, no children.
	PartsOf(ctx context.Context, ids []string) ([]*job.Job, error)

	// Lease atomically admits and leases up to p.Max eligible jobs: a job is
	// leased only when every one of its limit keys admits it (not paused, a
	// token available, below the concurrency cap).
	Lease(ctx context.Context, p LeaseParams) ([]*job.Job, error)
	// Heartbeat extends a running job's lease; ErrConflict when the lease
	// was lost (expired and recovered, or the job was cancelled).
	Heartbeat(ctx context.Context, id, token string, until time.Time) error
	// Finish applies the transitions that end attempts, in one durable
	// write. Each is guarded on (id, running, lease token); the returned
	// slice holds nil or ErrConflict per transition. A retry that its
	// keys pace needs no backoff (see PacedRetry): Finish then writes it
	// eligible at once, and updates its EligibleAt and Record in ts, so
	// that the caller reports what was written.
	Finish(ctx context.Context, ts []Transition) ([]error, error)
	// Expired returns up to limit running jobs whose lease expired by now
	// (lease_expires_at <= now), for the reaper to finish with a
	// lease_expired outcome whose Transition.LeaseExpiredBy is now.
	Expired(ctx context.Context, now time.Time, limit int) ([]*job.Job, error)
	// Publish moves a validated job to published: a compare-and-set that
	// succeeds at most once (ErrConflict afterwards).
	Publish(ctx context.Context, id string, now time.Time) error
	// ClaimPublish takes a validated job's publication for the caller
	// holding token until until, so that concurrent publishers (two
	// nodes' sweeps, a parent's aggregation woken twice) do not both run
	// the kind's side effect. It succeeds when the job is validated and
	// its publication is unclaimed, the claim ran out by now, or token
	// already holds it (an extension; until <= now releases it);
	// ErrConflict otherwise, ErrNotFound for an unknown id. Publish clears
	// the claim. A claim that outlives a crash runs out: publication is
	// at least once across crashes, at most once among live callers.
	ClaimPublish(ctx context.Context, id, token string, now, until time.Time) error
	// Advance moves a job that is not running from one state to another
	// (a parent job from accepted to validated with its aggregated result,
	// to waiting, or to terminal), guarded on p.From; ErrConflict when the
	// job is not in that state. Transitions out of running go through
	// Finish instead.
	Advance(ctx context.Context, p AdvanceParams) (*job.Job, error)
	// Cancel ends a non-final job as terminal/cancelled, releasing its keys
	// if it was running. ErrConflict when it is already final.
	Cancel(ctx context.Context, id string, now time.Time) (*job.Job, error)
	// Redrive returns a terminal job to waiting with fresh budgets and the
	// redrive recorded in its history as RedriveRecord (the job's attempt,
	// the reason it had ended with).
	Redrive(ctx context.Context, id string, now time.Time) (*job.Job, error)
	// Delete removes a terminal job (a dead letter). ErrConflict otherwise.
	Delete(ctx context.Context, id string) error
	// ExpireDeadlines ends waiting, scheduled and accepted jobs whose
	// deadline passed before now as terminal/deadline_exceeded.
	ExpireDeadlines(ctx context.Context, now time.Time) (int, error)
	// Prune deletes finished jobs that finished before before.
	Prune(ctx context.Context, before time.Time) (int, error)

	// UpsertLimit creates or reconfigures a limit key at now (the caller's
	// clock, as everywhere in the store), keeping its live state; see
	// admission.State.Reconfigure. It validates c.
	UpsertLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, error)
	// DeclareLimit is UpsertLimit for a declared configuration (a config
	// file's limits, a review provider's rpm/tpm), applied at every
	// start: it applies c only when the key does not exist or the
	// declaration last applied to it (its LimitFingerprint, stored with
	// the key) differs from c's, and reports whether it did. Otherwise the
	// key is left as it is, so an operator's UpsertLimit since (PUT
	// /v1/limits) lasts until the declaration itself changes. It validates c.
	DeclareLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, bool, error)
	// GetLimit returns one key's configuration and live state.
	GetLimit(ctx context.Context, name string) (admission.State, error)
	// LimitConfigs returns the configuration of each named key that
	// exists, by name; a name with no key is absent. It reads no live
	// state (not the running jobs an unpaced key's in-flight count is
	// derived from), so a check that needs only the shape, as CheckCosts
	// on every insert, costs one read of the keys' rows.
	LimitConfigs(ctx context.Context, names []string) (map[string]admission.Config, error)
	// ListLimits returns every key, ordered by name.
	ListLimits(ctx context.Context) ([]admission.State, error)

	// Stats counts jobs by lane and state and reports the oldest ready job
	// per lane.
	Stats(ctx context.Context, now time.Time) (Stats, error)
	// OldestReady is Stats' OldestReady alone: per lane, the age at now of
	// the oldest job (waiting or retry_scheduled) eligible at now; a lane
	// with none is absent. It reads only the ready-job indexes, not every
	// job as Stats' counts do, so a wait prediction can afford it.
	OldestReady(ctx context.Context, now time.Time) (map[job.Lane]time.Duration, error)
	// PutObject stores a small document of the region (a webhook
	// subscriber, a review's diff) under (kind, id), replacing any previous
	// one. Content that must stay in its region lives here, never in a
	// job's payload.
	PutObject(ctx context.Context, o Object) error
	// PutObjectIf is PutObject as a guarded write: it stores o only when
	// the stored body is exactly prev (prev nil: only when there is no
	// such object yet), and returns ErrConflict otherwise, so that a
	// read-modify-write of a document by two nodes at once loses neither
	// update silently.
	PutObjectIf(ctx context.Context, o Object, prev []byte) error
	// GetObject returns one document or ErrNotFound.
	GetObject(ctx context.Context, kind, id string) (Object, error)
	// GetObjects returns the documents of kind among ids, by id, in few
	// statements; an id with no document is absent from the map (no
	// error), and an id named twice is read once. A batch pass reads a
	// chunk's thousand part objects with it: one GetObject each was a
	// thousand statements in a row, each with its own cancellation
	// watchers, and those goroutines flooded the run queues the
	// interactive lane's goroutines wait in (docs/benchmarks.md,
	// "Session 21 (s21h4)").
	GetObjects(ctx context.Context, kind string, ids []string) (map[string]Object, error)
	// ListObjects returns up to limit documents of a kind with ids after
	// after, in id order; limit pages as List's (PageSize).
	ListObjects(ctx context.Context, kind, after string, limit int) ([]Object, error)
	// DeleteObject removes a document; ErrNotFound when there is none.
	DeleteObject(ctx context.Context, kind, id string) error

	// Backlog returns, for each named key, the cost of the jobs waiting on
	// it (waiting or retry_scheduled) in the given lane and every lane
	// scheduled before it; the API predicts queue age from it.
	Backlog(ctx context.Context, lane job.Lane, keys []string) (map[string]int64, error)

	// Schedules holds the region's periodic producers (schedule.go).
	Schedules
	// Batches holds the batch lane's manifests, items and chunks (batch.go).
	Batches
	// BatchSettles settles a chunk's items in groups (batch_settle.go).
	BatchSettles
	// ObjectsBulk stores many objects in one write (objects_bulk.go).
	ObjectsBulk
}

// AdvanceParams describes a guarded transition of a job that is not running.
type AdvanceParams struct {
	ID     string
	From   job.State
	To     job.State
	Reason job.Reason      // for To == terminal
	Result json.RawMessage // kept unless nil
	Record job.AttemptRecord
	Now    time.Time
	// Publish, with To == validated, also records the job's publication
	// in the same write: validated -> published as Store.Publish records
	// it, so the job ends published. It is for a job with nothing to
	// deliver (an aggregated parent whose kind has no Publisher, or
	// whose Publisher delivers nothing for it), whose publication is the
	// compare-and-set alone: one write instead of two, and no moment at
	// which a crash leaves it validated. A job whose publication has a
	// side effect is advanced to validated alone and published after
	// the side effect (Publish, with its claim).
	Publish bool
	// Brief: the caller needs of the job Advance returns only its ID and
	// the State the write left (To, or published with Publish), which it
	// knows without a read; Advance then returns a job with only those
	// set and does not read the row back, a statement per advance that
	// the batch aggregation's callers threw away but for those two
	// fields (it knows the rest from the row it aggregated;
	// docs/benchmarks.md, "Session 40 (s40h2)").
	Brief bool
}

// Check reports an advance the state machine does not allow.
func (p AdvanceParams) Check() error {
	if p.From == job.StateRunning || !job.CanTransition(p.From, p.To) {
		return errors.New("advance: " + string(p.From) + " -> " + string(p.To) + " is not allowed here")
	}
	if p.Publish && p.To != job.StateValidated {
		return errors.New("advance: only an advance to validated may record the publication too, not one to " + string(p.To))
	}
	if (p.To == job.StateTerminal) != (p.Reason != "") {
		return errors.New("advance: a terminal job needs a reason, and only a terminal one has one")
	}
	return nil
}

// Object is a small document kept in a region's store. Body is opaque to
// the store (JSON or bytes); at most MaxObjectBytes.
type Object struct {
	Kind      string
	ID        string
	Body      []byte
	UpdatedAt time.Time
}

// MaxObjectBytes bounds one object: large enough for a big diff, small
// enough for one row.
const MaxObjectBytes = 16 << 20

// Check refuses an object larger than MaxObjectBytes, before a driver
// writes it.
func (o Object) Check() error {
	if len(o.Body) > MaxObjectBytes {
		return fmt.Errorf("object %s/%s is %d bytes; the limit is %d", o.Kind, o.ID, len(o.Body), MaxObjectBytes)
	}
	return nil
}

// CheckObjects is Check over every object of a bulk put, so a driver
// refuses the whole put before writing any of it.
func CheckObjects(os []Object) error {
	for _, o := range os {
		if err := o.Check(); err != nil {
			return err
		}
	}
	return nil
}

// Changed is the error of a conditional put whose object was changed (or
// created) since it was read.
func (o Object) Changed() error {
	return fmt.Errorf("object %s/%s changed since it was read: %w", o.Kind, o.ID, ErrConflict)
}

// InsertResult is the result of inserting one job.
type InsertResult struct {
	Job      *job.Job
	Existing bool
}

// ListParams filters List. Zero fields match everything.
type ListParams struct {
	Tenant string
	State  job.State
	Kind   string
	Lane   job.Lane
	Parent string
	// LimitKey matches jobs that name this limit key among theirs (e.g.
	// "subscriber:store_17" for one webhook subscriber's deliveries).
	LimitKey string
	// After is the id of the last job of the previous page; ids sort by
	// creation time, so pagination is stable.
	After string
	// Limit is the page size: zero means DefaultListLimit, above
	// MaxListLimit it is MaxListLimit (PageSize).
	Limit int
}

// FinishLeaser is a Store that can finish attempts and lease in one
// durable write: FinishLease applies ts exactly as Finish does and then,
// in the same transaction and so seeing what the finish released (a
// concurrency slot, a window's flight, a paused key's pause), leases as
// Lease does with p; p.Max 0 leases nothing. An engine whose fetch loop
// is idle (its last lease came back empty) would otherwise lease right
// after the finish commits: on a key held at its concurrency cap that is
// one commit per job on the path from one answer to the next start. The
// cap still holds on every node: the slot the lease takes is the one the
// finish freed, in one transaction. Errors are Finish's; when the call
// fails, nothing of it was written.
//
// With p.Released set, the call leases only when the finish released
// something (see FinishReleased) and tells p.Released whether it did:
// a finish that released nothing left every lease's answer as it was,
// so its lease would take only what the caller's last lease left or what
// another write announces anyway (most finishes of unpaced keys' jobs
// leased nothing: docs/benchmarks.md, "Session 28 (s28h4)"). With p.Max 0
// and p.Released set it is Finish that also tells whether it released.
// A driver may skip the lease's statements when it can tell, in the same
// transaction, that the lease would take nothing (SQLite reads first, as
// LeaseProber does: beside a sweep with no CPU turn free almost every
// finish's lease took nothing, docs/benchmarks.md, "Session 31 (s31h2)").
type FinishLeaser interface {
	FinishLease(ctx context.Context, ts []Transition, p LeaseParams) ([]error, []*job.Job, error)
}

// InsertLeaser is a Store that can insert jobs and lease in one durable
// write: InsertLease stores os and inserts jobs exactly as
// InsertWithObjects does (as Insert when os is empty) and then, in the
// same transaction and so seeing the jobs it inserted, leases as Lease
// does with p; p.Max 0 leases nothing. An engine that would lease an
// interactive job right after its insert commits (its insert's Notify
// wakes the fetch loop) would otherwise queue a second write for it: on
// a single-writer store a second turn through the writer's queue, which
// a batch sweep makes long (docs/benchmarks.md, "Session 30 (s30h1)").
// Admission is the lease's own: a job whose keys refuse it is inserted
// and left waiting. Results and errors are InsertWithObjects'; when the
// call fails, no job was inserted and none leased (objects may be
// stored, as InsertWithObjects may leave them).
type InsertLeaser interface {
	InsertLease(ctx context.Context, os []Object, jobs []*job.Job, def admission.Config, p LeaseParams) ([]InsertResult, []*job.Job, error)
}

// LeaseProber is a Store that can tell by a read, without a write
// transaction, that a Lease with p at p.Now would take no job and write
// nothing: MayLease reports false only then (no group of p's lane and
// kinds has a waiting job eligible at p.Now, and no retry is due to be
// promoted). It honours p's batch bound: with BatchMax -1 a ready group
// of a kind BatchMax counts is no reason to say true, since such a lease
// takes none of its jobs. It may report true when a Lease would still
// take nothing (a key refuses, a group is blocked). An idle engine's poll asks it first:
// on SQLite a Lease that finds nothing still queues for the one writer
// and commits, and the poll of an idle engine found nothing about once per
// interactive review (docs/benchmarks.md, "Session 29 (s29h5)").
type LeaseProber interface {
	MayLease(ctx context.Context, p LeaseParams) (bool, error)
}

// ManyAdvancer is a Store with a single writer (SQLite) that takes
// several advances from one caller at once: AdvanceMany queues them all
// for its writer before it waits for any, so that they share its commits,
// and answers them in order, each as Advance would (its job, or its error:
// ErrConflict for one whose job was not in p.From). They are not atomic
// together: each commits or fails on its own. Without it a caller that
// wanted them to share commits ran one goroutine per advance, and the
// writer's commit made them all runnable at once: under a batch sweep the
// 32 of a stretch were most of the goroutines queued for a CPU ahead of
// the interactive lane's (docs/benchmarks.md, "Session 31 (s31h4)"). A
// store whose writes run in parallel gains nothing over concurrent
// Advance calls and does not implement it.
type ManyAdvancer interface {
	AdvanceMany(ctx context.Context, ps []AdvanceParams) ([]*job.Job, []error)
}

// ParentsReader is a Store that reads a group of parents and their
// children in one snapshot: ParentsWithChildren returns those of the jobs
// ids that exist (in no particular order, without their History, as
// ReadyParents lists them) and every child (ParentID) of them, as
// PartsOf returns them, all as of one moment, so that no child is seen
// in a state its parent's row does not yet reflect, nor the other way
// round (a part's finish that advances its parent in the same write is
// seen whole or not at all). No ids, nothing. The batch aggregation
// reads a woken group of up to 32 parents with it: a read of its
// children and one of its row per parent were ~11 % of a 10,000-file
// sweep's CPU, mostly SQLite's own (docs/benchmarks.md, "Session 39
// (s39h1)", "Session 40 (s40h2)").
type ParentsReader interface {
	ParentsWithChildren(ctx context.Context, ids []string) (parents, children []*job.Job, err error)
}

// InteractiveWatcher is a Store with a single writer (SQLite) that can
// keep a transaction of batch-lane writes open, for a bounded time, while
// the process has interactive work in flight, so that an interactive write
// arriving then joins it instead of waiting for its commit: an interactive
// write that finds the writer committing batch-lane writes waits for the
// whole commit (its fsync), then commits alone (docs/benchmarks.md,
// "Session 31 (s31h3)"). WatchInteractive adds busy, which the writer
// calls on its goroutine before it commits a transaction holding only
// batch-lane writes: it must be quick (an atomic load) and must not
// write. A store with several watchers holds while any reports true. A
// store whose writes run in parallel has no such commit to avoid and does
// not implement it.
type InteractiveWatcher interface {
	WatchInteractive(busy func() bool)
}

// LeaseParams describes one lease call.
type LeaseParams struct {
	Now time.Time
	// Max is the number of jobs wanted (free worker slots).
	Max int
	// LeaseFor is how long the lease lasts before it expires.
	LeaseFor time.Duration
	// Kinds restricts the lease to these kinds; empty means any kind.
	Kinds []string
	// Tenant restricts the lease to one tenant's jobs (an external worker
	// acting for that tenant); empty means every tenant.
	Tenant string
	// Lane restricts the lease to one lane's jobs (a lane-dedicated node:
	// engine.Config.Lanes); empty means both lanes. An interactive-only
	// lease takes no batch-lane job (BatchMin and BatchMax are then moot);
	// a batch-only lease takes batch-lane jobs up to its batch bound and
	// never asks about the interactive lane.
	Lane job.Lane
	// BatchMin is how many of the Max slots batch work gets first, its
	// minimum share; it is ignored while the oldest ready interactive job has
	// waited longer than InteractiveBudget.
	BatchMin int
	// BatchMax bounds the batch-lane jobs the call leases of the kinds in
	// BatchMaxKinds (of every kind when that is empty): when positive, at
	// most that many; when negative, none; zero, no bound but Max. An
	// engine sets it to the batch lane's free turns of its CPU governor, so
	// that a batch job is never leased while it could not run (it would
	// hold a worker slot and its lease, waiting).
	BatchMax int
	// BatchMaxKinds, when not empty, are the kinds BatchMax counts: the
	// engine's computing kinds (engine.Kind.Computes). Batch-lane jobs of
	// the other kinds (a webhook delivery, which waits on its subscriber)
	// are leased as if BatchMax were zero, under their keys' pacing only,
	// also while the counted kinds' bound is reached. With Kinds set, a
	// lease whose bound is reached asks only for the other kinds' groups,
	// so ready groups of counted kinds never hide them; with Kinds empty
	// (every kind) it passes over such groups instead.
	BatchMaxKinds []string
	// InteractiveBudget is the interactive lane's latency budget.
	InteractiveBudget time.Duration
	// NextAdmission, when set, is called once per call that skipped a
	// group because one of its keys refused, with the earliest time such a
	// group may be admitted. An engine sleeps until then rather than a
	// whole poll interval: on a key allowing two starts a second, waking up
	// to 50 ms late on every token would cost a tenth of its rate.
	NextAdmission func(at time.Time)
	// Released, when set, is FinishLease's alone (Lease ignores it): the
	// call leases only when its finish released something, and Released
	// is told whether it did (see FinishReleased) once the write is
	// durable.
	Released func(released bool)
}

// BatchCap is the most batch-lane jobs of the kinds BatchMax counts a
// lease with p may take (BatchMax within Max).
func (p LeaseParams) BatchCap() int {
	switch {
	case p.BatchMax < 0:
		return 0
	case p.BatchMax > 0:
		return min(p.BatchMax, p.Max)
	}
	return p.Max
}

// BatchCounts reports whether BatchMax counts batch-lane jobs of kind.
func (p LeaseParams) BatchCounts(kind string) bool {
	return len(p.BatchMaxKinds) == 0 || slices.Contains(p.BatchMaxKinds, kind)
}

// BatchLaneCap is the most batch-lane jobs of any kind a lease with p may
// take: BatchCap when BatchMax counts every kind the lease may take, else
// Max (the uncounted kinds are bounded by Max alone).
func (p LeaseParams) BatchLaneCap() int {
	if len(p.BatchMaxKinds) == 0 || (len(p.Kinds) > 0 && !slices.ContainsFunc(p.Kinds, func(k string) bool { return !p.BatchCounts(k) })) {
		return p.BatchCap()
	}
	return p.Max
}

// BatchKinds is the kinds filter of a lease's batch-lane groups once left
// more jobs of the counted kinds may be taken: Kinds, less the counted
// kinds when left is 0 and Kinds is set (when it is empty the lease
// passes over the counted kinds' groups itself).
func (p LeaseParams) BatchKinds(left int) []string {
	if left > 0 || len(p.BatchMaxKinds) == 0 || len(p.Kinds) == 0 {
		return p.Kinds
	}
	return slices.DeleteFunc(slices.Clone(p.Kinds), p.BatchCounts)
}

// Transition ends one attempt of a running job. The engine computes it from
// the job and the handler's outcome; the store applies it guarded on ID,
// state running, LeaseToken and, when Record.Attempt is set (engine.Decide
// always sets it), the job's attempt, and applies Keys to the job's limit
// keys in the same transaction.
type Transition struct {
	ID         string
	LeaseToken string
	To         job.State
	Reason     job.Reason
	EligibleAt time.Time
	Attempts   job.Attempts
	Record     job.AttemptRecord
	Result     json.RawMessage
	Keys       KeyEffect
	// LeaseExpiredBy, when set, also guards on the lease having expired by
	// then (lease_expires_at <= LeaseExpiredBy). The reaper sets it: a
	// lease it selected as expired but that a heartbeat renewed before its
	// transition ran is not recovered (ErrConflict), so a live worker keeps
	// its job. The lease token already fences everything else: it is new
	// at every lease (with attempt + 1), so a job completed, recovered or
	// leased again since the reaper's selection conflicts too.
	LeaseExpiredBy time.Time
	// Parent, when set, is the advance of the job's parent, written in
	// the same transaction when this transition is written and ends the
	// job's last open part (see ParentAdvance); Finish sets its Job.
	Parent *ParentAdvance
}

// KeyEffect is what an attempt's outcome does to the job's limit keys. Every
// finished attempt releases one in-flight lease on each key.
type KeyEffect struct {
	Now time.Time
	// Answered is when the attempt's answer was in (its handler
	// returned), if known and before Now: a window logs the start then
	// rather than at Now (see ApplyKeyEffect). Zero means Now.
	Answered time.Time
	// Success lets adaptive keys probe upward.
	Success bool
	// RateLimited is a refusal (429, or 503 with Retry-After): the Scope
	// keys pause until PauseUntil and adaptive ones learn their limit
	// from it (admission.State.RateLimited).
	RateLimited bool
	// PauseUntil pauses the Scope keys (also without RateLimited, e.g. for a
	// spent provider quota).
	PauseUntil time.Time
	// Backoff says a RateLimited PauseUntil is the job's own backoff: the
	// upstream named no retry delay. Adaptive keys then slow down instead
	// of pausing (see admission.State.Throttled).
	Backoff bool
	// Scope names the keys a pause applies to; empty means all of the job's keys.
	Scope []string
	// JobKeys are the job's limit keys, set with Backoff or Fault
	// (engine.Decide): Finish reads their configuration to tell whether
	// they pace the job's retry themselves (see PacedRetry, PacedFault).
	// Nil keeps the backoff.
	JobKeys []string
	// Fault marks the retry after one of a job's first transient failures
	// (a 5xx without Retry-After, a timeout; engine.PacedFaults of them):
	// Finish drops its backoff when
	// every key of the job spaces its starts (see PacedFault). It changes
	// nothing on the keys.
	Fault bool
	// Hints feed remaining-quota information to the buckets.
	Hints []job.Hint
	// Estimated and Actual reconcile the bucket with the real cost.
	Estimated, Actual int64
}

// Stats is a snapshot of one store.
type Stats struct {
	// Counts[lane][state] is the number of jobs.
	Counts map[job.Lane]map[job.State]int64
	// OldestReady[lane] is the age of the oldest job that is eligible now
	// (waiting or retry_scheduled with eligible_at <= now).
	OldestReady map[job.Lane]time.Duration
	// Running is the number of leases in flight.
	Running int64
}

// RedriveRecord is the history record every driver appends for a redrive:
// at the job's current attempt (so the line sorts after the attempt it
// follows) and naming the reason the job had ended with, which the redrive
// clears from the job itself. One definition, so that a job's history reads
// the same on every store.
func RedriveRecord(at time.Time, attempt int, reason job.Reason) job.AttemptRecord {
	return job.AttemptRecord{At: at, Attempt: attempt, Outcome: job.ClassRedriven,
		Why: "redriven by an operator after " + string(reason) + "; budgets reset"}
}

// BacklogLanes names the lanes whose waiting jobs count in lane's Backlog:
// lane and every lane scheduled before it, so the interactive lane alone
// for an interactive job and both lanes for a batch job. One definition
// for both drivers' Backlog.
func BacklogLanes(lane job.Lane) []string {
	if lane == job.LaneBatch {
		return []string{string(job.LaneInteractive), string(job.LaneBatch)}
	}
	return []string{string(job.LaneInteractive)}
}
