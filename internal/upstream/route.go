package upstream

import (
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/webhook/signature"
)

// Response is a canned answer queued with [Server.Script]: exactly Status,
// Header and Body are sent (the server adds only Content-Length; it
// suppresses Date and Content-Type sniffing).
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// endpoint is the kind of endpoint a request came to; it picks wire formats.
type endpoint int

const (
	endpointHook endpoint = iota
	endpointOpenAI
	endpointAnthropic
)

// step is the step of the answer pipeline that answered a request.
type step int

const (
	stepScripted step = iota
	stepOverride
	stepOverLimit
	stepBadSignature
	stepInvalid
	stepQuota
	stepTransient
	stepAccept
)

// incoming is what decide needs to know about a request.
type incoming struct {
	endpoint endpoint
	header   http.Header
	body     []byte
	invalid  bool // the LLM request failed validation
}

// verdict is decide's answer: which step answered, with what status, and
// the state needed to write the answer outside the route's lock.
type verdict struct {
	step   step
	status int
	dec    decision
	cfg    RouteConfig
	delay  time.Duration
	script Response
	// held says the request holds one of the route's concurrency slots
	// until its answer is written (see route.release).
	held bool
}

// route is one route name's limiter, counters and script queue. Its mutex
// makes each request's decision and accounting one atomic step.
type route struct {
	mu        sync.Mutex
	cfg       RouteConfig
	keys      [][]byte
	lim       limiter
	stats     *routeStats
	script    []Response
	quotaUsed int64
	// epoch is when the schedule of cfg.Changes started; applied counts
	// the changes already in effect.
	epoch   time.Time
	applied int
	// arrivals are the decision times of accepted requests, when the
	// server records them (Config.RecordArrivals), at most maxArrivals.
	arrivals    []time.Time
	maxArrivals int
	// busy counts requests holding a concurrency slot.
	busy int
}

func newRoute(rc RouteConfig, keys [][]byte, now time.Time, maxIDs, seconds int) *route {
	return &route{cfg: rc, keys: keys, lim: newLimiter(rc, nil, now), stats: newRouteStats(maxIDs, seconds), epoch: now}
}

// startSchedule restarts the schedule of limit changes at epoch.
func (rt *route) startSchedule(epoch time.Time) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.epoch, rt.applied = epoch, 0
}

// due applies every scheduled limit change whose time has come.
func (rt *route) due(now time.Time) {
	for rt.applied < len(rt.cfg.Changes) {
		c := rt.cfg.Changes[rt.applied]
		if now.Before(rt.epoch.Add(c.After)) {
			return
		}
		rt.applied++
		changes, applied := rt.cfg.Changes, rt.applied
		rt.cfg = rt.cfg.apply(c)
		rt.lim = newLimiter(rt.cfg, rt.lim, now)
		rt.cfg.Changes, rt.applied = changes, applied
	}
}

// reconfigure replaces the configuration, keeping limiter state where the
// algorithm is unchanged.
func (rt *route) reconfigure(rc RouteConfig, keys [][]byte, now time.Time) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.setConfig(rc, keys, now)
}

// update applies fn to a copy of the configuration and installs the result
// if it is valid, all under the lock so concurrent updates compose.
func (rt *route) update(fn func(*RouteConfig), now time.Time) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rc := rt.cfg
	fn(&rc)
	rc = rc.WithDefaults()
	if err := rc.validate(); err != nil {
		return err
	}
	keys, _ := decodeSecrets(rc.Secrets) // validated above
	rt.setConfig(rc, keys, now)
	return nil
}

// setConfig installs rc. Its schedule of limit changes runs from the
// route's epoch: changes already due apply at the next request.
func (rt *route) setConfig(rc RouteConfig, keys [][]byte, now time.Time) {
	rt.cfg, rt.keys, rt.applied = rc, keys, 0
	rt.lim = newLimiter(rc, rt.lim, now)
}

// decide runs the answer pipeline for one request and records the answer.
func (rt *route) decide(s *Server, now time.Time, in incoming) verdict {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.stats.r.Attempts++
	v := rt.pipeline(s, now, in)
	v.cfg = rt.cfg
	rt.account(now, in, v)
	return v
}

