package bench

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/ratelimit"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
)

// The virtual upstreams run: every mix's destinations answered by
// upstream.Virtual in simulated time, paced by admission.State exactly as
// the store applies outcomes (Take at the lease, RateLimited / Throttled /
// Succeeded at the answer; a fault (but a job's first engine.PacedFaults
// on a key that spaces its starts: store.PacedFault), and a refusal without Retry-After on a
// key that does not pace it (store.PacedRetry), are retried after the
// engine's default backoff), with a lease loop that
// polls every millisecond. It has no store, HTTP or scheduler latency, so
// it measures the pacing strategy alone, deterministically: the real
// benchmark's figures are these plus the machine's noise. With a transit
// (upstream.Virtual.SetTransit) it also has that noise's part that
// matters to a window: each request reaches the upstream a random delay
// after its lease, and its answer reaches the store (End) a random delay
// after the upstream answered, as lease commits, handler starts and the
// finish loop delay them on a loaded machine.

type virtualDest struct {
	d       UpstreamDestination
	st      admission.State
	up      *upstream.Virtual
	pending int         // jobs never started
	retries []time.Time // eligible times of jobs waiting for a retry
	// retryFaults are, per retry, the faults its job met so far (a
	// job's first engine.PacedFaults faults are retried at its key's
	// pace: store.PacedFault).
	retryFaults []int
	accepted    int
	refused     int
	faults      int
	attempts    int
	last        time.Time
	paused      time.Duration
	starts      []time.Time
	// startLag is, per start, how long after its admissible instant
	// (the lease's time, or the instant it was leased ahead for) its
	// request reached the upstream: the lag issue 12's paced starts lose.
	startLag []time.Duration
	arrivals []time.Time // of accepted requests, at the upstream
	faultAt  []time.Time // of requests answered with a fault, at the upstream
	// refusedAt are refused requests' arrivals at the upstream, for
	// per-second timelines (TestVirtualAdapt).
	refusedAt []time.Time
	// refusals are what each refusal did to the key, in the order
	// they were applied (the lag tests read the first ones).
	refusals []virtualRefusal
	// rng (backoffs), lagRng (start lags and finish writes), writer
	// and q are the destination's own: its draws, the finish writes of
	// its answers and the order its events come out in depend on it
	// alone, so that a change to one key moves no other key's starts
	// or refusals (TestVirtualDestinationsIndependent).
	rng, lagRng *rand.Rand
	writer      finishWriter
	q           answerQueue
	// blocked is when the destination's job group may be looked at
	// again after a lease that the key refused at its concurrency cap:
	// the store blocks the group until the time Check gave
	// (store.LeaseTx.TouchGroups), admission.CapRetry later, and a
	// finish that frees a slot of the key unblocks it (store.Finish; see
	// virtualUnblockAtCap). Other refusals are not modelled so: the run
	// looks at the key every millisecond, and their Check times are
	// exact, short of a window full only of starts in flight
	// (admission.FlightRetry) and an outcome that admits sooner.
	blocked time.Time
}

// virtualUnblockAtCap is whether a finish that ends a lease of a key at its
// concurrency cap unblocks the key's group, as store.Finish does since
// session 12. Without it a group refused at its cap waits out
// admission.CapRetry (20 ms) after the slot is free. Tests set it false
// only to measure what the unblocking is worth.
var virtualUnblockAtCap = true

// virtualPacedFault is whether a job's first faults (engine.PacedFaults)
// on a key that spaces its starts are retried at once, as store.PacedFault
// has the store do since session 16 (s16h3; the second too since session
// 18, s18h5). Tests set it false only to measure the
// engine's backoff it replaced.
var virtualPacedFault = true

// virtualAhead is the lease-ahead horizon of the simulated sender (see
// store.LeaseParams.Ahead): a key that admits a start within it is leased
// at once for that instant, and the start begins no earlier. 0 leases only
// what admits now.
var virtualAhead time.Duration

// virtualAheadDeclaredOnly limits virtualAhead to keys that are not
// adaptive (a variant TestVirtualLeaseAhead measures).
var virtualAheadDeclaredOnly bool

// virtualObserve, when set, is called once per simulated millisecond of a
// run, after its leases, with the destinations' state (the decomposition
// of TestVirtualDecompose samples pauses and learned limits through it).
var virtualObserve func(now time.Time, ds []*virtualDest)

