package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// ModelChecks is how many random action sequences RunModel tries by
// default (about ModelSteps actions each), chosen to keep a run under a
// minute per driver under -race on a small machine; -rapid.checks (or
// RAPID_CHECKS) overrides it, e.g. for a nightly run.
const ModelChecks = 50

// modelLease is the lease length the model uses.
const modelLease = 10 * time.Second

// modelBudgets are small, so that runs reach every budget's end.
var modelBudgets = job.Budgets{Congestion: 2, Transient: 2, Schema: 1}

var modelKeys = []string{"k0", "k1", "k2"}

// mjob is the model's view of one job.
type mjob struct {
	id, tenant, idem string
	lane             job.Lane
	keys             []string
	state            job.State
	reason           job.Reason
	eligibleAt       time.Time
	attempt          int
	attempts         job.Attempts
	token            string
	leaseExpires     time.Time
	leased           *job.Job // the store's copy as leased, fed to engine.Decide
}

// pending is waiting or retry_scheduled: the store promotes one to the
// other when its time comes, on its own schedule, so the model does not
// tell them apart.
func (m *mjob) pending() bool {
	return m.state == job.StateWaiting || m.state == job.StateRetryScheduled
}

func (m *mjob) final() bool { return m.state == job.StatePublished || m.state == job.StateTerminal }

// staleLease is a lease the model knows was lost (cancelled, or expired
// and swept): a late outcome or heartbeat with it must be refused.
type staleLease struct {
	j     *job.Job
	token string
}

// model drives one store through random actions and compares it with an
// in-memory model after each one.
type model struct {
	ctx    context.Context
	st     store.Store
	now    time.Time
	jobs   []*mjob
	byID   map[string]*mjob
	paused map[string]time.Time
	stale  []staleLease
}

// RunModel is the model-based test of the store contract
// (shared/RELIABILITY.md T8): a rapid state machine whose actions are
// insert (with idempotency keys), lease, heartbeat, complete, fail by
// class (transient, permanent, schema), rate limited (with and without a
// server delay), advance the clock, sweep expired leases, cancel, redrive,
// and late outcomes and heartbeats with lost leases. Outcomes become
// transitions through engine.Decide, the engine's one classification, so
// the model never re-implements it. After every action it compares the
// store with the model: each job's state, reason, attempt count and
// per-budget attempts, eligible_at, lease expiry (never missing while
// running), idempotency (one job per tenant and key), the keys' pauses and
// in-flight counts, and Stats (counts and each lane's oldest ready job);
// and no lease ever returns a job that was not eligible or names a paused
// key.
//
// Each check opens a fresh store with open and closes it at its end.
func RunModel(t *testing.T, open Opener) {
	setDefaultChecks()
	var steps, checks atomic.Int64
	names := []string{"insert", "lease", "heartbeat", "complete", "transient", "permanent", "schema", "429",
		"advance", "sweep", "cancel", "redrive", "stale"}
	ran := map[string]*atomic.Int64{}
	for _, name := range names {
		ran[name] = new(atomic.Int64)
	}
	start := time.Now()
	rapid.Check(t, func(rt *rapid.T) {
		checks.Add(1)
		st := open(t)
		defer st.Close()
		m := &model{ctx: context.Background(), st: st, now: T0, byID: map[string]*mjob{}, paused: map[string]time.Time{}}
		// Counted when they ran, not when rapid skipped them.
		n := func(name string, fn func(*rapid.T)) func(*rapid.T) {
			return func(rt *rapid.T) { fn(rt); steps.Add(1); ran[name].Add(1) }
		}
		actions := map[string]func(*rapid.T){
			"insert":    m.insert,
			"lease":     m.lease,
			"heartbeat": m.heartbeat,
			"complete":  func(rt *rapid.T) { m.outcome(rt, job.ClassSuccess) },
			"transient": func(rt *rapid.T) { m.outcome(rt, job.ClassTransient) },
			"permanent": func(rt *rapid.T) { m.outcome(rt, job.ClassPermanent) },
			"schema":    func(rt *rapid.T) { m.outcome(rt, job.ClassInvalidOutput) },
			"429":       func(rt *rapid.T) { m.outcome(rt, job.ClassRateLimited) },
			"advance":   m.advance,
			"sweep":     m.sweep,
			"cancel":    m.cancel,
			"redrive":   m.redrive,
			"stale":     m.staleWrite,
		}
		sm := map[string]func(*rapid.T){"": m.check}
		for name, fn := range actions {
			sm[name] = n(name, fn)
		}
		rt.Repeat(sm)
	})
	var per []string
	for _, name := range names {
		per = append(per, fmt.Sprintf("%s=%d", name, ran[name].Load()))
	}
	t.Logf("model: %d checks, %d actions (%.0f per check) in %v: %s", checks.Load(), steps.Load(),
		float64(steps.Load())/float64(max(checks.Load(), 1)), time.Since(start).Round(time.Millisecond), strings.Join(per, " "))
	// A run of the default size that never reached an action (every try
	// skipped for want of a job in the right state) did not test it: fail
	// rather than pass vacuously. Smaller runs (-rapid.checks) only log.
	if checks.Load() >= ModelChecks {
		for _, name := range names {
			if ran[name].Load() == 0 {
				t.Errorf("model: action %q never ran in %d checks", name, checks.Load())
			}
		}
	}
}