func (rt *route) pipeline(s *Server, now time.Time, in incoming) verdict {
	if len(rt.script) > 0 {
		r := rt.script[0]
		rt.script[0] = Response{}
		rt.script = rt.script[1:]
		return verdict{step: stepScripted, status: r.Status, script: r}
	}
	if rt.cfg.StatusOverride != 0 {
		return verdict{step: stepOverride, status: rt.cfg.StatusOverride, delay: rt.latency(s.rand)}
	}
	rt.due(now)
	if c := rt.cfg.MaxConcurrent; c > 0 && rt.busy >= c {
		// Over the concurrency cap: refused before the rate limiter,
		// which does not count it.
		dec := decision{limited: true, limit: c, retryAfter: max(rt.cfg.Latency.Fixed, time.Millisecond), window: rt.cfg.Latency.Fixed}
		return verdict{step: stepOverLimit, status: overLimitStatus(rt.cfg.OverLimit, in.endpoint == endpointAnthropic), dec: dec}
	}
	dec := rt.lim.take(now)
	if !dec.allowed {
		return verdict{step: stepOverLimit, status: overLimitStatus(rt.cfg.OverLimit, in.endpoint == endpointAnthropic), dec: dec}
	}
	v := verdict{dec: dec, delay: rt.latency(s.rand)}
	if rt.cfg.MaxConcurrent > 0 {
		rt.busy++
		v.held = true
	}
	v.step, v.status = rt.check(s, now, in)
	return v
}

// check runs the steps after the limiter admitted a request.
func (rt *route) check(s *Server, now time.Time, in incoming) (step, int) {
	switch {
	case in.endpoint == endpointHook && len(rt.keys) > 0 &&
		signature.Verify(rt.keys, in.header, in.body, now, s.cfg.SignatureTolerance) != nil:
		return stepBadSignature, http.StatusUnauthorized
	case in.invalid:
		return stepInvalid, http.StatusBadRequest
	case in.endpoint != endpointHook && rt.cfg.Quota > 0 && rt.quotaUsed >= rt.cfg.Quota:
		if in.endpoint == endpointAnthropic {
			return stepQuota, http.StatusBadRequest
		}
		return stepQuota, http.StatusTooManyRequests
	case rt.cfg.TransientRate > 0 && s.rand.Float64() < rt.cfg.TransientRate:
		sts := transientStatuses
		if len(rt.cfg.TransientStatuses) > 0 {
			sts = rt.cfg.TransientStatuses
		}
		return stepTransient, sts[s.rand.IntN(len(sts))]
	}
	if in.endpoint != endpointHook {
		rt.quotaUsed++
	}
	return stepAccept, http.StatusOK
}

var transientStatuses = []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout}

// release frees the concurrency slot of an answered request.
func (rt *route) release() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.busy = max(0, rt.busy-1)
}

// latency draws this answer's delay.
func (rt *route) latency(r *lockedRand) time.Duration {
	d := rt.cfg.Latency.Fixed
	if j := rt.cfg.Latency.Jitter; j > 0 {
		d += time.Duration(r.Int64N(int64(j)))
	}
	return d
}

// account records v in the route's counters.
func (rt *route) account(now time.Time, in incoming, v verdict) {
	st := rt.stats
	switch v.step {
	case stepScripted:
		st.r.Scripted++
	case stepOverride:
		st.r.Overridden++
	case stepOverLimit:
		st.rateLimited(now)
	case stepBadSignature:
		st.r.BadSignatures++
	case stepInvalid:
		st.r.Invalid++
	case stepQuota:
		st.r.QuotaExhausted++
	case stepTransient:
		st.r.Transient++
	}
	id := ""
	if in.endpoint == endpointHook {
		id = in.header.Get(signature.HeaderID)
	}
	st.answered(now, v.status, id)
	if v.status >= 200 && v.status <= 299 && len(rt.arrivals) < rt.maxArrivals {
		rt.arrivals = append(rt.arrivals, now)
	}
}

// enqueue appends scripted responses.
func (rt *route) enqueue(rs []Response) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.script = append(rt.script, rs...)
}

// snapshot copies the route's counters.
func (rt *route) snapshot(now time.Time) RouteReport {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.stats.snapshot(now, rt.cfg)
}

// lockedRand is a seeded generator safe for concurrent use, so that runs
// are reproducible when requests are sent one at a time.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand(seed uint64) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Float64 returns a number in [0, 1).
func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

// IntN returns a number in [0, n).
func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

// Int64N returns a number in [0, n).
func (l *lockedRand) Int64N(n int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Int64N(n)
}

// arrivalTimes copies the recorded arrival times of accepted requests.
func (rt *route) arrivalTimes() []time.Time {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.arrivals)
}