// virtualAheadDrop drops a start leased ahead whose key was paused by the
// time it was to arrive: its lease ends unsent and the job waits again
// (a variant TestVirtualLeaseAhead measures; without it such starts go
// out into the pause).
var virtualAheadDrop bool

// virtualLogArrival, set by an oracle test, has every window log each
// start at the upstream's arrival instead of at its answer: a sender that
// knows when the upstream counted it, which no real sender does (see
// TestVirtualCapOneOracle).
var virtualLogArrival bool

// aheadKeeps reports whether a start leased at now for the later instant
// at keeps s's logs in order: never across one of its fixed windows'
// aligned boundaries. A fixed window's log counts only its latest aligned
// windows, so a start counted in the next one lets a check still in the
// current one find it empty: leased ahead across the boundary, the fixed
// mix was refused 8.8 % of its attempts without lag (session 14, s14h6).
func aheadKeeps(s *admission.State, now, at time.Time) bool {
	for _, w := range s.Windows {
		if p := int64(w.Period); w.Fixed && p > 0 && now.UnixNano()/p != at.UnixNano()/p {
			return false
		}
	}
	return true
}

// virtualRefusal is one refusal as the key applied it: when (simulated
// time since the epoch), and its learned rate and cap before and after.
type virtualRefusal struct {
	at                    time.Duration
	status                int
	rateBefore, rateAfter float64
	capBefore, capAfter   int
	inFlight              int // the key's other leases in flight when it was applied
}

// answerEvent is a request of one destination reaching the upstream
// (arrive) or its answer reaching the store.
type answerEvent struct {
	at      time.Time
	arrive  bool
	status  int
	header  http.Header
	started time.Time // when the upstream counted it
	// answered is when the upstream's answer was in at the sender (its
	// handler returned), before the return transit: the engine carries
	// it to the finish, where windows log the start
	// (store.KeyEffect.Answered).
	answered time.Time
	// queued marks an answer that reached the engine at at and waits for
	// the finish writer (see finishWriter) before it is applied.
	queued bool
	// ahead marks the arrival of a start leased ahead (virtualAhead).
	ahead bool
	// faults is how many faults the request's job met before it.
	faults int
}

// answerQueue is one destination's events, earliest first.
type answerQueue = testkit.TimeQueue[answerEvent]

// Due is when the event happens (testkit.Timed).
func (e answerEvent) Due() time.Time { return e.at }

// answer has the upstream answer a request of v arriving at at, and
// queues the answer's return to the store on v's queue: after the route's
// latency (a refusal at once, as the server answers it) and a second
// transit.
func answer(v *virtualDest, at time.Time, queued bool, faults int) {
	status, h, lat := v.up.Answer(at)
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		lat = time.Millisecond
	}
	answered := at.Add(max(lat, time.Millisecond))
	v.q.Push(answerEvent{at: v.up.Arrival(answered), status: status, header: h, started: at, answered: answered, queued: queued, faults: faults})
}

type virtualMix struct {
	ratio, share float64
	dests        []*virtualDest
	ideal        []time.Duration
	// epoch is the run's start (see virtualEpoch).
	epoch time.Time
}

// virtualEpoch is where simulated runs start: 123 ms into a second. An
// upstream that counts in windows aligned to the clock (fixed windows,
// the sliding counter) sees the run's first window cut short by that
// offset, and the ideal (upstream.IdealSchedule) moves with it: the
// counter-20 destination's ideal is 9.89 s at offset 0 and 8.94 s at
// 950 ms (TestVirtualEpochOffsets).
var virtualEpoch = time.Date(2026, 1, 1, 0, 0, 0, 123_000_000, time.UTC)

// runVirtualMix runs m from epoch for at most bound of simulated time,
// every request and answer delayed by transit (see the comment above). A
// limit in limits named "subscriber:"+destination replaces the key that
// webhook.Record.LimitConfig would build for it (a workload that declares
// its key directly, as adapt does).
func runVirtualMix(t testing.TB, m UpstreamsMix, seed uint64, bound time.Duration, transit upstream.Latency, limits ...admission.Config) virtualMix {
	return runVirtualMixLag(t, m, seed, bound, transit, virtualLag{}, limits...)
}

// runVirtualMixLag is runVirtualMix with the sender's own lag (see
// virtualLag) on top of the transit: each request reaches the upstream
// lag.start after its lease (plus the transit), and each answer's outcome
// is applied to its key lag.finish after the answer came back (plus the
// return transit). The zero virtualLag is runVirtualMix, draw for draw.
func runVirtualMixLag(t testing.TB, m UpstreamsMix, seed uint64, bound time.Duration, transit upstream.Latency, lag virtualLag, limits ...admission.Config) virtualMix {
	return runVirtualMixFrom(t, m, seed, bound, transit, lag, virtualEpoch, limits...)
}

