package admission

import "time"

// Even pacing after a refusal the rate did not cause. An adaptive key
// bursts up to two units (see State.burst), so after an answer that came
// late its next start may follow the one before closer than its learned
// rate's spacing. An upstream bucket with a burst of one (or a receiver
// that counts the gap between arrivals) refuses that start although the
// key sends under its rate on average; cutting the rate does not help,
// since the next late answer lets a pair through again at any rate
// (s13h2: cap1-bucket-20, a 20/s bucket with a burst of one taking one
// request at a time, was cut 19.4 -> 17.5 -> 15.0 -> 12.3 -> 8.4 -> 4.2/s
// by six such refusals). A refusal of the key's latest start (nothing
// else in flight, so it is the one refused) that came less than its
// learned rate's spacing after the start before, while the key is at its
// ceiling (sending under the rate it was declared, which no refusal has
// yet put in doubt), is answered with a burst of one for EvenHold
// instead: the rate stands, and the next refusal at even pacing is read
// as a rate refusal as before. Below its ceiling the key's rate is
// itself a guess from earlier refusals, and a close pair refused there
// is no evidence against it (under loadedTransit a fixed window of 20
// refused such a pair at 9.3/s; read as the burst, the key met a second
// refusal 1.4 s later and collapsed to 1.9/s). Nor after SilentRun
// windows of clean sending: the key's bursts went that long unrefused,
// so a refusal then is the limit moving, a silent drop (see refused),
// and read as the burst it cost the issue variants' halving-503 a second
// refusal and its pause (drop30 seed 4: 2 -> 4 refusals).
const (
	// EvenHold is how long a key paces evenly (a burst of one) after a
	// refusal its rate did not cause. A refusal while it does is at even
	// pacing, the rate's, and learned from as before.
	EvenHold = 10 * time.Second
	// EvenGap is the share of its learned rate's spacing under which the
	// refused start's gap to the start before shows the burst, not the
	// rate, as the cause: the DiscoveryMargin the learned rate keeps
	// under a limit, so that a start paced at the rate is never taken
	// for a burst.
	EvenGap = 1 - DiscoveryMargin
)

// evenRefusal reports whether a refusal at now of a start of cost units
// is one its rate did not cause (see EvenHold), and if so sets the key to
// pace evenly. It reads
// the discovery log of starts, which holds the key's last two starts at
// the log's slot resolution (1/LogSlots of the window: ~2 ms).
func (s *State) evenRefusal(now time.Time, cost int64) bool {
	if s.InFlight != 0 || s.LearnedRate < s.Rate || s.burst() <= 1 || len(s.logs) != s.nLogs() {
		return false
	}
	d := s.discoveryWindow()
	if run := maxTime(time.Unix(0, s.active), maxTime(s.LastRefusal, s.PausedUntil)); s.active == 0 || now.Sub(run) >= SilentRun*d {
		return false // its burst went SilentRun windows unrefused: the limit moved (see refused)
	}
	e := s.logs[len(s.Windows)].entries
	n := len(e)
	if n < 2 {
		return false
	}
	last, prev := e[n-1], e[n-2]
	gap := float64(last.at - prev.at)
	if last.cost > cost {
		gap = 0 // more than the refused start merged in one slot
	}
	if gap >= EvenGap*s.unitNS() {
		return false // paced at the rate: the rate was refused
	}
	s.evenUntil = now.Add(EvenHold).UnixNano()
	return true
}

// evenExpire ends even pacing that ran out by now.
func (s *State) evenExpire(now time.Time) {
	if s.evenUntil != 0 && now.UnixNano() >= s.evenUntil {
		s.evenUntil = 0
	}
}
