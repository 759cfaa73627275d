package admission

import "time"

// Concurrency discovery. Some upstreams limit how many requests they
// process at once as well as, or instead of, how many start per second,
// and answer 429 (often with no Retry-After) when one more arrives. To a
// key paced by rate such a refusal looks like a rate limit, and cutting
// the rate for it is wrong twice: the rate was not the problem, and a
// slower key still overlaps its requests whenever latencies do, so the
// refusals go on and the rate collapses.
//
// An adaptive key tells the two apart by what was in flight. A refusal
// that came while the key had other leases in flight, and while its
// trailing rate was at or under its learned rate (so that the rate cannot
// explain it: the key sent no more than it had been sending), is read as
// a concurrency limit: the key learns an in-flight cap one under what was
// in flight (at least 1), keeps its rate, and does not pause. A refusal
// that came while the key had nothing else in flight cannot be a
// concurrency limit (the sender's leases outlast the upstream's requests,
// so the upstream had at most this one): it is read as a rate limit, as
// before (see refused). So is one that came while more was in flight than
// a cap already learned allows: those leases were in flight when the cap
// was learned, and are the same signal.
//
// A key's very first refusal (never refused before, at its ceiling) goes
// to rate discovery whatever was in flight: a ceiling that does not hold
// is the commoner cause, and reading it as concurrency kept a key told
// 40/s behind a 20/s bucket sending at 40 for another signal (the issue
// mix's half-none, in TestVirtualUpstreams). The exception is a first
// refusal that came before any answer did (see noneAnswered): it measured
// nothing of the rate, and reads as concurrency. A rate limit misread as
// concurrency later (a limit that dropped silently while requests
// overlapped looks the same) costs one signal: the next refusal comes
// within the learned cap, which did not prevent it, and is read as the
// rate's. Only a refusal within a cap that a probe raised lowers the cap
// again (the probe went too far). The price is that a first reading above
// the upstream's real cap (more was in flight than it allows, by more
// than one) is corrected by the rate, not the cap: against one request at
// a time the deterministic model (TestConcurrencyDiscoveryOneInFlight)
// can end with a cap of 3 and its rate cut, instead of a cap of 1.
//
// The cap is probed upward like the rate, boundedly: after it has held
// for CapHold (MaxCapHold after a probe the upstream refused, see
// refuseCapProbe; doubled, up to MaxCapHold, after an unconfirmed cap
// was lowered), and
// only if it was binding (since the last change the key reached it at a
// moment its rate and windows would have admitted another start, at two
// starts in a row: a cap that holds nothing back teaches nothing by being
// raised, see noteCap),
// it rises by a quarter (at least one). A cap at or above the configured Concurrency is
// dropped: the configured cap governs.
const (
	// CapHold is how long a learned in-flight cap holds before the key
	// probes above it.
	CapHold = 2 * time.Second
	// MaxCapHold is the hold after a probe of the cap that the upstream
	// refused, and bounds the hold after a cap read from a first refusal
	// was lowered.
	MaxCapHold = 16 * time.Second
	// RateSlack is how far over its learned rate's worth of starts in the
	// trailing discovery window a key may be for a refusal to be read as
	// a concurrency limit: the learned window admits at most that, and a
	// cost estimate or a rate cut since may leave it slightly over.
	RateSlack = 0.05
)

// Bits of State.capFlags.
const (
	capHit     = 1 << iota // the learned cap bound since it last changed (see noteCap)
	capProbing             // the last change raised the cap
	capBound               // the cap bound at the key's last start
	capRaised              // the last change was a probe's (probeCap), not a refusal's
	capFull                // since the probe, the key started with the raised cap full
)

// raisedCut is a bit of State.capFlags that belongs to the rate, not the
// cap: the last refusal signal was a failed rate probe whose cut stayed
// above the level the probe had started from (see refused). It sits in
// the cap's word, far above the cap's bits, so that it travels through
// the store without a new slot of MarshalShapes (decodeLogs bounds their
// number) and a binary that does not know it masks it away.
const raisedCut = 1 << 32

// InFlightCap is the in-flight cap in force: the smaller of the
// configured Concurrency and the learned cap (LearnedConcurrency), 0 for
// none.
func (s *State) InFlightCap() int {
	c := s.Concurrency
	if l := s.LearnedConcurrency; l > 0 && (c == 0 || l < c) {
		c = l
	}
	return c
}