// runVirtualMixFrom is runVirtualMixLag starting at epoch instead of
// virtualEpoch.
func runVirtualMixFrom(t testing.TB, m UpstreamsMix, seed uint64, bound time.Duration, transit upstream.Latency, lag virtualLag, epoch time.Time, limits ...admission.Config) virtualMix {
	queued := lag.finish.median > 0
	var ds []*virtualDest
	for i, d := range m.Destinations {
		up, err := upstream.NewVirtual(d.Route, epoch, seed+uint64(i))
		if err == nil {
			err = up.SetTransit(transit)
		}
		if err != nil {
			t.Fatal(err)
		}
		// As webhook.Record.LimitConfig builds it, with the default burst.
		c := admission.UpstreamWindow("subscriber:"+d.Name, float64(d.Declared), time.Second,
			float64(min(d.Declared, max(1, d.Declared))), admission.DefaultHeadroom)
		if d.Adaptive {
			c = admission.AdaptiveUpstreamWindow(c.Name, float64(d.Declared), time.Second, float64(d.Declared), admission.DefaultHeadroom)
		}
		if d.Fixed {
			c = admission.UpstreamFixedWindow("subscriber:"+d.Name, float64(d.Declared), time.Second, float64(d.Declared), admission.DefaultHeadroom)
			if d.Adaptive { // its ceiling, as LimitConfig adds it
				c.Rate, c.Burst = float64(d.Declared), float64(d.Declared)
			}
		}
		c.Adaptive = d.Adaptive
		for _, l := range limits {
			if l.Name == c.Name {
				c = l
			}
		}
		v := &virtualDest{d: d, st: admission.NewState(c), up: up, pending: d.Jobs}
		// Lag draws come from a generator of their own, so that a run
		// with lag keeps every other draw (backoffs, the upstream's) as
		// it was.
		v.rng, v.lagRng = virtualStream(seed, d.Name, 7), virtualStream(seed, d.Name, 11)
		v.writer = finishWriter{write: lag.finish, rng: v.lagRng}
		ds = append(ds, v)
	}
	done := func() bool {
		for _, v := range ds {
			if v.accepted < v.d.Jobs {
				return false
			}
		}
		return true
	}
	now := epoch
	trace := os.Getenv("RATELANE_VIRTUAL_TRACE") != ""
	for ; now.Before(epoch.Add(bound)) && !done(); now = now.Add(time.Millisecond) {
		for _, v := range ds {
			virtualAnswers(t, v, now, epoch, queued, trace)
		}
		if trace && now.Sub(epoch)%(500*time.Millisecond) == 0 {
			var b strings.Builder
			for _, v := range ds {
				fmt.Fprintf(&b, " %s@%.1f/%d", v.d.Name, v.st.LearnedRate, v.accepted)
			}
			t.Logf("%6.3fs%s", now.Sub(epoch).Seconds(), b.String())
		}
		for _, v := range ds {
			for {
				ri := -1
				for k, r := range v.retries {
					if !r.After(now) {
						ri = k
						break
					}
				}
				if ri < 0 && v.pending == 0 {
					break
				}
				if now.Before(v.blocked) {
					break
				}
				at := now
				if ok, next := v.st.Check(now, 1); !ok {
					if c := v.st.InFlightCap(); c > 0 && v.st.InFlight >= c && !now.Before(v.st.PausedUntil) {
						v.blocked = next // refused at its cap: admission.CapRetry
						break
					}
					// Leased ahead (store.LeaseParams.Ahead): admitted
					// at its admissible instant, within the horizon,
					// never across a pause.
					if virtualAhead <= 0 || now.Before(v.st.PausedUntil) || next.Sub(now) > virtualAhead || (virtualAheadDeclaredOnly && v.st.Adaptive) {
						break
					}
					if ok, _ := v.st.Check(next, 1); !ok || !aheadKeeps(&v.st, now, next) {
						break
					}
					at = next
				}
				v.st.Take(at, 1)
				faults := 0
				if ri >= 0 {
					faults = v.retryFaults[ri]
					v.retries = append(v.retries[:ri], v.retries[ri+1:]...)
					v.retryFaults = append(v.retryFaults[:ri], v.retryFaults[ri+1:]...)
				} else {
					v.pending--
				}
				v.attempts++
				v.starts = append(v.starts, at)
				// The lease's lag runs from the lease (now); a start
				// leased ahead begins at its admissible instant at the
				// earliest (engine.run).
				begin := maxTime(at, now.Add(lag.start.draw(v.lagRng)))
				arr := v.up.Arrival(begin)
				v.startLag = append(v.startLag, arr.Sub(at))
				if arr.After(now) {
					v.q.Push(answerEvent{at: arr, arrive: true, ahead: at.After(now), faults: faults})
				} else {
					answer(v, now, queued, faults)
				}
			}
		}
		if virtualObserve != nil {
			virtualObserve(now, ds)
		}
	}
	out := virtualMix{dests: ds, epoch: epoch}
	var ideal, actual time.Duration
	var refused, attempts int
	for _, v := range ds {
		times, err := upstream.IdealSchedule(v.d.Route, v.d.Jobs+v.faults, epoch)
		if err != nil {
			t.Fatal(err)
		}
		di := times[len(times)-1].Sub(epoch)
		out.ideal = append(out.ideal, di)
		ideal = max(ideal, di)
		actual = max(actual, v.last.Sub(epoch))
		if v.accepted < v.d.Jobs {
			actual = max(actual, bound)
		}
		refused, attempts = refused+v.refused, attempts+v.attempts
	}
	out.ratio = actual.Seconds() / ideal.Seconds()
	out.share = float64(refused) / float64(max(1, attempts))
	return out
}

