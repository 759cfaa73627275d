package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// predictWait estimates how long j would wait in the queue with the one
// prediction (engine.Jobs.PredictWait over admission.PredictWait): the
// slowest key's backlog and pause and, when nothing leases the job's kind,
// at least the lane's current age. Backlogs come from this server's cache.
// The keys' states come from limits, read once per request (the cost check
// read them already).
func (s *Server) predictWait(ctx context.Context, st store.Store, j *job.Job, limits *limitMemo) (admission.Prediction, error) {
	return s.jobs[j.Region].PredictWait(ctx, engine.PredictParams{
		Kind: j.Kind, Lane: j.Lane, Keys: j.LimitKeys, Cost: j.Cost, Default: s.cfg.DefaultLimit,
		Backlog: func(ctx context.Context, lane job.Lane, key string) (int64, error) {
			return s.backlog.get(ctx, st, lane, key)
		},
		Limit: limits.get,
	})
}

// unserved is the create response's note that nothing handles a job's
// kind, so its predicted wait is only a lower bound.
type unserved struct {
	Detail string `json:"detail" doc:"what is missing and how to start a worker for the kind"`
}

// unservedNote says so when the prediction (engine.Jobs.PredictWait: the
// one that decided the job's admission) saw nothing leasing j's kind and no
// handler of this process runs it; nil otherwise. The detail is the job
// view's (kindServed), so POST and GET /v1/jobs/{id} say the same.
func (s *Server) unservedNote(j *job.Job, pred admission.Prediction) *unserved {
	if !pred.Unserved {
		return nil
	}
	ks := s.kindServed(j, s.cfg.Now())
	if ks.Handled {
		return nil
	}
	return &unserved{Detail: ks.Detail}
}

// limitMemo reads each limit key's state from a store at most once: a
// request checks a job's cost against its keys and predicts its wait from
// the same states, and a batch reads each key once for all its items.
//
// Between requests the reads are shared for limitTTL (limitCache), so a
// busy key is not read from the store on every enqueue.
type limitMemo struct {
	st     store.Store
	def    admission.Config
	seen   map[string]limitRead
	shared *limitCache
}

type limitRead struct {
	state   admission.State
	err     error     // nil or store.ErrNotFound
	fetched time.Time // wall clock, for limitCache
}

func (s *Server) newLimitMemo(st store.Store) *limitMemo {
	return &limitMemo{st: st, def: s.cfg.DefaultLimit, seen: map[string]limitRead{}, shared: s.limits}
}

// limitTTL is how long a limit key's state read for an enqueue is reused
// by later enqueues on this server. Reading the key was a tenth of the
// http-enqueue benchmark's CPU (pprof). What the reuse can miss is bounded
// by the TTL: starts and 429s of other nodes and of this node's in-process
// engine (the state's tokens, in flight and pause), which only move a
// predicted wait. What this server itself changes (PUT /v1/limits, a lease
// or an outcome reported through it) drops the key at once, and the
// job's insert and lease still use the store's own state: the cache
// informs the overload prediction and the cost check, never admission.
const limitTTL = 250 * time.Millisecond

// maxLimitEntries bounds the cache; past it, stale entries are dropped.
const maxLimitEntries = 10000

// limitCache shares limit key reads between requests for limitTTL.
type limitCache struct {
	mu      sync.Mutex
	entries map[limitCacheKey]limitRead
}

type limitCacheKey struct{ region, name string }

func newLimitCache() *limitCache { return &limitCache{entries: map[limitCacheKey]limitRead{}} }

func (c *limitCache) get(region, name string) (limitRead, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.entries[limitCacheKey{region, name}]
	if !ok || time.Since(r.fetched) >= limitTTL {
		return limitRead{}, false
	}
	return r, true
}

func (c *limitCache) put(region, name string, r limitRead) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxLimitEntries {
		for k, e := range c.entries {
			if time.Since(e.fetched) >= limitTTL {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= maxLimitEntries {
			return
		}
	}
	c.entries[limitCacheKey{region, name}] = r
}

// drop forgets keys this server just changed (or let the store change).
func (c *limitCache) drop(region string, names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		delete(c.entries, limitCacheKey{region, n})
	}
}

// dropJobs forgets the keys of jobs leased or finished through this
// server: their tokens, in flight counts or pauses moved.
func (c *limitCache) dropJobs(js ...*job.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, j := range js {
		for _, n := range j.LimitKeys {
			delete(c.entries, limitCacheKey{j.Region, n})
		}
	}
}

// get returns the key's state, or store.ErrNotFound for a key the store
// does not know yet (Insert will create it with the default).
func (m *limitMemo) get(ctx context.Context, name string) (admission.State, error) {
	if r, ok := m.seen[name]; ok {
		return r.state, r.err
	}
	if m.shared != nil {
		if r, ok := m.shared.get(m.st.Region(), name); ok {
			m.seen[name] = r
			return r.state, r.err
		}
	}
	k, err := m.st.GetLimit(ctx, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return k, err // not remembered: a failed read is not an answer
	}
	r := limitRead{state: k, err: err, fetched: time.Now()}
	m.seen[name] = r
	if m.shared != nil {
		m.shared.put(m.st.Region(), name, r)
	}
	return k, err
}