// concurrencyRefusal reads one refusal of cost units at now as an
// upstream concurrency limit when it can be one (see the comment above)
// and then learns the cap from it; it reports whether it did, in which
// case the refusal teaches the rate nothing. It runs after the refused
// lease was released (see store.ApplyKeyEffect), so s.InFlight counts the
// key's other leases.
func (s *State) concurrencyRefusal(now time.Time, cost int64) bool {
	d, starts, refusals, ok := s.refusalLogs()
	if !ok {
		return false
	}
	t, dn := now.UnixNano(), int64(d)
	n := s.InFlight + 1 // in flight when it was refused, itself included
	learned := s.LearnedConcurrency
	if s.atProbedCap() {
		// Refused after a probe raised the cap and the key filled it:
		// the probe's, whatever is still in flight (see atProbedCap).
		// If the rate was probing above its level as well, either probe
		// may have gone too far: both are undone (the rate by refused,
		// which logs the refusal).
		s.refuseCapProbe(t, learned)
		if s.level > 0 && s.rate() > s.level {
			return false
		}
		refusals.add(t, cost, t-dn, dn/LogSlots)
		return true
	}
	if learned > 0 && s.capFlags&capRaised == 0 && t >= s.capAt && t-s.capAt < int64(CutHoldoff) {
		// The echo of the refusal that taught or lowered the cap: a
		// request that overlapped the same one at the upstream, whether
		// or not the others have answered by now. A cap read from a
		// first refusal before any answer counts its burst down.
		s.burstRefusal()
		refusals.add(t, cost, t-dn, dn/LogSlots)
		return true
	}
	if s.InFlight < 1 {
		return false
	}
	// A key's first refusal (at its ceiling, never refused before) may be
	// the rate's whatever was in flight: it goes to rate discovery, unless
	// no answer had come back yet (see noneAnswered). After it, a refusal
	// while the key sent no more than its learned rate is one the rate
	// cannot explain, unless the key was probing its rate above the level
	// its last cut set: then the probe is the likelier cause (an upstream
	// bucket with a small burst refuses a probe before the trailing window
	// shows it), and a cap learned from it would hold the key back until
	// probed away.
	unconfirmed := false
	switch {
	case s.LastRefusal.IsZero() && s.capAt == 0: // never refused before
		if !s.noneAnswered(t, dn, cost) {
			return false
		}
		unconfirmed = true
	case s.level > 0 && s.rate() > s.level:
		return false
	case !s.LastRefusal.IsZero() && now.Sub(s.LastRefusal) < CutHoldoff && !now.Before(s.LastRefusal):
		// The echo of the rate's last signal (see refused): a request
		// already in flight when the rate was cut, which the cut rate
		// cannot explain only because it came after it. Read as a cap,
		// it taught a cap of one to a key with a burst of refusals
		// (rising's rise-bucket under transit, probed back for seconds).
		return false
	case s.afterRaisedCut(now):
		return false
	case float64(starts.since(t-dn)) > s.rate()*d.Seconds()*(1+RateSlack)+1:
		return false
	}
	if learned > 0 && n > learned {
		// In flight before the cap was learned: the same signal.
		refusals.add(t, cost, t-dn, dn/LogSlots)
		return true
	}
	if learned > 0 {
		// Refused within the cap. One read from a first refusal that
		// measured nothing else is lowered, as a probe that went too
		// far would be (once; then refusals within it are the rate's).
		// A cap still at what the refusals taught did not prevent it:
		// the rate's.
		if s.capFlags&capProbing == 0 {
			return false
		}
		refusals.add(t, cost, t-dn, dn/LogSlots)
		s.lowerCap(t, n)
		return true
	}
	refusals.add(t, cost, t-dn, dn/LogSlots)
	s.LearnedConcurrency = max(1, n-1)
	s.capAt, s.capHold, s.capFlags = t, int64(CapHold), s.capFlags&raisedCut
	if unconfirmed {
		// Read from a refusal that measured nothing else: as far as a
		// refusal within it goes, it is a probe that went too far, and
		// lowers it (once; then refusals within it are the rate's).
		s.capFlags |= capProbing
	}
	return true
}