// virtualAnswers applies every event of v due at now, in its queue's
// order: requests reaching the upstream are answered, answers back at the
// engine wait for v's finish writer, and written answers are applied to
// v's key (End, then the outcome's class and its hints), as the store
// applies a finish.
func virtualAnswers(t testing.TB, v *virtualDest, now, epoch time.Time, queued, trace bool) {
	for e, ok := v.q.PopDue(now); ok; e, ok = v.q.PopDue(now) {
		if e.arrive {
			if e.ahead && virtualAheadDrop && e.at.Before(v.st.PausedUntil) {
				// Leased ahead, and its key paused since: the
				// start is not made, its lease ends and the job
				// waits again.
				v.st.End(e.at, 1)
				v.attempts--
				v.retries, v.retryFaults = append(v.retries, e.at), append(v.retryFaults, e.faults)
				continue
			}
			answer(v, e.at, queued, e.faults)
			continue
		}
		if e.queued { // in at the engine: applied when its batch is written
			e.at, e.queued = v.writer.apply(e.at), false
			v.q.Push(e)
			continue
		}
		if c := v.st.InFlightCap(); c > 0 && v.st.InFlight >= c && virtualUnblockAtCap {
			v.blocked = time.Time{}
		}
		if virtualLogArrival {
			v.st.End(e.started, 1)
		} else {
			v.st.End(e.answered, 1)
		}
		info := ratelimit.Parse(e.header, e.at)
		delay, _, hasDelay := info.Delay()
		switch {
		case e.status >= 200 && e.status <= 299:
			v.accepted++
			// A finish batch applies its answers in job order, not
			// in the order the upstream took them: the finish is the
			// latest accepted arrival, and the arrivals stay in time
			// order (upstream.MaxInWindow, startLags read them so).
			v.last = maxTime(v.last, e.started)
			i, _ := slices.BinarySearchFunc(v.arrivals, e.started, time.Time.Compare)
			v.arrivals = slices.Insert(v.arrivals, i, e.started)
			v.st.Succeeded(e.at)
		case e.status == http.StatusTooManyRequests || e.status == http.StatusServiceUnavailable && info.HasRetryAfter:
			v.refused++
			v.refusedAt = append(v.refusedAt, e.started)
			before, rate, capBefore := v.st.PausedUntil, v.st.LearnedRate, v.st.LearnedConcurrency
			inFlight := v.st.InFlight
			throttled := !hasDelay || delay <= 0
			if !throttled {
				v.st.RateLimited(e.at, e.at.Add(delay), 1)
			} else {
				delay = time.Duration((0.5 + v.rng.Float64()) * float64(time.Second))
				v.st.Throttled(e.at, e.at.Add(delay), 1)
			}
			v.refusals = append(v.refusals, virtualRefusal{at: e.at.Sub(epoch), status: e.status,
				rateBefore: rate, rateAfter: v.st.LearnedRate, capBefore: capBefore, capAfter: v.st.LearnedConcurrency, inFlight: inFlight})
			if p := v.st.PausedUntil; p.After(e.at) {
				v.paused += p.Sub(maxTime(before, e.at))
			}
			if trace {
				t.Logf("%s %6.3fs refused %d (%s) learned %.1f -> %.1f cap %d -> %d paused to %.3fs", v.d.Name, e.at.Sub(epoch).Seconds(),
					e.status, e.header.Get("Retry-After"), rate, v.st.LearnedRate, capBefore, v.st.LearnedConcurrency, v.st.PausedUntil.Sub(epoch).Seconds())
			}
			retry := e.at.Add(delay)
			if throttled && v.st.PacesRefusals() {
				// The store drops the backoff of a retry its
				// adaptive key paces (store.PacedRetry); the
				// draw above is kept so that every other draw
				// stays as it was.
				retry = e.at
			}
			v.retries, v.retryFaults = append(v.retries, retry), append(v.retryFaults, e.faults)
		default:
			v.faults++
			v.faultAt = append(v.faultAt, e.started)
			delay = time.Duration((0.5 + v.rng.Float64()) * float64(time.Second))
			retry := e.at.Add(delay)
			if e.faults < engine.PacedFaults && virtualPacedFault && store.PacedFault(map[string]*admission.State{"k": &v.st}, []string{"k"}) {
				// A job's first faults on a key that spaces its
				// starts go back to the key's queue at once
				// (store.PacedFault); the draw is kept.
				retry = e.at
			}
			v.retries, v.retryFaults = append(v.retries, retry), append(v.retryFaults, e.faults+1)
		}
		// Remaining-quota fields of any answer, as the store applies
		// an outcome's hints after its class.
		pausedBefore := v.st.PausedUntil
		for _, h := range ratelimit.Hints(info, "") {
			v.st.Hint(e.at, h)
			if trace && v.st.PausedUntil.After(pausedBefore) {
				t.Logf("%s %6.3fs hint remaining %d reset %v paused to %.3fs", v.d.Name, e.at.Sub(epoch).Seconds(),
					h.Remaining, h.Reset, v.st.PausedUntil.Sub(epoch).Seconds())
			}
		}
	}
}