// setDefaultChecks sets -rapid.checks to ModelChecks unless the command
// line or RAPID_CHECKS chose a number.
func setDefaultChecks() {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if _, env := os.LookupEnv("RAPID_CHECKS"); !set && !env {
		_ = flag.Set("rapid.checks", fmt.Sprint(ModelChecks))
	}
}

func (m *model) pick(rt *rapid.T, label string, ok func(*mjob) bool) *mjob {
	var cands []*mjob
	for _, j := range m.jobs {
		if ok(j) {
			cands = append(cands, j)
		}
	}
	if len(cands) == 0 {
		rt.Skip("no job for " + label)
	}
	return rapid.SampledFrom(cands).Draw(rt, label)
}

func (m *model) insert(rt *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(rt, "n")
	batch := make([]*job.Job, n)
	for i := range batch {
		id, _ := uuid.NewV7()
		keys := rapid.SliceOfNDistinct(rapid.SampledFrom(modelKeys), 1, 2, rapid.ID[string]).Draw(rt, "keys")
		sort.Strings(keys)
		j := &job.Job{
			ID: id.String(), Kind: "noop", Region: "us", Tenant: rapid.SampledFrom([]string{"t0", "t1"}).Draw(rt, "tenant"),
			Lane: rapid.SampledFrom([]job.Lane{job.LaneInteractive, job.LaneBatch}).Draw(rt, "lane"), LimitKeys: keys,
			Cost: 1, Budgets: modelBudgets, State: job.StateWaiting, CreatedAt: m.now, Payload: json.RawMessage(`{}`),
			EligibleAt: m.now.Add(time.Duration(rapid.IntRange(0, 3).Draw(rt, "delay_s")) * time.Second),
			// Several priorities in one group: a driver may find a lane's
			// oldest job through an index ordered by priority first.
			Priority: rapid.IntRange(-1, 2).Draw(rt, "priority"),
		}
		if rapid.Bool().Draw(rt, "idempotent") {
			j.IdempotencyKey = rapid.SampledFrom([]string{"i0", "i1", "i2"}).Draw(rt, "idem")
		}
		batch[i] = j
	}
	res, err := m.st.Insert(m.ctx, batch, Unpaced)
	if err != nil {
		rt.Fatalf("insert: %v", err)
	}
	for i, j := range batch {
		var first *mjob
		for _, mj := range m.jobs {
			if j.IdempotencyKey != "" && mj.tenant == j.Tenant && mj.idem == j.IdempotencyKey {
				first = mj
			}
		}
		switch {
		case first != nil && (!res[i].Existing || res[i].Job.ID != first.id):
			rt.Fatalf("insert %d of %d: tenant %s key %s already names job %s; the store answered %s (existing %v)",
				i, n, j.Tenant, j.IdempotencyKey, first.id, res[i].Job.ID, res[i].Existing)
		case first == nil && (res[i].Existing || res[i].Job.ID != j.ID):
			rt.Fatalf("insert %d of %d: new job %s answered as %s (existing %v)", i, n, j.ID, res[i].Job.ID, res[i].Existing)
		case first == nil:
			mj := &mjob{id: j.ID, tenant: j.Tenant, idem: j.IdempotencyKey, lane: j.Lane, keys: j.LimitKeys, state: job.StateWaiting, eligibleAt: j.EligibleAt}
			m.jobs = append(m.jobs, mj)
			m.byID[mj.id] = mj
		}
	}
}

