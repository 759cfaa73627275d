package admission

import (
	"math"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// Limit discovery. An adaptive key keeps, besides its shapes' logs, a log
// of its own recent starts and of the refusals it met over a discovery
// window D (its longest window, or DiscoveryWindow), and enforces a learned
// window of its learned rate's worth of starts per D besides its bucket. A
// refusal (a 429, or a 503 with Retry-After) is evidence of the upstream's
// real allowance: just before refusing, it accepted the starts of the
// trailing window less the ones it refused. The learned rate moves to just
// under that at once (see refused) when the window measured it, and is
// halved when it did not (unless the window's count, an upper bound on a
// window upstream's limit whatever the key measured, is lower still): on the first refusal, and on a silent drop (a
// refusal after SilentRun clean windows at the ceiling, with nearly all
// the window's starts accepted: the window counts the old limit, and
// trimming to it would cost a refusal and its pause per few percent of
// the drop). It is bounded per signal so that one noisy window cannot
// collapse it.
//
// The key then holds its new rate for a while (ProbeHold, doubled by each
// probe that fails at the same level, up to MaxHold; SilentHold after a
// silent drop, since a limit that fell on its own rarely comes back
// within a second and every probe into it costs a pause, and after a cut
// to a measured limit, which a probe a second later would only meet
// again) and only then probes
// upward, by the larger of IncreasePerSecond of the ceiling and
// GrowthPerSecond of the current rate per second of successes, faster the
// longer it stays clean (up to MaxProbeSpeedup x): a limit that rose again
// is found within seconds of the hold, and a stable one costs one refusal
// signal per hold instead of one a second. The learned rate that last went
// a clean window is remembered, and a refusal while probing above it falls
// back to it when the window measured nothing better.
const (
	// DiscoveryWindow is the discovery window of a key with no window
	// shape.
	DiscoveryWindow = time.Second
	// DiscoveryMargin is how far under the estimated allowance the learned
	// rate is set, as a fraction.
	DiscoveryMargin = 0.03
	// MaxCutPerSignal is the lowest fraction of its rate one refusal
	// signal may cut a key to.
	MaxCutPerSignal = 0.5
	// NoEstimateCut is the fraction of its rate a key keeps on a refusal
	// whose window measured nothing (the first refusal, a limit that
	// dropped silently below what the upstream had been accepting): the
	// limit is below the refused rate by an unknown amount, and halving,
	// as TCP does, is a guess that the next window corrects either way.
	NoEstimateCut = 0.5
	// ProbeHold is how long after a cut a key holds its learned rate
	// before probing above it.
	ProbeHold = time.Second
	// MaxHold bounds the hold after probes that kept failing at the same
	// level.
	MaxHold = 2 * time.Second
	// SilentHold is the least hold after a silent drop (see refused),
	// and the hold after a cut to a measured limit.
	SilentHold = 3 * time.Second
	// SilentHoldPerRun is the hold after a silent drop as a multiple of
	// how long the key had run cleanly at its ceiling before it (the old
	// limit's age, as the key saw it), within SilentHold and
	// MaxSilentHold: an upstream whose limit held for a long time before
	// it fell is taken to keep the new one for a comparable time, and a
	// probe into it costs a refusal and, when the upstream names a delay,
	// a whole pause of its allowance.
	SilentHoldPerRun = 1.5
	// MaxSilentHold bounds the hold after a silent drop, so that a limit
	// that comes back is still found within seconds of it.
	MaxSilentHold = 6 * time.Second
	// SentShare is the share of its learned rate's worth of starts a key
	// must have made in the trailing window for a refusal to show the
	// upstream at its limit (unless RefusedShare of them were refused).
	SentShare = 0.8
	// RefusedShare is the share of a window's starts that, refused, shows
	// the upstream at its limit however slowly the key was sending.
	RefusedShare = 0.1
	// CutHoldoff is how long after a cut further refusals count as the
	// same signal (requests that were already in flight).
	CutHoldoff = 500 * time.Millisecond
	// NoiseShare is the share of a window's starts that may be refused
	// before a refusal (not within a window of the last) teaches the key
	// anything.
	NoiseShare = 0.02
	// SilentRun is how long (in discovery windows) a key must have sent
	// without a refusal or a pause for a refusal at the rate the upstream
	// had been accepting to count as a silent drop of its limit.
	SilentRun = 2
	// SilentShare is how far under the key's rate the window's accepted
	// starts may be for such a refusal still to be a silent drop: the
	// upstream took (nearly) all the key sent, then refused.
	SilentShare = 0.1
	// BoundRun is the share of the discovery window a key's current run
	// of starts must have lasted for a refusal's accepted count to bound
	// the upstream's rate (see refused and boundRun).
	BoundRun = 0.2
	// MinSinceAccepted is the least the upstream must have accepted
	// between two refusal signals for that count to measure its
	// allowance (see sinceCut): fewer is a rounding error of the log.
	MinSinceAccepted = 5
	// MaxProbeSpeedup bounds how much faster than GrowthPerSecond a key
	// that has gone several clean windows probes.
	MaxProbeSpeedup = 3
)

// refusalLogs is how a refusal starts being read (refused,
// concurrencyRefusal): on an adaptive, paced key (ok, else nothing is
// learned), its discovery window D and its logs of starts and refusals
// over D, made if it had none yet.
func (s *State) refusalLogs() (d time.Duration, starts, refusals *startLog, ok bool) {
	if !s.Adaptive || s.Rate <= 0 {
		return 0, nil, nil, false
	}
	s.ensureLogs()
	starts, refusals = s.discoveryLogs()
	return s.discoveryWindow(), starts, refusals, true
}

// discoveryLogs are the key's logs of starts and of refusals over its
// discovery window, kept after its windows' logs (ensureLogs).
func (s *State) discoveryLogs() (starts, refusals *startLog) {
	return &s.logs[len(s.Windows)], &s.logs[len(s.Windows)+1]
}

// discoveryWindow is D: the key's longest window, or DiscoveryWindow.
func (s *State) discoveryWindow() time.Duration {
	d := DiscoveryWindow
	for _, w := range s.Windows {
		d = max(d, w.Period)
	}
	return d
}

// RateLimited records a refusal at now that named a retry delay (a 429, or
// a 503 with Retry-After): the key pauses until until, the upstream's own
// word, to the nanosecond it gave, and an adaptive key learns its limit
// from the refusal (see refused); its bucket restarts empty at the end of
// the pause rather than sending a burst into a window that just refused.
// A refusal that reads as a concurrency limit (see concurrencyRefusal)
// pauses but teaches the rate nothing. A fixed key with a sliding window
// paces strictly for a while (see strictRefusal).
func (s *State) RateLimited(now, until time.Time, cost int64) {
	cost = s.Charge(cost)
	s.credit = 0 // refused: the remaining it was told is spent (see credit.go)
	s.endFill()
	s.strictRefusal(now, until)
	if s.concurrencyRefusal(now, cost) {
		s.Pause(until) // the upstream's word; the rate and bucket stand
		return
	}
	learned, silent := s.refused(now, cost) // before the pause: it reads the last one
	s.Pause(until)
	if learned && s.rate() > 0 {
		s.TAT = maxTime(s.TAT, addSat(until, s.tolerance()))
	}
	if silent {
		s.fillAfterPause(now, until) // see fill.go
	}
}

// Throttled records a refusal that named no retry delay; until is the
// job's own backoff. An adaptive key needs no pause: its new learned limit
// paces it, and its bucket is emptied, because the upstream's is. Pausing
// it for one job's exponential backoff would idle the key far longer than
// the upstream asked — it asked for nothing — and cost seconds of its
// allowance on every 429. A key with a fixed limit has no other way to
// slow down, so it pauses until until, and, with a sliding window, paces
// strictly for a while (see strictRefusal). A refusal that reads as a
// concurrency limit teaches an adaptive key a cap instead of a rate.
func (s *State) Throttled(now, until time.Time, cost int64) {
	cost = s.Charge(cost)
	s.credit = 0 // refused: the remaining it was told is spent (see credit.go)
	s.endFill()
	if !s.Adaptive {
		s.strictRefusal(now, until)
		s.Pause(until)
		return
	}
	if s.concurrencyRefusal(now, cost) {
		return // a cap learned; the rate and bucket stand
	}
	s.refused(now, cost) // learned from; Throttled sets no pause to fill (see fill.go)
	if s.rate() > 0 {
		s.TAT = maxTime(s.TAT, addSat(now, s.tolerance()))
	}
}

// PacesRefusals reports whether Throttled slows the key by itself: an
// adaptive key with a ceiling learns a lower rate (or a cap) from a refusal
// that named no retry delay and empties its bucket, so its next start is
// spaced by its new pacing. A job such a key refused needs no backoff of
// its own (see store.PacedRetry): the key's pacing is the wait, and a
// backoff on top idles the refused job for 0.5-1.5 s while the key goes on
// starting others. Any other key pauses for the job's backoff instead.
func (s *State) PacesRefusals() bool { return s.Adaptive && s.Rate > 0 }

// PacesStarts reports whether the key spaces its starts in time: it has a
// bucket or a window. A job such a key holds, retried at once after a
// transient fault (see store.PacedFault), goes back to the key's queue and
// starts when the key admits it, so the upstream sees no more than the
// key's pace whether the start is a retry or a fresh job. A key with only
// a concurrency cap, or no shape, spaces nothing: a retry at once there
// is a retry storm.
func (s *State) PacesStarts() bool { return s.Rate > 0 || len(s.Windows) > 0 }

// refused learns an adaptive key's limit from one refusal of cost units at
// now and reports whether the key is adaptive, and whether the refusal
// read as a silent drop of the upstream's limit (see below).
//
// The estimate is the cost the upstream accepted in the trailing window:
// the key's starts there less its refusals (see estimate). When it is
// under the rate the key was sending, the learned rate moves at once to
// DiscoveryMargin under it. Otherwise the refusal says only that the upstream's limit is below the rate that was
// refused, not by how much: a failed probe falls back to the last rate
// that went a clean window (good), and anything else (the first refusal,
// or one at a rate the upstream had been accepting: a silent drop) cuts
// to NoEstimateCut of the rate, the way TCP halves its window. One signal
// never cuts below MaxCutPerSignal of the rate; refusals within CutHoldoff
// of a cut are requests already in flight then, or the echo of one event,
// and count once. A stray refusal among many acceptances (at most
// NoiseShare of the window's starts, not within a window of the last) is
// jitter and teaches nothing.
//
// Each cut also sets how long the key holds the new rate before probing
// above it (see Succeeded): a failed probe doubles the hold, up to
// MaxHold, so that a key sitting just under a stable limit spends one
// refusal signal per MaxHold, not one a second; a cut while holding (the
// limit dropped) resets it to ProbeHold.
func (s *State) refused(now time.Time, cost int64) (adaptive, silentDrop bool) {
	d, starts, refusals, ok := s.refusalLogs()
	if !ok {
		return false, false
	}
	t, dn := now.UnixNano(), int64(d)
	refusals.add(t, cost, t-dn, dn/LogSlots)
	if !s.LastRefusal.IsZero() && now.Sub(s.LastRefusal) < CutHoldoff && !now.Before(s.LastRefusal) {
		return true, false // the same signal
	}
	if a := s.announcedAt; a != 0 && t >= a && t-a < int64(CutHoldoff) {
		// Within CutHoldoff of a cut the upstream's announced policy
		// made: a request sent before the key slowed to what the
		// upstream says it allows, refused for what the cut already
		// corrected. Learned from, it halved rising's rise-bucket (an
		// upstream bucket announcing 15/s) to 7.3/s for the second after
		// its pause, under transit on every seed; the pause stands.
		return true, false
	}
	inStarts, inRefusals := starts.since(t-dn), refusals.since(t-dn)
	recent := !s.LastRefusal.IsZero() && now.Sub(s.LastRefusal) < d
	if !recent && float64(inRefusals) <= NoiseShare*float64(inStarts) {
		return true, false // noise: counted, not learned from
	}
	if s.evenRefusal(now, cost) {
		// The burst, not the rate, was refused: the key paces evenly
		// at the rate it had (see even.go).
		return true, false
	}
	current := s.rate()
	est, valid := s.estimate(now)
	// The key sent at its learned rate, or the upstream refused a good
	// share of what it sent: either way the upstream was at its limit,
	// and what it accepted is that limit. A key that sent well under its
	// rate and met one refusal met a bunch of arrivals, not the limit.
	// A pause that ended inside the window leaves only the rest of it to
	// send in.
	active := d
	if e := s.PausedUntil; !e.IsZero() && e.After(now.Add(-d)) && e.Before(now) {
		active = now.Sub(e)
	}
	share := s.windowShare(inStarts, cost)
	sendable := current * active.Seconds() * share
	full := float64(inStarts) >= SentShare*sendable || float64(inRefusals) >= RefusedShare*float64(inStarts)
	// A silent drop: the key had been sending at its ceiling (never cut,
	// or probed all the way back), cleanly, for SilentRun windows, and the
	// upstream took nearly all of it up to this refusal. (A key holding a
	// learned rate is not: a bucket's burst can hide for seconds that the
	// rate is a little high.) What the window measured is the old limit,
	// not the new one: trimming to it would take a refusal (and its
	// pause) for every few percent of the drop. Halve instead, as on a
	// first refusal; the next window's measure or the probe after the
	// hold corrects it.
	run := maxTime(time.Unix(0, s.active), maxTime(s.LastRefusal, s.PausedUntil))
	// A key that probed back to its ceiling is "at its ceiling" only once
	// its last probe step is SilentRun windows old: a refusal sooner is
	// the probe's (an upstream bucket's burst hid it on the way up), and
	// halving for it threw away the level the key had measured (adapt's
	// 100/s phase: probed 96 -> 120 in a third of a second, refused, and
	// halved to 60).
	ceiling := current >= s.Rate && (s.probeAt == 0 || now.Sub(time.Unix(0, s.probeAt)) >= SilentRun*d)
	// Whether the key sent its rate is asked, for a silent drop, of the
	// part of the window it was sending in (see busy): a key held by its
	// own window for part of the window sent its rate's worth of what
	// that window let through.
	sentRate := full || float64(inStarts) >= SentShare*current*s.busy(t, active, current).Seconds()*share
	silent := valid && sentRate && s.active != 0 && (s.level == 0 || ceiling) &&
		est*d.Seconds() >= s.silentSent(current*d.Seconds(), inStarts)*(1-SilentShare) && now.Sub(run) >= SilentRun*d
	sinceEst, sinceOK := s.sinceCut(now)
	var target float64
	measured := false
	switch {
	case !valid || silent:
		target = current * NoEstimateCut
	case s.level > 0 && current > s.level:
		// A probe above the last level failed: to just under what the
		// window measured, but no further up than halfway from the rate
		// that held (the level, or the last rate that went a whole window
		// clean) to the rate that failed. The measure alone can be
		// high: against fixed windows a window straddling two of the
		// upstream's holds up to twice its limit, against a bucket its
		// burst on top of its rate.
		held := math.Min(current, math.Max(s.level, s.good))
		target = math.Min(math.Min(est, current)*(1-DiscoveryMargin), (held+current)/2)
		// A window in which the key sent less than its level (accepted
		// and refused together) measured the key, not the upstream: the
		// sender could not keep up (on a loaded machine a window that
		// counts each start until its answer admits its limit per period
		// plus a round trip). After a long hold (SilentHold or more: a
		// silent drop's or a measured cut's) the level went seconds
		// clean, and such a count is no reason to fall below it. On the
		// issue mix's halving-503 on the real clock, a probe after 6 s
		// clean at 14.5/s against a limit of 15 measured the 12/s the key
		// had managed to send and fell to 11.6, which it then held for
		// 3 s. A limit that did fall meanwhile refuses the level, and that
		// refusal, not a probe's, is measured. The floor is the level,
		// not a probed rate that went a window clean while the key could
		// not send at it; and not after a short hold, whose level is a
		// guess (on unforeseen's concurrent-1 under transit, a
		// concurrency limit read as a rate, it cost 4 more refusals).
		if float64(inStarts) < s.level*active.Seconds() && time.Duration(s.hold) >= SilentHold {
			target = math.Max(target, s.level)
		}
		// A probe climbs within the window, so the window is held to
		// the level the probe started from.
		if float64(inStarts) < SentShare*s.level*active.Seconds() && float64(inRefusals) < RefusedShare*float64(inStarts) {
			// Refused while sending under the probed rate: a bunch of
			// arrivals, not the limit. Trim, as elsewhere.
			target = current * (1 - DiscoveryMargin)
		}
		s.streak = 0
	case sinceOK && !silent && sinceEst*(1-DiscoveryMargin) < current:
		// A second signal while the key still sends at the rate the
		// last one set, with no pause between: the upstream was full at
		// both refusals, so what it accepted between them is what it
		// refills in that time (a bucket empty at both ends takes
		// exactly its rate; its burst was spent before the first), not
		// the trailing window's count, which still holds the old
		// limit's acceptances. On adapt's drop from 100 to 30/s the
		// window read 63/s and halved the key to 24, then 22; this
		// reads 30 (see sinceCut). MaxCutPerSignal still bounds the cut:
		// unbounded, loaded real runs of adapt cut phase 1 far under
		// 100/s (a refusal's answer can land after starts leased
		// before the last signal, and reads low).
		target = sinceEst * (1 - DiscoveryMargin)
		measured = true
		s.streak = 0
	case est*(1-DiscoveryMargin) < current && full:
		// A second signal while the key still holds the rate the last
		// one set (not probing: it never went a hold clean) means that
		// estimate was high: its window still held acceptances from
		// before a silent drop (a fixed window's previous count), or
		// bunched arrivals. Each such signal in a row doubles the
		// margin (3%, 6%, 12%, ... at most half).
		margin := DiscoveryMargin
		if s.level > 0 && current <= s.level && recent2(s, now) {
			s.streak = min(s.streak+1, 4)
			margin = math.Min(1-MaxCutPerSignal, DiscoveryMargin*float64(int(1)<<s.streak))
		} else {
			s.streak = 0
		}
		target = est * (1 - margin)
		measured = true
	case full:
		// Refused at more than the key's rate had been taking (a burst
		// the upstream no longer has): by an unknown amount.
		target = current * NoEstimateCut
	default:
		target = current * (1 - DiscoveryMargin)
	}
	target = math.Max(target, current*MaxCutPerSignal)
	// The window's accepted starts bound the upstream's allowance from
	// above, however fast the key sent and however short its run: a
	// sliding or fixed window no longer than D that refuses holds at
	// least its limit inside the trailing D, and the key counts as
	// accepted every start not yet refused (answers still in flight
	// too), so the count can only be high. Below the cut the switch
	// chose (a first refusal's halving above all, which "measured
	// nothing"), it is the better guess, even under MaxCutPerSignal: a
	// limit a third of the ceiling is learned on its first refusal
	// instead of its second, which costs a pause. Against a bucket a
	// short run's count is its burst, not its rate; the run must have
	// lasted BoundRun of D for the count to read as a rate, and begun
	// less than D ago for the count to hold all of it (see boundRun).
	bounded := false
	if bound := float64(inStarts-inRefusals) / d.Seconds() * (1 - DiscoveryMargin); bound < target && s.boundRun(now) {
		target, bounded = bound, true
	}
	learned := math.Min(s.Rate, math.Max(s.MinRate, target))
	hold := time.Duration(s.hold)
	if s.level > 0 && current > s.level {
		// A probe failed: the limit is not far above; wait longer
		// before the next one. A cut while holding (the limit dropped)
		// probes again soon.
		hold = min(MaxHold, max(ProbeHold, 2*hold))
	} else if silent {
		// A silent drop: held for SilentHoldPerRun of the old limit's
		// age (see silentHold).
		hold = silentHold(now.Sub(run))
	} else if bounded || measured {
		// A limit that dropped on its own (load shedding, a plan
		// change) does not come back within a second: each probe into
		// it costs a refusal and its pause. Nor does one a window
		// measured (its count bounded the limit below the cut, or a
		// second signal trimmed the key to what the window accepted):
		// the key sits just under a measured limit, and a probe a second
		// after the pause would only find it again, for another pause.
		hold = SilentHold
	} else {
		hold = ProbeHold
	}
	s.noteRaisedCut(current, learned)
	s.LearnedRate, s.level, s.hold = learned, learned, int64(hold)
	s.LastRefusal = now
	s.probe, s.probeAt = 0, 0
	return true, silent
}

// noteRaisedCut records, for a refusal signal that moves the learned rate
// from current to learned, whether it was a failed probe (current above
// the level) whose cut stayed above that level (see raisedCut and
// afterRaisedCut); any other signal clears it. It runs before refused
// sets the new level.
func (s *State) noteRaisedCut(current, learned float64) {
	s.capFlags &^= raisedCut
	if s.level > 0 && current > s.level && learned > s.level {
		s.capFlags |= raisedCut
	}
}

// windowShare is the share of its learned rate's worth of starts a key
// with window shapes can make in a discovery window, given that a window
// counts each start from its lease until its answer is applied (see
// window.go): with starts taking T in flight, a sliding window of limit L
// per period P admits L per P+T, not per P. T is read from the key
// itself, by Little's law: its leases in flight (the refused one, which
// was until now, included) over the rate it started them at in the
// trailing window, so that the share is inStarts/(inStarts+in flight).
// On the real clock T is the round trip plus the start lag and the
// finish queue's delay, a tenth of a second or more on a loaded machine;
// a key that sent all its windows let it through sent under its learned
// rate's worth by that share, and rules that ask whether the key sent
// its rate (full, the silent drop in refused) must ask it of this share
// of the rate. Without windows (a bucket) the key can send its rate
// whatever the round trip: 1.
func (s *State) windowShare(inStarts, cost int64) float64 {
	if len(s.Windows) == 0 || inStarts <= 0 {
		return 1
	}
	in := float64(s.InFlight) + float64(cost)
	return float64(inStarts) / (float64(inStarts) + in)
}

// busy is the part of the trailing active span (ending at t, Unix ns) in
// which an adaptive key was sending at its rate current: the span less
// every gap between its starts (and before its first) longer than two
// start intervals, each but one interval of it. A silent drop asks
// whether the key had been sending its rate, and a key whose own window
// held it for part of the window has not sent its rate's worth of the
// whole window, though it sent all it could: on a loaded machine a
// sliding window counts each start until its answer is written, and
// answers written late in one batch are logged together, so the key
// sends its window's worth in bunches with pauses of up to half a second
// between them. Read over the whole window, halving-503's silent drop
// under the loaded lag (TestVirtualLagSilentDrop) looked, on 2 of 48
// seeds, like a key that had sent 17-19 of its 29.1, and was trimmed to
// 28.2 instead of halved (docs/benchmarks.md, session 21, s21h2). The
// gaps are not told apart from a queue that ran dry, which is why only
// the silent drop (a key at its ceiling for SilentRun windows) reads
// them: elsewhere, at a run's tail, a key that ran out of jobs would
// read as one at its limit and be halved. Nor are a capped key's gaps
// its rate's (it waits for a slot, not for its window): a key with a cap
// in force is judged over the whole span, as before (half-none, capped
// at 3 under the loaded lag, was halved at its run's tail for them).
func (s *State) busy(t int64, active time.Duration, current float64) time.Duration {
	if current <= 0 || len(s.logs) != s.nLogs() || s.InFlightCap() > 0 {
		return active
	}
	starts, _ := s.discoveryLogs()
	step := int64(float64(time.Second) / current)
	prev, idle := t-int64(active), int64(0)
	for _, e := range starts.entries {
		if e.at <= prev {
			continue
		}
		if g := e.at - prev; g > 2*step {
			idle += g - step
		}
		prev = e.at
	}
	return max(0, active-time.Duration(idle))
}

// silentSent is what a silent drop's window is judged against: the
// upstream took nearly all of it, then refused. For a key without windows
// it is its learned rate's worth, rateWorth (a bucket sends its rate
// whatever the round trip, and one that sent less had a reason the
// upstream may have given: a ceiling above the limit, refused before
// each window filled; TestVirtualAdapt's goodput fell from 0.895 to
// 0.810 when it was judged against its starts). A key with windows sends
// what they let through, less than its rate's worth by its round trip
// and, on a fixed window, by the starts straddling a boundary (counted
// in both windows); what it sent, inStarts, is the measure: judged
// against its rate, halving-503's drop under lag read as a key that had
// not been sending and was trimmed instead of halved.
func (s *State) silentSent(rateWorth float64, inStarts int64) float64 {
	if len(s.Windows) == 0 {
		return rateWorth
	}
	return math.Min(rateWorth, float64(inStarts))
}

// sinceCut returns the upstream's allowance measured between the last
// refusal signal and a refusal at now, in cost units per second, and
// whether that interval is a measurement: at least CutHoldoff and less
// than a discovery window long, with no pause in it (a refusal that named
// a delay paused the key, and the upstream refilled meanwhile), at least
// MinSinceAccepted accepted, and the key sending at least SentShare of its
// rate throughout (it pressed on the limit the whole time). Both ends of
// the interval found the upstream full, so what it accepted in between is
// what it freed in that time: a token bucket's refill exactly, its burst
// having been spent before the first refusal. The trailing window, by
// contrast, still counts what the upstream accepted before its limit fell.
func (s *State) sinceCut(now time.Time) (float64, bool) {
	last := s.LastRefusal
	if s.LearnedConcurrency > 0 && s.capFlags&capRaised == 0 && s.capAt > last.UnixNano() {
		// A refusal read as a concurrency limit since (see
		// concurrency.go) found the upstream full as well.
		last = time.Unix(0, s.capAt)
	}
	if last.IsZero() || len(s.logs) != s.nLogs() {
		return 0, false
	}
	since := now.Sub(last)
	if since < CutHoldoff || since >= s.discoveryWindow() || s.PausedUntil.After(last) {
		return 0, false
	}
	h := last.UnixNano()
	starts := s.logs[len(s.Windows)].since(h)
	accepted := starts - s.logs[len(s.Windows)+1].since(h)
	// The key pressed on the limit throughout: it sent its rate, or the
	// upstream refused in between too (the echoes of the last signal
	// each emptied the key's bucket, so it sent less than its rate).
	between := s.logs[len(s.Windows)+1].since(h) - 1 // less the refusal at now
	if accepted < MinSinceAccepted || (float64(starts) < SentShare*s.rate()*since.Seconds() && between < 1) {
		return 0, false
	}
	return float64(accepted) / since.Seconds(), true
}

// silentHold is the hold after a silent drop that ended a clean run of
// the given length at the key's ceiling: SilentHoldPerRun of it, within
// SilentHold and MaxSilentHold. A limit's past is the only evidence of
// how long its new value will last: one that fell after holding for
// seconds (load shedding, a plan change) is not back a second after the
// pause, and each probe into it costs a refusal and its pause (on a
// fixed window with a whole-second Retry-After, a whole window of the
// new allowance); one that fell after a short run may be moving, and is
// probed as soon as before.
func silentHold(run time.Duration) time.Duration {
	return min(MaxSilentHold, max(SilentHold, time.Duration(SilentHoldPerRun*float64(run))))
}

// boundRun reports whether the key's current run of starts (see active)
// began at least BoundRun of its discovery window ago and less than a
// window ago. Only then is every start the upstream can still be counting
// in the key's log: a refusal is applied after its answer's latency and
// the engine's delay, so later in a run the upstream's window reaches back
// past the trailing D the key still remembers, and the count, missing
// those starts, could be low rather than high.
func (s *State) boundRun(now time.Time) bool {
	d := s.discoveryWindow()
	run := now.Sub(time.Unix(0, s.active))
	return s.active != 0 && run >= time.Duration(BoundRun*float64(d)) && run < d
}

// recent2 reports whether now is within the hold the last refusal signal
// set (at least a discovery window), plus one window, of the end of its
// pause: the key was still holding that signal's rate when refused.
func recent2(s *State, now time.Time) bool {
	return !s.LastRefusal.IsZero() && now.Sub(maxTime(s.LastRefusal, s.PausedUntil)) < max(s.discoveryWindow(), time.Duration(s.hold))+s.discoveryWindow()
}

// estimate returns the upstream's allowance measured from the discovery
// window ending at now, in cost units per second, and whether the window
// is a measurement at all (see refused). A refusal means the upstream's
// own window is full, whatever it counts: a sliding window of D holds what
// it accepted in the trailing D; a fixed window at least its limit since
// its boundary, inside the trailing D; a bucket its rate over D once its
// burst is spent. So what it accepted in the trailing D is its allowance,
// however fast the key was sending (see refused for a key that sent too
// little for the refusal to mean that), except on the key's very first
// refusal less than three quarters of a window after it began: a key that
// started half a window ago accepted half a window's worth, plus whatever
// burst the upstream had.
func (s *State) estimate(now time.Time) (float64, bool) {
	d := s.discoveryWindow()
	t, dn := now.UnixNano(), int64(d)
	starts, refusals := s.discoveryLogs()
	inStarts, inRefusals := starts.since(t-dn), refusals.since(t-dn)
	first, ok := starts.first(t - dn)
	if s.active != 0 {
		first = min(first, s.active)
	}
	if !ok || (s.LastRefusal.IsZero() && s.good == 0 && t-first < dn*3/4) {
		return 0, false
	}
	accepted := math.Max(0, float64(inStarts-inRefusals))
	// A pause that ended inside the window: an upstream counting fixed
	// windows reset at or before its end (the pause was until its reset),
	// so what it accepted since is its new limit, while the trailing
	// window still holds the previous fixed window's acceptances, up to
	// twice the limit. A sliding window does not reset; it accepted less
	// since the pause than over the window only when the pause ended as
	// one slot freed (an exact Retry-After), and then what it accepted
	// since is a small fraction of the window's: such a count is no
	// estimate.
	if e := s.PausedUntil.UnixNano(); !s.PausedUntil.IsZero() && e > t-dn && e < t {
		since := math.Max(0, float64(starts.since(e)-refusals.since(e)))
		if since >= NoEstimateCut*accepted {
			accepted = since
		}
	}
	return accepted / d.Seconds(), true
}

// Succeeded records a successful start at now. An adaptive key below its
// ceiling holds its learned rate for the hold its last cut set (ProbeHold,
// longer after probes that failed at the same level), then probes upward:
// by the larger of IncreasePerSecond of the ceiling and GrowthPerSecond of
// the current rate per second of traffic, faster the longer it stays clean
// (up to MaxProbeSpeedup x), so that a limit that rose is found within
// seconds. The rate probed a window ago that survived a whole window is
// remembered as good: a failed probe falls back to it.
func (s *State) Succeeded(now time.Time) {
	if !s.Adaptive {
		s.strictExpire(now)
		return
	}
	s.probeCap(now)
	s.growFill(now) // see fill.go
	if s.LearnedRate >= s.Rate || s.rate() <= 0 {
		return
	}
	d := s.discoveryWindow()
	// Clean time counts from the end of the refusal's pause: a key that
	// sent nothing has learned nothing of its new rate.
	clean := time.Duration(math.MaxInt64)
	if !s.LastRefusal.IsZero() {
		clean = now.Sub(maxTime(s.LastRefusal, s.PausedUntil))
	}
	if clean < d {
		return
	}
	// The rate probed a window ago survived a whole window: it is good.
	if at := time.Unix(0, s.probeAt); s.probeAt == 0 || now.Sub(at) >= d {
		if s.probeAt != 0 {
			s.good = s.probe
		}
		s.probe, s.probeAt = s.LearnedRate, now.UnixNano()
	}
	hold := max(d, time.Duration(s.hold))
	if clean < hold {
		return // holding just under what the upstream was measured to take
	}
	// The longer the key has gone clean past its hold, the faster it
	// probes (from 1.5x to MaxProbeSpeedup x), so a limit that rose far is
	// found in seconds.
	speed := math.Min(MaxProbeSpeedup, 1.5+(clean-hold).Seconds()/d.Seconds())
	step := math.Max(s.Rate*IncreasePerSecond, s.rate()*GrowthPerSecond*speed) / s.rate()
	s.LearnedRate = math.Min(s.Rate, s.LearnedRate+step)
}

// AnnouncedMargin is how far under an allowance the upstream announced
// (see announced) an adaptive key sets its learned rate, as a fraction:
// the announcement is exact, the arrivals the upstream counts are not.
const AnnouncedMargin = DiscoveryMargin

// announced applies an upstream's announced policy, h.Limit requests per
// h.Window, to an adaptive key and reports whether h carried one. The
// announcement is the upstream's own word on its allowance, so it beats
// what discovery measures: the learned rate moves to AnnouncedMargin under
// it at once (within the key's floor and ceiling), down as soon as the
// upstream announces less, which slows the key before a 429, and up as
// soon as it announces more, which finds a raised limit in one answer
// instead of by probing for it after a hold. Upward it waits until the key
// has gone a discovery window without a refusal: an upstream that refused
// below what it announces (a second limit it does not announce, such as
// concurrency, or a counter that estimates) is believed on its refusals,
// and probing finds the rest. A raise is remembered as the level a failed
// probe falls back to, as a probe that went clean would be.
func (s *State) announced(now time.Time, h job.Hint) bool {
	if !s.Adaptive || s.Rate <= 0 || h.Limit <= 0 || h.Window <= 0 {
		return false
	}
	target := float64(h.Limit) / h.Window.Seconds() * (1 - AnnouncedMargin)
	target = math.Min(s.Rate, math.Max(s.MinRate, target))
	current := s.rate()
	switch {
	case target < current:
		s.LearnedRate = target
		s.level = target
		s.announcedAt = now.UnixNano()
	case target > current:
		if !s.LastRefusal.IsZero() && now.Sub(maxTime(s.LastRefusal, s.PausedUntil)) < s.discoveryWindow() {
			return true
		}
		if d := int64(s.discoveryWindow()); len(s.logs) == s.nLogs() && s.logs[len(s.Windows)+1].since(now.UnixNano()-d) > 0 {
			return true // refused within the window, if only an echo (see refused)
		}
		s.LearnedRate, s.level, s.good = target, target, target
		s.probe, s.probeAt = 0, 0
	}
	return true
}