// virtualStream returns a generator of the destination named name's own,
// for the draws salt names (7: backoffs, 11: lag): keyed by the name, not
// by the destination's place in its mix, so that a destination draws the
// same whatever the other destinations are and however many draws they
// make (a shared generator gave each key the draws the keys before it had
// left, and a change to one key moved every other's).
func virtualStream(seed uint64, name string, salt uint64) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()^salt))
}

// maxInAligned is the most of ts within one window [kW, (k+1)W) aligned
// to the Unix epoch.
func maxInAligned(ts []time.Time, w time.Duration) int {
	per := map[int64]int{}
	most := 0
	for _, t := range ts {
		k := t.UnixNano() / int64(w)
		per[k]++
		most = max(most, per[k])
	}
	return most
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// checkVirtualMix logs r, one run of m, per destination (finish against
// its own ideal, refusals, time paused, learned rate) and fails the test
// when a destination was not delivered in full or saw more starts than
// declared within one second (aligned, for a destination declared fixed):
// invariant 6.
func checkVirtualMix(t *testing.T, m UpstreamsMix, seed uint64, r virtualMix) {
	t.Helper()
	logVirtualMix(t, m, seed, r)
	checkDeclared(t, "", r)
}

// checkDeclared fails the test when a destination of r saw more starts
// than declared within one second (one aligned second for a destination
// declared fixed): invariant 6. label, when not empty, names the run.
func checkDeclared(t *testing.T, label string, r virtualMix) {
	t.Helper()
	for _, v := range r.dests {
		n, within := upstream.MaxInWindow(v.starts, time.Second), "one second"
		if v.d.Fixed {
			n, within = maxInAligned(v.starts, time.Second), "one aligned second"
		}
		if n > v.d.Declared {
			t.Errorf("%s%s: %d starts within %s, declared %d (invariant 6)", label, v.d.Name, n, within, v.d.Declared)
		}
	}
}

// virtualSeeds is how many seeds (1 to n) a logging test runs: 8, or
// RATELANE_VIRTUAL_SEEDS.
func virtualSeeds() uint64 {
	if n, err := strconv.ParseUint(os.Getenv("RATELANE_VIRTUAL_SEEDS"), 10, 64); err == nil && n > 0 {
		return n
	}
	return 8
}

// logVirtualMix logs r, one run of m, per destination (finish against its
// own ideal, refusals, time paused, learned rate) and fails the test when
// a destination was not delivered in full.
func logVirtualMix(t *testing.T, m UpstreamsMix, seed uint64, r virtualMix) {
	t.Helper()
	epoch := r.epoch
	var b strings.Builder
	fmt.Fprintf(&b, "mix %s seed %d: makespan %.3f of ideal, refused %.2f%%\n", m.Name, seed, r.ratio, 100*r.share)
	for i, v := range r.dests {
		fmt.Fprintf(&b, "  %-14s finish %6.2fs ideal %6.2fs (%.3f) accepted %d refused %d faults %d paused %.2fs learned %.1f cap %d\n",
			v.d.Name, v.last.Sub(epoch).Seconds(), r.ideal[i].Seconds(),
			v.last.Sub(epoch).Seconds()/math.Max(1e-9, r.ideal[i].Seconds()),
			v.accepted, v.refused, v.faults, v.paused.Seconds(), v.st.LearnedRate, v.st.LearnedConcurrency)
		if v.accepted < v.d.Jobs {
			t.Errorf("%s: %d of %d delivered", v.d.Name, v.accepted, v.d.Jobs)
		}
	}
	t.Log(b.String())
}

// TestVirtualUpstreams runs every mix in virtual time and holds the
// pacing to the workload's targets there (≤ 1.15× ideal, ≤ 2% refused,
// everything delivered), over three seeds, and checks that no destination saw more
// starts in any second than declared; it prints the per-destination
// breakdown with -v. RATELANE_VIRTUAL_MIX selects mixes (comma-separated),
// RATELANE_VIRTUAL_TRACE=1 prints every refusal and a timeline.
func TestVirtualUpstreams(t *testing.T) {
	eachVirtualMix(t, func(t *testing.T, m UpstreamsMix, seed uint64) {
		r := runVirtualMix(t, m, seed, 60*time.Second, upstream.Latency{})
		checkVirtualMix(t, m, seed, r)
		// The figures this strategy reaches here, deterministic:
		// a regression in discovery shows as a failure, not as
		// noise in a loaded benchmark. Every mix is held to the
		// targets, or under them to what it reaches (unforeseen
		// since session 7: strict counting and concurrency read
		// before any answer; issue since session 8: the hold after
		// a silent drop grows with the old limit's age, 1.121 /
		// 1.133 / 1.127 where it read 1.195 / 1.311 / 1.201).
		bound, shareBound := 1.15, 0.02
		switch m.Name {
		case "rising": // session 11: 1.049 / 1.049 / 1.075 (rise-bucket's one refusal on seed 3); session 14: 1.046 / 1.046 / 1.075, set by rise-bucket
			bound = 1.08
		case "sliding": // session 9: 1.074-1.075, from 1.093-1.094 (the spreading bucket's tail)
			bound = 1.08
		case "unforeseen":
			bound = unforeseenBound
		}
		if r.ratio > bound || r.share > shareBound {
			t.Errorf("mix %s seed %d: makespan %.3f of ideal (want <= %.2f), refused %.2f%% (want <= %.1f%%)", m.Name, seed, r.ratio, bound, 100*r.share, 100*shareBound)
		}
		for i, v := range r.dests {
			// Session 18: an adaptive key's remaining-quota floor
			// counts its starts in flight (admission's Hint), so
			// rise-bucket's sixth start no longer follows a stale
			// remaining into its upstream's emptied burst of 5 (seed 3
			// was refused at 62 ms before).
			if m.Name == "rising" && v.refused > 0 {
				t.Errorf("%s seed %d: %d refusals, want none", v.d.Name, seed, v.refused)
			}
			// Session 14: an announced remaining is spent at once
			// (admission's credit), so rise-sliding takes each window's
			// 30 as its upstream does: 1.045-1.053 of its own ideal,
			// from 1.151 at an even 29.1/s.
			if v.d.Name == "rise-sliding" {
				if f := v.last.Sub(r.epoch).Seconds() / r.ideal[i].Seconds(); f > 1.07 {
					t.Errorf("%s seed %d: finished at %.3f of its ideal, want <= 1.07", v.d.Name, seed, f)
				}
			}
		}
	})
}

// unforeseenBound is what the unforeseen mix reaches without transit at
// every start offset (session 11: 1.108-1.116, TestVirtualEpochOffsets):
// counter-20's one refusal when its window reopens with a burst (a whole
// second of Retry-After, then strict pacing at 19/s) or, from 500 ms into
// a second on, concurrent-1's even 19.4/s against an ideal that sends each
// window's 20 one after another. Under the 1.15 target, not at the 1.08
// session 11 was asked for (see docs/benchmarks.md).
const unforeseenBound = 1.12

// eachVirtualMix runs fn for every upstreams mix (those RATELANE_VIRTUAL_MIX
// names, comma-separated, when it is set), each in its own subtest, over
// seeds 1 to 3.
func eachVirtualMix(t *testing.T, fn func(t *testing.T, m UpstreamsMix, seed uint64)) {
	for _, m := range selectedVirtualMixes() {
		t.Run(m.Name, func(t *testing.T) {
			for seed := uint64(1); seed <= 3; seed++ {
				fn(t, m, seed)
			}
		})
	}
}

// virtualMixSelected reports whether RATELANE_VIRTUAL_MIX (mix names,
// comma-separated) selects the mix named name; unset, it selects every mix.
func virtualMixSelected(name string) bool {
	want := os.Getenv("RATELANE_VIRTUAL_MIX")
	return want == "" || strings.Contains(","+want+",", ","+name+",")
}

// selectedVirtualMixes is the upstreams mixes virtualMixSelected selects,
// in the workload's order.
func selectedVirtualMixes() []UpstreamsMix {
	var ms []UpstreamsMix
	for _, m := range Upstreams(false).Mixes {
		if virtualMixSelected(m.Name) {
			ms = append(ms, m)
		}
	}
	return ms
}

// runVirtualSeeds runs the one mix m over seeds 1 to 3 with no transit and
// holds each run to checkVirtualMix, skipping the test when
// RATELANE_VIRTUAL_MIX does not select selector.
func runVirtualSeeds(t *testing.T, selector string, m UpstreamsMix) {
	if !virtualMixSelected(selector) {
		t.Skip("not selected by RATELANE_VIRTUAL_MIX")
	}
	for seed := uint64(1); seed <= 3; seed++ {
		r := runVirtualMix(t, m, seed, 60*time.Second, upstream.Latency{})
		checkVirtualMix(t, m, seed, r)
	}
}

// loadedTransit is the delay between a lease and its request's arrival
// (and between an answer and its finish) on a loaded machine: session 6
// measured a start lag of 36-64 ms at the median under load 21-41 on
// 2 cores, varying by tens of ms from start to start.
var loadedTransit = upstream.Latency{Fixed: 5 * time.Millisecond, Jitter: 100 * time.Millisecond}

// TestVirtualTransit is the real clock's loss made deterministic: every
// mix in virtual time with loadedTransit between each lease and its
// arrival. A destination declared exactly as it counts (every one that is
// not adaptive) must never be refused, whatever the transit: each refusal
// costs its key a Retry-After pause (a whole second for most styles),
// which is how the real clock lost 10-25% on mixes that virtual time
// paced at 1.00-1.06. It checks invariant 6 where it matters, from the
// upstream's log of arrivals, not only at the sender; and it holds the
// makespans of transitBounds' mixes to what they reach.
// RATELANE_VIRTUAL_MIX selects mixes as in TestVirtualUpstreams.
func TestVirtualTransit(t *testing.T) {
	eachVirtualMix(t, func(t *testing.T, m UpstreamsMix, seed uint64) {
		r := runVirtualMix(t, m, seed, 60*time.Second, loadedTransit)
		t.Logf("mix %s seed %d, transit %v+[0,%v): makespan %.3f of ideal, refused %.2f%%",
			m.Name, seed, loadedTransit.Fixed, loadedTransit.Jitter, r.ratio, 100*r.share)
		logVirtualMix(t, m, seed, r)
		for _, v := range r.dests {
			if !declaredExactly(v.d) {
				continue // its limit is learned from refusals, or counted otherwise
			}
			if v.refused > 0 {
				t.Errorf("%s (declared %d, exactly as it counts): %d refusals under transit jitter", v.d.Name, v.d.Declared, v.refused)
			}
			count, how := upstream.MaxInWindow(v.arrivals, time.Second), "one second"
			if v.d.Fixed {
				count, how = maxInAligned(v.arrivals, time.Second), "one aligned second"
			}
			if count > v.d.Declared {
				t.Errorf("%s: %d accepted arrivals within %s, declared %d (invariant 6 at the upstream)", v.d.Name, count, how, v.d.Declared)
			}
		}
		if bound, ok := transitBounds[m.Name]; ok && r.ratio > bound {
			t.Errorf("mix %s seed %d: makespan %.3f of ideal under transit, want <= %.2f", m.Name, seed, r.ratio, bound)
		}
	})
}

// transitBounds are the makespans (of ideal) that the mixes whose keys are
// all declared exactly reach under loadedTransit, and rising, whose
// adaptive keys learn their limits from announced policies more than from
// refusals (session 8: 1.14-1.15, from 1.18-1.48 before a zero remaining
// stopped pausing a key whose window enforces the policy): a regression
// shows here as a failure rather than as noise in a loaded benchmark.
// sliding since session 9: 1.149-1.160, from 1.169-1.180, its keys'
// bucket spreading each window at 1.5 times its rate
// (admission.WindowSpread).
// rising since session 11: 1.123-1.131.
var transitBounds = map[string]float64{"sliding": 1.17, "fixed": 1.02, "many": 1.15, "rising": 1.14}

// declaredExactly reports a destination whose key is declared as its
// upstream counts: a sliding window, or a fixed one declared fixed, at its
// true limit, not adaptive.
func declaredExactly(d UpstreamDestination) bool {
	switch {
	case d.Adaptive || len(d.Route.Changes) > 0 || d.Route.MaxConcurrent > 0:
		return false
	case d.Route.Algorithm == upstream.AlgorithmSlidingWindow:
		return !d.Fixed && d.Route.Limit == d.Declared && d.Route.Window == time.Second
	case d.Route.Algorithm == upstream.AlgorithmFixedWindow:
		return d.Fixed && d.Route.Limit == d.Declared && d.Route.Window == time.Second
	}
	return false
}

// issueVariant is the issue mix with halving-503's silent drop at frac of
// the run instead of 0.4 (its jobs scaled to match), a check that the
// strategy's figures on the issue mix are not a fit to the one drop time
// the matrix has.
func issueVariant(frac float64) UpstreamsMix {
	var m UpstreamsMix
	for _, x := range Upstreams(false).Mixes {
		if x.Name == "issue" {
			m = x
		}
	}
	m.Destinations = append([]UpstreamDestination(nil), m.Destinations...)
	for i, d := range m.Destinations {
		if d.Name != "halving-503" {
			continue
		}
		d.Route.Changes = []upstream.LimitChange{{After: time.Duration(frac * 10 * float64(time.Second)), Limit: 15}}
		d.Jobs = int(math.Round(10 * (frac*30 + (1-frac)*15)))
		m.Destinations[i] = d
	}
	m.Name = fmt.Sprintf("issue-drop%02.0f", 100*frac)
	return m
}

// TestVirtualIssueVariants runs the issue mix on seeds 4 and 5, which no
// bound was set from, and with halving-503's drop at 30% and 60% of the
// run on seeds 1 to 5, and holds each to delivery in full, invariant 6
// and issueVariantBound. Its figures are in docs/benchmarks.md (session 8,
// s8h1).
func TestVirtualIssueVariants(t *testing.T) {
	if !virtualMixSelected("issue") {
		t.Skip("not selected by RATELANE_VIRTUAL_MIX")
	}
	for _, frac := range []float64{0.3, 0.4, 0.6} {
		m := issueVariant(frac)
		t.Run(m.Name, func(t *testing.T) {
			for seed := uint64(1); seed <= 5; seed++ {
				if frac == 0.4 && seed <= 3 {
					continue // TestVirtualUpstreams runs these
				}
				r := runVirtualMix(t, m, seed, 60*time.Second, upstream.Latency{})
				checkVirtualMix(t, m, seed, r)
				bound, ok := issueVariantBounds[m.Name]
				if !ok {
					bound = 1.15
				}
				if r.ratio > bound || r.share > 0.02 {
					t.Errorf("mix %s seed %d: makespan %.3f of ideal (want <= %.2f), refused %.2f%% (want <= 2%%)",
						m.Name, seed, r.ratio, bound, 100*r.share)
				}
			}
		})
	}
}

// issueVariantBounds are the makespans (of ideal) the variants that miss
// the 1.15 target reach: with the drop at 30% the old limit held only
// 3.4 s, so the hold after the drop (SilentHoldPerRun of that) ends
// before the run does, and the probe's refusal costs a whole-second
// pause (1.16-1.23, against 1.17-1.30 before session 8).
var issueVariantBounds = map[string]float64{"issue-drop30": 1.23}