// lowerCap lowers a learned cap that a refusal at t (Unix ns) with n in
// flight showed too high (a probe's, or one read from a refusal that
// measured nothing else) to under n, at most one under the level it was,
// and doubles the hold before the next probe, up to MaxCapHold.
func (s *State) lowerCap(t int64, n int) {
	hold := min(MaxCapHold, max(CapHold, 2*time.Duration(s.capHold)))
	n = min(n, s.LearnedConcurrency)
	s.LearnedConcurrency = max(1, n-1)
	s.capAt, s.capHold, s.capFlags = t, int64(hold), s.capFlags&raisedCut
}

// refuseCapProbe lowers a cap that a probe raised and the upstream
// refused at t (Unix ns), with learned the cap the probe set, back under
// it, and holds it for MaxCapHold at once rather than doubling the hold
// from CapHold. The refusal is the probe's (see atProbedCap), so the
// upstream's limit is known to be below the probed level; a concurrency
// limit is the size of a worker pool or a connection limit, which
// changes with a deployment, not from one second to the next the way a
// quota's remaining allowance does. Doubling from CapHold spent three
// refusals on the same level in the first 20 s (unforeseen's
// concurrent-1 under transit: probes refused at about 4.5, 8.8 and 17
// s on seeds 1 and 3), each one a rejected attempt and a job sent back
// for its backoff.
func (s *State) refuseCapProbe(t int64, learned int) {
	s.lowerCap(t, learned)
	s.capHold = int64(MaxCapHold)
}

// burstRefusal lowers by one a cap still unconfirmed (read from a first
// refusal that came before any answer, see noneAnswered) at a refusal
// within CutHoldoff of that first one, and leaves it unconfirmed. The
// first refusal met n requests in flight at the upstream, which kept as
// many as it allows and refused the rest: each further refusal of that
// burst is one more the upstream did not keep, so the cap is n less the
// burst's refusals, at least 1. Absorbed as echoes instead, the cap
// stayed at n − 1 for CutHoldoff while the key kept that many in flight
// (each overlap another refusal), then fell one refusal at a time, the
// second one confirming it and sending the next refusal to the rate: on
// the real clock, where the engine leases several starts before the
// first answer is back, concurrent-1 met most of its refusals there.
func (s *State) burstRefusal() {
	if s.capFlags&(capProbing|capRaised) == capProbing && s.LearnedConcurrency > 1 {
		s.LearnedConcurrency--
	}
}

// atProbedCap reports whether the learned cap was raised by a probe (see
// probeCap) and the key has since had it full at a start (see noteCap).
// A refusal then is the probe's: every start below the probe's level went
// clean for the hold before it, and only the probe let that many start at
// once. It is read so whatever is in flight when the refusal comes back:
// with transit between the sender and the upstream, the request it
// overlapped there may have answered first, and the refusal, read as the
// rate's, was taken for noise or halved the rate, while the cap fell only
// at the next refusal (the unforeseen mix's concurrent-1, two refusals
// per cap probe on the real clock and under transit). When the rate was
// probing above its level too, the refusal may be either probe's, and
// both are undone: taken for the cap's alone, a rate limit misread as a
// cap earlier (the issue mix's half-none under transit, probed back to
// its ceiling) cost three more refusals before its rate was cut.
func (s *State) atProbedCap() bool {
	return s.LearnedConcurrency > 1 && s.capFlags&(capRaised|capFull) == capRaised|capFull
}

// noneAnswered reports, for a refusal of cost units at t (Unix ns) on a
// key with others in flight, whether every other start of the trailing
// discovery window (of dn ns) that the upstream did not refuse is still in
// flight: no answer has come back to say what the upstream accepts. Such
// a refusal, the key's first, measured nothing of its rate (halving it,
// as a first refusal otherwise does, is a guess); what it does show is an
// upstream refusing while holding every request the key had sent, which
// is what a concurrency limit does. Read so, it costs least when wrong: a
// rate limit then refuses again within the cap just learned, and that
// refusal is the rate's (one signal). Read as the rate's, a concurrency
// limit of one cost the key half its rate for a hold and a climb (the
// unforeseen mix's concurrent-1, whose first two starts overlap).
func (s *State) noneAnswered(t, dn, cost int64) bool {
	starts, refusals := s.discoveryLogs()
	others := starts.since(t-dn) - refusals.since(t-dn) - cost
	return others <= int64(s.InFlight)
}