// admissible says whether the model expects the store may lease j now:
// pending, due, and no key paused (keys are unpaced, with no cap).
func (m *model) admissible(j *mjob) bool {
	if !j.pending() || j.eligibleAt.After(m.now) {
		return false
	}
	for _, k := range j.keys {
		if m.paused[k].After(m.now) {
			return false
		}
	}
	return true
}

func (m *model) lease(rt *rapid.T) {
	max := rapid.IntRange(1, 4).Draw(rt, "max")
	want := 0
	for _, j := range m.jobs {
		if m.admissible(j) {
			want++
		}
	}
	got, err := m.st.Lease(m.ctx, store.LeaseParams{Now: m.now, Max: max, LeaseFor: modelLease, InteractiveBudget: time.Minute})
	if err != nil {
		rt.Fatalf("lease: %v", err)
	}
	for _, j := range got {
		mj := m.byID[j.ID]
		switch {
		case mj == nil:
			rt.Fatalf("lease returned unknown job %s", j.ID)
		case !m.admissible(mj):
			rt.Fatalf("lease returned job %s, which is %s, eligible at %v, keys %v paused %v, at %v",
				j.ID, mj.state, mj.eligibleAt, mj.keys, m.paused, m.now)
		case j.LeaseToken == "" || !j.LeaseExpiresAt.Equal(m.now.Add(modelLease)):
			rt.Fatalf("lease of %s: token %q, expiry %v, want %v", j.ID, j.LeaseToken, j.LeaseExpiresAt, m.now.Add(modelLease))
		}
		mj.state, mj.token, mj.leaseExpires, mj.leased = job.StateRunning, j.LeaseToken, j.LeaseExpiresAt, j
		mj.attempt++
	}
	// Keys are unpaced and uncapped: every admissible job up to max is
	// taken, none is left behind by grouping or fairness.
	if len(got) != min(max, want) {
		rt.Fatalf("lease of %d at %v returned %d jobs; %d were admissible", max, m.now, len(got), want)
	}
}

func (m *model) heartbeat(rt *rapid.T) {
	j := m.pick(rt, "job", func(j *mjob) bool { return j.state == job.StateRunning })
	until := m.now.Add(modelLease)
	if err := m.st.Heartbeat(m.ctx, j.id, j.token, until); err != nil {
		rt.Fatalf("heartbeat of running job %s: %v", j.id, err)
	}
	j.leaseExpires = until
}

// outcome ends the attempt of a running job with class, the transition
// computed by engine.Decide.
func (m *model) outcome(rt *rapid.T, class job.Class) {
	j := m.pick(rt, "job", func(j *mjob) bool { return j.state == job.StateRunning })
	o := job.Outcome{Class: class}
	switch class {
	case job.ClassSuccess:
		o.Result = json.RawMessage(`{"ok":true}`)
	case job.ClassRateLimited:
		if s := rapid.IntRange(0, 20).Draw(rt, "retry_after_s"); s > 0 {
			o.RetryAfter, o.RetrySource = time.Duration(s)*time.Second, "retry-after"
		}
	case job.ClassTransient:
		o.Status = 503
	}
	leased := *j.leased
	leased.LeaseToken = j.token
	t := engine.Decide(&leased, o, m.now, false, engine.Backoff{}, rapid.Float64Range(0, 0.999).Draw(rt, "u"))
	m.finish(rt, j, t)
}

func (m *model) finish(rt *rapid.T, j *mjob, t store.Transition) {
	errs, err := m.st.Finish(m.ctx, []store.Transition{t})
	if err != nil || errs[0] != nil {
		rt.Fatalf("finish %s -> %s: %v %v", j.id, t.To, err, errs)
	}
	j.state, j.reason, j.attempts = t.To, t.Reason, t.Attempts
	if t.To == job.StateRetryScheduled || t.To == job.StateWaiting {
		j.eligibleAt = t.EligibleAt
	}
	scope := t.Keys.Scope
	if len(scope) == 0 {
		scope = j.keys
	}
	if !t.Keys.PauseUntil.IsZero() {
		for _, k := range scope {
			if t.Keys.PauseUntil.After(m.paused[k]) {
				m.paused[k] = t.Keys.PauseUntil
			}
		}
	}
	m.loseLease(j)
}

// loseLease forgets j's lease, remembering it as stale.
func (m *model) loseLease(j *mjob) {
	if j.token != "" {
		leased := *j.leased
		m.stale = append(m.stale, staleLease{j: &leased, token: j.token})
	}
	j.token, j.leaseExpires = "", time.Time{}
}