// checkCost is store.CheckCosts for one job over the memo: a cost that one
// of the job's keys can never admit is a 400 naming cost.
func (m *limitMemo) checkCost(ctx context.Context, j *job.Job) error {
	for _, name := range j.LimitKeys {
		k, err := m.get(ctx, name)
		c := k.Config
		switch {
		case errors.Is(err, store.ErrNotFound):
			c = m.def
			c.Name = name
		case err != nil:
			return err
		}
		if err := c.CheckCost(j.Cost); err != nil {
			return &job.ValidationError{Fields: []job.FieldError{{Field: "cost", Detail: err.Error()}}}
		}
	}
	return nil
}

// admitOverload applies the request's on_overload policy when the predicted
// wait exceeds the lane's latency budget: reject answers 429 with
// Retry-After (when the backlog will have drained to the budget), degrade
// marks the job for a cheaper run, queue accepts it anyway.
func (s *Server) admitOverload(j *job.Job, policy string, pred admission.Prediction) error {
	wait := pred.Wait
	budget := s.cfg.BatchBudget
	if j.Lane == job.LaneInteractive {
		budget = s.cfg.InteractiveBudget
	}
	if wait <= budget {
		return nil
	}
	if policy == "" {
		policy = overloadQueue
		if j.Lane == job.LaneInteractive {
			policy = overloadReject
		}
	}
	switch policy {
	case overloadDegrade:
		j.Depth = "degraded"
		return nil
	case overloadQueue:
		return nil
	}
	waitSecs, budgetSecs := wait.Seconds(), budget.Seconds()
	why := "for its limit keys"
	if pred.Unserved {
		why = fmt.Sprintf("at least: no worker has leased kind %q lately and the %s lane's oldest ready job is that old", j.Kind, j.Lane)
	}
	e := problemf(http.StatusTooManyRequests, "overloaded",
		"the job would wait about %.0f s %s, past the %s lane's %.0f s budget; retry after the Retry-After seconds, "+
			"or send on_overload \"degrade\" or \"queue\" to accept it anyway", waitSecs, why, j.Lane, budgetSecs)
	e.p.PredictedWaitSeconds, e.p.BudgetSeconds = &waitSecs, &budgetSecs
	return e.withHeader("Retry-After", retryAfterSeconds(waitSecs-budgetSecs))
}

// backlogTTL is how long a key's backlog read from the store is reused.
// Summing a key's waiting cost is a scan of its backlog, too slow to run
// on every enqueue of a busy key; in between, the cache adds the cost of
// the jobs this server inserted, so one node's own burst is counted at once
// and other nodes' within backlogTTL.
const backlogTTL = time.Second

// maxBacklogEntries bounds the cache; past it, stale entries are dropped.
const maxBacklogEntries = 10000

// backlogCache caches store.Backlog per region, lane and key.
type backlogCache struct {
	mu      sync.Mutex
	entries map[backlogKey]*backlogEntry
}

type backlogKey struct {
	region string
	lane   job.Lane
	key    string
}

type backlogEntry struct {
	cost    int64
	fetched time.Time // wall clock: freshness of a cache, not a scheduling decision
}

func newBacklogCache() *backlogCache {
	return &backlogCache{entries: map[backlogKey]*backlogEntry{}}
}

// get returns the waiting cost on key for a job of the lane, from the
// cache when fresh.
func (c *backlogCache) get(ctx context.Context, st store.Store, lane job.Lane, key string) (int64, error) {
	bk := backlogKey{st.Region(), lane, key}
	c.mu.Lock()
	e := c.entries[bk]
	if e != nil && time.Since(e.fetched) < backlogTTL {
		defer c.mu.Unlock()
		return e.cost, nil
	}
	c.mu.Unlock()
	got, err := st.Backlog(ctx, lane, []string{key})
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxBacklogEntries {
		c.sweep()
	}
	c.entries[bk] = &backlogEntry{cost: got[key], fetched: time.Now()}
	return got[key], nil
}

// added counts a job this server inserted in the cached backlogs it joins:
// an interactive job is ahead of both lanes' new jobs, a batch job only of
// batch ones.
func (c *backlogCache) added(j *job.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, key := range j.LimitKeys {
		for _, lane := range job.Lanes {
			if lane == job.LaneInteractive && j.Lane == job.LaneBatch {
				continue
			}
			if e := c.entries[backlogKey{j.Region, lane, key}]; e != nil {
				e.cost += j.Cost
			}
		}
	}
}

func (c *backlogCache) sweep() {
	for k, e := range c.entries {
		if time.Since(e.fetched) >= backlogTTL {
			delete(c.entries, k)
		}
	}
}