// noteCap records at a start of cost units at now (after Take counted it)
// whether the learned cap binds: the key reached it, and its bucket and
// windows would admit another start at once, so that only the cap holds
// the next one back — at two starts in a row, since the first start after
// an idle spell finds the bucket's burst unspent whatever the cap. A key
// that reaches its cap only because each request ends before its rate
// admits the next (one at a time, 20-50 ms each, at 20/s) loses nothing
// to the cap, and raising it would only buy a refusal from the upstream
// that taught it.
func (s *State) noteCap(now time.Time, cost int64) {
	if s.LearnedConcurrency > 0 && s.InFlight >= s.LearnedConcurrency && s.capFlags&capRaised != 0 {
		s.capFlags |= capFull // a probe's level reached (see atProbedCap)
	}
	if s.LearnedConcurrency <= 0 || s.capFlags&capHit != 0 {
		return
	}
	if s.InFlight < s.LearnedConcurrency {
		return // below the cap: no evidence either way
	}
	in := s.InFlight
	s.InFlight = 0 // would the other shapes admit one more now?
	bound, _ := s.Check(now, cost)
	s.InFlight = in
	switch {
	case bound && s.capFlags&capBound != 0:
		s.capFlags |= capHit
	case bound:
		s.capFlags |= capBound
	default:
		s.capFlags &^= capBound
	}
}

// probeCap raises a learned cap that held, clean and binding, for its
// hold; see the comment above.
func (s *State) probeCap(now time.Time) {
	if s.LearnedConcurrency <= 0 || s.capFlags&capHit == 0 {
		return
	}
	t := now.UnixNano()
	if t-s.capAt < max(int64(CapHold), s.capHold) {
		return
	}
	c := s.LearnedConcurrency
	c += max(1, c/4)
	if s.Concurrency > 0 && c >= s.Concurrency || c > maxLearnedCap {
		s.LearnedConcurrency, s.capAt, s.capHold, s.capFlags = 0, 0, 0, s.capFlags&raisedCut
		return
	}
	s.LearnedConcurrency, s.capAt, s.capFlags = c, t, capProbing|capRaised|s.capFlags&raisedCut
}

// maxLearnedCap bounds a learned cap: above it the key is as good as
// uncapped, and the cap is dropped.
const maxLearnedCap = 1_000_000

// capExtra returns the learned cap's bookkeeping for MarshalShapes.
func (s *State) capExtra() [4]int64 {
	return [4]int64{int64(s.LearnedConcurrency), s.capAt, s.capHold, s.capFlags}
}

// setCapExtra restores what capExtra returned, clamped to what it can be.
func (s *State) setCapExtra(e []int64) {
	s.LearnedConcurrency, s.capAt, s.capHold, s.capFlags = 0, 0, 0, 0
	if len(e) >= 4 {
		s.capFlags = e[3] & (raisedCut | fillGrowing | fillGreedy) // the rate's, with or without a cap
	}
	if len(e) < 4 || e[0] <= 0 {
		return
	}
	s.LearnedConcurrency = int(min(e[0], maxLearnedCap))
	s.capAt, s.capHold, s.capFlags = e[1], min(max(e[2], 0), int64(MaxCapHold)), e[3]&(capHit|capProbing|capBound|capRaised|capFull|raisedCut|fillGrowing|fillGreedy)
}

// afterRaisedCut reports whether a refusal at now comes while the key
// still holds the rate a failed probe's cut left above the level it had
// probed from (see raisedCut): within a discovery window of that cut (or
// of the end of its pause). The key is then sending a rate the upstream
// has not yet shown it accepts, halfway between a level that held and a
// rate that failed, so a refusal there is the likeliest evidence of that
// rate, not of a concurrency limit: read as a cap, it taught half-none (a
// 20/s bucket, no concurrency limit) caps of one to four under lag, which
// held it back until probed away (the issue mix, TestVirtualLag's loaded
// profile and TestVirtualTransit).
func (s *State) afterRaisedCut(now time.Time) bool {
	if s.capFlags&raisedCut == 0 || s.LastRefusal.IsZero() {
		return false
	}
	return now.Sub(maxTime(s.LastRefusal, s.PausedUntil)) < s.discoveryWindow()
}