func (m *model) advance(rt *rapid.T) {
	m.now = m.now.Add(time.Duration(rapid.IntRange(1, 15000).Draw(rt, "ms")) * time.Millisecond)
}

// sweep is the reaper: the expired leases, exactly, each finished with a
// lease_expired outcome.
func (m *model) sweep(rt *rapid.T) {
	got, err := m.st.Expired(m.ctx, m.now, 100)
	if err != nil {
		rt.Fatalf("expired: %v", err)
	}
	var want, have []string
	for _, j := range m.jobs {
		if j.state == job.StateRunning && j.leaseExpires.Before(m.now) {
			want = append(want, j.id)
		}
	}
	for _, j := range got {
		have = append(have, j.ID)
	}
	sort.Strings(want)
	sort.Strings(have)
	if !slices.Equal(want, have) {
		rt.Fatalf("expired at %v: store %v, model %v", m.now, have, want)
	}
	for _, j := range got {
		mj := m.byID[j.ID]
		t := engine.Decide(j, job.Outcome{Class: job.ClassLeaseExpired}, m.now, false, engine.Backoff{}, 0.5)
		m.finish(rt, mj, t)
	}
}

func (m *model) cancel(rt *rapid.T) {
	j := m.pick(rt, "job", func(*mjob) bool { return true })
	_, err := m.st.Cancel(m.ctx, j.id, m.now)
	if j.final() {
		if !errors.Is(err, store.ErrConflict) {
			rt.Fatalf("cancel of %s job %s: %v, want ErrConflict", j.state, j.id, err)
		}
		return
	}
	if err != nil {
		rt.Fatalf("cancel of %s job %s: %v", j.state, j.id, err)
	}
	j.state, j.reason = job.StateTerminal, job.ReasonCancelled
	m.loseLease(j)
}

func (m *model) redrive(rt *rapid.T) {
	j := m.pick(rt, "job", func(*mjob) bool { return true })
	_, err := m.st.Redrive(m.ctx, j.id, m.now)
	if j.state != job.StateTerminal {
		if !errors.Is(err, store.ErrConflict) {
			rt.Fatalf("redrive of %s job %s: %v, want ErrConflict", j.state, j.id, err)
		}
		return
	}
	if err != nil {
		rt.Fatalf("redrive of %s: %v", j.id, err)
	}
	// Fresh budgets: the attempts per budget start again.
	j.state, j.reason, j.eligibleAt, j.attempts = job.StateWaiting, "", m.now, job.Attempts{}
}

// staleWrite sends a heartbeat or an outcome with a lease the model knows
// was lost: both are refused and change nothing.
func (m *model) staleWrite(rt *rapid.T) {
	if len(m.stale) == 0 {
		rt.Skip("no lost lease")
	}
	s := rapid.SampledFrom(m.stale).Draw(rt, "lease")
	if rapid.Bool().Draw(rt, "heartbeat") {
		if err := m.st.Heartbeat(m.ctx, s.j.ID, s.token, m.now.Add(modelLease)); !errors.Is(err, store.ErrConflict) {
			rt.Fatalf("heartbeat with the lost lease of %s: %v, want ErrConflict", s.j.ID, err)
		}
		return
	}
	t := engine.Decide(s.j, job.Outcome{Class: job.ClassSuccess}, m.now, false, engine.Backoff{}, 0.5)
	t.LeaseToken = s.token
	errs, err := m.st.Finish(m.ctx, []store.Transition{t})
	if err != nil || !errors.Is(errs[0], store.ErrConflict) {
		rt.Fatalf("late completion with the lost lease of %s: %v %v, want ErrConflict", s.j.ID, err, errs)
	}
}

// check compares the store with the model.
func (m *model) check(rt *rapid.T) {
	inFlight := map[string]int{}
	counts := map[job.Lane]map[string]int64{}
	for _, mj := range m.jobs {
		j, err := m.st.Get(m.ctx, mj.id)
		if err != nil {
			rt.Fatalf("get %s: %v", mj.id, err)
		}
		m.checkJob(rt, mj, j)
		if mj.state == job.StateRunning {
			for _, k := range mj.keys {
				inFlight[k]++
			}
		}
		if counts[mj.lane] == nil {
			counts[mj.lane] = map[string]int64{}
		}
		counts[mj.lane][stateClass(mj.state)]++
	}
	for _, k := range modelKeys {
		st, err := m.st.GetLimit(m.ctx, k)
		if errors.Is(err, store.ErrNotFound) && inFlight[k] == 0 && m.paused[k].IsZero() {
			continue // no job named it yet
		}
		if err != nil {
			rt.Fatalf("get limit %s: %v", k, err)
		}
		if st.InFlight != inFlight[k] {
			rt.Fatalf("key %s: %d in flight, model %d", k, st.InFlight, inFlight[k])
		}
		if !st.PausedUntil.Equal(m.paused[k]) {
			rt.Fatalf("key %s paused until %v, model %v", k, st.PausedUntil, m.paused[k])
		}
	}
	stats, err := m.st.Stats(m.ctx, m.now)
	if err != nil {
		rt.Fatalf("stats: %v", err)
	}
	if oldest, err := m.st.OldestReady(m.ctx, m.now); err != nil || fmt.Sprint(oldest) != fmt.Sprint(stats.OldestReady) {
		rt.Fatalf("OldestReady = %v, %v; Stats says %v", oldest, err, stats.OldestReady)
	}
	if want := m.oldestReady(); fmt.Sprint(stats.OldestReady) != fmt.Sprint(want) {
		rt.Fatalf("oldest ready at %v: store %v, model %v", m.now, stats.OldestReady, want)
	}
	for _, lane := range []job.Lane{job.LaneInteractive, job.LaneBatch} {
		got := map[string]int64{}
		for state, n := range stats.Counts[lane] {
			if n > 0 {
				got[stateClass(state)] += n
			}
		}
		want := counts[lane]
		for _, c := range []string{"pending", string(job.StateRunning), string(job.StatePublished), string(job.StateTerminal)} {
			if got[c] != want[c] {
				rt.Fatalf("stats %s %s: %d, model %d", lane, c, got[c], want[c])
			}
		}
	}
}

// oldestReady is Stats' OldestReady by the model: per lane, the age of
// its oldest pending job eligible at now, whatever its keys' pauses.
func (m *model) oldestReady() map[job.Lane]time.Duration {
	out := map[job.Lane]time.Duration{}
	for _, j := range m.jobs {
		if !j.pending() || j.eligibleAt.After(m.now) {
			continue
		}
		if age, ok := out[j.lane]; !ok || m.now.Sub(j.eligibleAt) > age {
			out[j.lane] = m.now.Sub(j.eligibleAt)
		}
	}
	return out
}

func stateClass(s job.State) string {
	if s == job.StateWaiting || s == job.StateRetryScheduled {
		return "pending"
	}
	return string(s)
}

func (m *model) checkJob(rt *rapid.T, mj *mjob, j *job.Job) {
	switch {
	case stateClass(j.State) != stateClass(mj.state):
		rt.Fatalf("job %s is %s, model %s", mj.id, j.State, mj.state)
	case j.Reason != mj.reason:
		rt.Fatalf("job %s reason %q, model %q", mj.id, j.Reason, mj.reason)
	case j.Attempts != mj.attempts:
		rt.Fatalf("job %s attempts %+v, model %+v", mj.id, j.Attempts, mj.attempts)
	case j.Attempt != mj.attempt:
		rt.Fatalf("job %s attempt %d, model %d", mj.id, j.Attempt, mj.attempt)
	case mj.pending() && !j.EligibleAt.Equal(mj.eligibleAt):
		rt.Fatalf("job %s eligible at %v, model %v", mj.id, j.EligibleAt, mj.eligibleAt)
	case j.State == job.StateRunning && (j.LeaseExpiresAt.IsZero() || !j.LeaseExpiresAt.Equal(mj.leaseExpires)):
		rt.Fatalf("running job %s: lease expires %v, model %v", mj.id, j.LeaseExpiresAt, mj.leaseExpires)
	case j.Attempts.Congestion > modelBudgets.Congestion+1 || j.Attempts.Transient > modelBudgets.Transient+1 ||
		j.Attempts.Schema > modelBudgets.Schema+1:
		rt.Fatalf("job %s attempts %+v exceed budgets %+v", mj.id, j.Attempts, modelBudgets)
	case (j.State == job.StatePublished || j.State == job.StateTerminal) != !j.FinishedAt.IsZero():
		rt.Fatalf("job %s is %s with finished_at %v", mj.id, j.State, j.FinishedAt)
	}
}
