package admission

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Window is a window shape. A sliding window (the default) admits at most
// Limit cost units in any interval of length Period: the strictest
// reading of "20 per second", and how many upstreams count; a token bucket
// of the same rate admits its burst on top of the rate in any such
// interval. A Fixed window admits at most Limit in each interval
// [k*Period, (k+1)*Period) aligned to the Unix epoch, the way an upstream
// whose quota "resets at" :00 counts (a Redis INCR + EXPIRE limiter,
// GitHub's hourly reset): a sender that knows it may use each aligned
// window's whole allowance, even just after the previous one's.
type Window struct {
	// Limit is the cost units that may start in any window, at least 1.
	Limit float64
	// Period is the window's length, from 1 ms to 24 h.
	Period time.Duration
	// Fixed counts aligned windows instead of sliding ones.
	Fixed bool
	// Guard (fixed windows only, below Period) also counts a start within
	// Guard of its window's end in the next window: a start that late may
	// arrive after the upstream's window rolled over, and counting it in
	// both never lets the upstream see more than Limit in either. Transit
	// delay is covered without it (a start counts until it ends, see
	// State.End); the guard covers an upstream clock ahead of ours.
	Guard time.Duration
}

type windowJSON struct {
	Limit  float64 `json:"limit"`
	Period string  `json:"period"`
	Fixed  bool    `json:"fixed,omitempty"`
	Guard  string  `json:"guard,omitempty"`
}

// MarshalJSON writes the period (and guard) as Go duration strings ("1s",
// "1m0s").
func (w Window) MarshalJSON() ([]byte, error) {
	j := windowJSON{Limit: w.Limit, Period: w.Period.String(), Fixed: w.Fixed}
	if w.Guard != 0 {
		j.Guard = w.Guard.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads {"limit": N, "period": "1s"}, with "fixed": true
// and an optional "guard": "30ms" for a fixed window; the period may also
// be a number of seconds.
func (w *Window) UnmarshalJSON(b []byte) error {
	var raw struct {
		Limit  float64         `json:"limit"`
		Period json.RawMessage `json:"period"`
		Fixed  bool            `json:"fixed"`
		Guard  string          `json:"guard"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	w.Limit, w.Fixed, w.Guard = raw.Limit, raw.Fixed, 0
	if raw.Guard != "" {
		d, err := time.ParseDuration(raw.Guard)
		if err != nil {
			return fmt.Errorf("window guard %q: want a duration such as \"30ms\"", raw.Guard)
		}
		w.Guard = d
	}
	if len(raw.Period) == 0 {
		return errors.New("window: period is required, e.g. \"1s\"")
	}
	var s string
	if err := json.Unmarshal(raw.Period, &s); err == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("window period %q: want a duration such as \"1s\" or \"1m\"", s)
		}
		w.Period = d
		return nil
	}
	var secs float64
	if err := json.Unmarshal(raw.Period, &secs); err != nil || math.IsNaN(secs) || secs < 0 || secs > 86400 {
		return errors.New("window period: want a duration string or a number of seconds up to 86400")
	}
	w.Period = time.Duration(secs * float64(time.Second))
	return nil
}

func (w Window) validate() error {
	switch {
	case math.IsNaN(w.Limit) || w.Limit < 1 || w.Limit > MaxCost:
		return fmt.Errorf("window limit must be between 1 and %g cost units, got %v", float64(MaxCost), w.Limit)
	case w.Period < time.Millisecond || w.Period > 24*time.Hour:
		return fmt.Errorf("window period must be between 1ms and 24h, got %v", w.Period)
	case w.Guard != 0 && !w.Fixed:
		return fmt.Errorf("window guard applies to a fixed window; a sliding window is guarded by a longer period")
	case w.Guard < 0 || w.Guard >= w.Period:
		return fmt.Errorf("window guard must be at least 0 and less than the period %v, got %v", w.Period, w.Guard)
	}
	return nil
}

// sameLog reports whether a start log kept for o can serve w: a sliding
// and a fixed log hold different things (starts, or per-window counts).
func (w Window) sameLog(o Window) bool {
	return w.Period == o.Period && w.Fixed == o.Fixed
}

// A window counts what the upstream may have counted, not what the
// sender decided. The upstream counts a request when it arrives, which is
// some unknown time after the lease admitted it (the lease commits, the
// handler starts, signs and sends; tens of ms, more under load) and before
// its answer came back. So a start is in flight from its Take until its
// End (the finish that reports its answer), and a window counts it for
// that whole time, then logs it at its End, the latest time it can have
// arrived. Start k of a sliding window then waits for End(k-Limit)+Period,
// which is after arrival(k-Limit)+Period whatever the transit: no jitter
// between admission and arrival can put Limit+1 arrivals in one upstream
// window (invariant 6 at the upstream, not only at the sender). The price
// is one round trip per window instead of a guessed margin.

// admitAt is startLog.admitAt or fixedAdmitAt, as the window counts.
func (w Window) admitAt(l *startLog, now, cost int64, limit float64) (bool, int64) {
	if w.Fixed {
		return l.fixedAdmitAt(now, cost, limit, int64(w.Period), int64(w.Guard))
	}
	return l.admitAt(now, cost, limit, int64(w.Period))
}

// add records cost units started (leased) at t: in flight on a sliding
// window; counted in its aligned window(s) and in flight from the last of
// them on a fixed one.
func (w Window) add(l *startLog, t, cost int64) {
	cost = min(max(cost, 0), MaxCost)
	if w.Fixed {
		l.fly(l.fixedAdd(t, cost, int64(w.Period), int64(w.Guard)), cost)
		return
	}
	l.fly(0, cost)
}

// land ends cost units in flight at t (their answer came back): a sliding
// window logs them at t; a fixed one counts them in t's aligned window
// (and, within Guard of its end, the next) unless they were already
// counted there, at their lease or by the flight that landed.
func (w Window) land(l *startLog, t, cost int64) {
	cost = min(max(cost, 0), MaxCost)
	if !w.Fixed {
		l.land(cost, 0, 0)
		l.add(t, cost, t-int64(w.Period), int64(w.Period)/LogSlots)
		return
	}
	p := int64(w.Period)
	ws := fixedStart(t, p)
	ns := fixedStart(satAdd(t, int64(w.Guard)), p)
	inWs, inNs := l.land(cost, ws, ns)
	l.dropThrough(ws - 1)
	if inWs > 0 {
		l.bump(ws, inWs)
	}
	if ns != ws && inNs > 0 {
		l.bump(ns, inNs)
	}
}

// used is the cost counted against the window at t, starts in flight
// included: for a fixed window the larger count of its aligned window
// and, within Guard of its end, of the next one (a start now counts in
// both).
func (w Window) used(l *startLog, t int64) int64 {
	if !w.Fixed {
		return satAdd(l.since(t-int64(w.Period)), l.flown(math.MaxInt64))
	}
	p := int64(w.Period)
	ws := fixedStart(t, p)
	in := l.fixedCount(ws)
	if ns := fixedStart(satAdd(t, int64(w.Guard)), p); ns != ws {
		in = max(in, l.fixedCount(ns))
	}
	return in
}

// A fixed window's log holds one entry per aligned window that counts
// starts: at is the window's start (Unix ns), cost what it counted. It
// has at most two entries (the current window and, from starts within
// Guard of its end, the next), so it needs no slots.

// fixedStart is the start of the aligned window of period p holding t.
func fixedStart(t, p int64) int64 {
	r := t % p
	if r < 0 {
		r += p
	}
	return t - r
}

// fixedCount is the cost counted in the window starting at ws: the starts
// counted there, plus those still in flight from earlier windows (they
// may arrive in this one).
func (l *startLog) fixedCount(ws int64) int64 {
	in := l.flown(ws)
	for _, e := range l.entries {
		if e.at == ws {
			return satAdd(in, e.cost)
		}
	}
	return in
}

// fixedAdd counts cost units started at t in its aligned window and, when
// t is within guard of that window's end, in the next one; windows before
// t's are dropped. It returns the start of the last window it counted
// them in. A start from a clock behind the log's (another node's) is
// counted in its own window, which is kept in order.
func (l *startLog) fixedAdd(t, cost, period, guard int64) int64 {
	ws := fixedStart(t, period)
	l.dropThrough(ws - 1) // times are integer nanoseconds: before ws
	cost = min(max(cost, 0), MaxCost)
	l.bump(ws, cost)
	if ns := fixedStart(satAdd(t, guard), period); ns != ws {
		l.bump(ns, cost)
		return ns
	}
	return ws
}

// bump adds cost to the entry at ws, inserting it in time order.
func (l *startLog) bump(ws, cost int64) {
	l.sum = satAdd(l.sum, cost)
	i := 0
	for i < len(l.entries) && l.entries[i].at < ws {
		i++
	}
	if i < len(l.entries) && l.entries[i].at == ws {
		l.entries[i].cost = satAdd(l.entries[i].cost, cost)
		return
	}
	l.entries = append(l.entries, start{})
	copy(l.entries[i+1:], l.entries[i:])
	l.entries[i] = start{at: ws, cost: cost}
}

// fixedAdmitAt reports when cost units may start in a fixed window of the
// given limit, period and guard at now: now when they fit in the aligned
// window holding now (and, within guard of its end, in the next one too),
// or else the start of the first window after the full one. An empty
// window admits any cost, as admitAt does.
func (l *startLog) fixedAdmitAt(now, cost int64, limit float64, period, guard int64) (bool, int64) {
	ws := fixedStart(now, period)
	next := now
	check := func(w int64) {
		if in := l.fixedCount(w); in != 0 && float64(in)+float64(cost) > limit+1e-9 {
			at := satAdd(w, period)
			if carried := l.flown(w); carried > 0 && float64(in-carried)+float64(cost) <= limit+1e-9 {
				// Only starts in flight from earlier windows stand in
				// the way: they count in every window until they land.
				at = min(at, satAdd(now, int64(FlightRetry)))
			}
			next = max(next, at)
		}
	}
	check(ws)
	if ns := fixedStart(satAdd(now, guard), period); ns != ws {
		check(ns)
	}
	return next == now, next
}

// LogSlots bounds a window's start log: starts within the same slot of
// Period/LogSlots share one entry. The log is exact while starts are at
// least that far apart (a 20/s window: 2 ms), which paced starts are; a
// dense burst is merged into slots, each counted at its latest start, so
// the log is conservative (a merged unit stays in the window up to one slot
// longer than it started, never shorter). An exact log of every start
// would grow without bound on a tokens-per-minute key; a fixed-slot
// counter would be inexact for the small windows most upstreams declare.
// With 512 slots a window's state is at most ~513 entries (a few KB,
// varint-encoded), and a key refuses at most Period/512 later than an
// exact log would.
const LogSlots = 512

// start is one entry of a start log: the latest start time of the entry
// (Unix ns) and the cost units it holds.
type start struct {
	at   int64
	cost int64
}

// startLog is the record of recent starts that a window (or limit
// discovery) counts. Entries are in time order, at least slot apart.
type startLog struct {
	entries []start
	sum     int64 // the cost of all entries
	// flight holds a window's starts in flight (taken, not yet ended), in
	// order of at: one entry at 0 for a sliding window, one per aligned
	// window they were last counted in for a fixed one. Discovery logs
	// have none.
	flight []start
}

// FlightRetry is how soon a window full only of starts in flight is looked
// at again: one of them may land (its finish be written) at any moment.
const FlightRetry = CapRetry

// maxFlight bounds a fixed window's flight entries (one per aligned window
// with a start still in flight): beyond it the two oldest merge into the
// older, which counts the newer's starts in more windows, never fewer.
const maxFlight = 64

// fly records cost units in flight, last counted in the aligned window at
// at (0 for a sliding window).
func (l *startLog) fly(at, cost int64) {
	if cost <= 0 {
		return
	}
	i := len(l.flight)
	for i > 0 && l.flight[i-1].at > at {
		i--
	}
	if i > 0 && l.flight[i-1].at == at {
		l.flight[i-1].cost = satAdd(l.flight[i-1].cost, cost)
		return
	}
	l.flight = append(l.flight, start{})
	copy(l.flight[i+1:], l.flight[i:])
	l.flight[i] = start{at: at, cost: cost}
	if len(l.flight) > maxFlight {
		l.flight[0].cost = satAdd(l.flight[0].cost, l.flight[1].cost)
		l.flight = append(l.flight[:1], l.flight[2:]...)
	}
}

// land takes cost units out of flight, newest first, and returns how many
// of them were counted from windows before ws and before ns (a unit not
// found in flight, taken before the window existed or before flights were
// kept, counts as before both): those a fixed window must now count in the
// window of the finish, since they may have arrived there. Which start
// ended is not known, only its cost; taking the newest leaves the ones
// still in flight counted from windows no later than their own, so that
// every window still counts each of them (see fixedCount), and counts the
// landed units in every window a start of theirs may have reached.
func (l *startLog) land(cost, ws, ns int64) (beforeWs, beforeNs int64) {
	for cost > 0 && len(l.flight) > 0 {
		last := &l.flight[len(l.flight)-1]
		take := min(last.cost, cost)
		if last.at < ws {
			beforeWs += take
		}
		if last.at < ns {
			beforeNs += take
		}
		cost -= take
		if last.cost -= take; last.cost == 0 {
			l.flight = l.flight[:len(l.flight)-1]
		}
	}
	return beforeWs + cost, beforeNs + cost
}

// flown is the cost in flight counted from windows before ws (every
// flight for a sliding window, with ws = MaxInt64).
func (l *startLog) flown(ws int64) int64 {
	var in int64
	for _, f := range l.flight {
		if f.at >= ws {
			break
		}
		in = satAdd(in, f.cost)
	}
	return in
}

// since returns the cost started after horizon (Unix ns), without
// changing the log.
func (l *startLog) since(horizon int64) int64 {
	in := l.sum
	for _, e := range l.entries {
		if e.at > horizon {
			break
		}
		in -= e.cost
	}
	return in
}

// first returns the time of the oldest entry after horizon.
func (l *startLog) first(horizon int64) (int64, bool) {
	for _, e := range l.entries {
		if e.at > horizon {
			return e.at, true
		}
	}
	return 0, false
}

// add records cost units started at at (Unix ns), dropping entries at or
// before horizon and merging into the last entry when both fall in the
// same slot of width slot.
// A clock that went backwards (another node's) is recorded at the latest
// time seen, which keeps the log ordered and conservative.
func (l *startLog) add(at, cost, horizon, slot int64) {
	l.dropThrough(horizon)
	cost = min(max(cost, 0), MaxCost)
	l.sum = satAdd(l.sum, cost)
	if n := len(l.entries); n > 0 {
		last := &l.entries[n-1]
		// Same slot (aligned to the epoch, so an entry never spans more
		// than one) or a clock behind the last entry: merge.
		if at <= last.at || (slot > 0 && at/slot == last.at/slot) {
			last.at = max(last.at, at)
			last.cost = satAdd(last.cost, cost)
			return
		}
	}
	l.entries = append(l.entries, start{at: at, cost: cost})
}

// admitAt reports when cost units may start in a window of the given
// limit and period at now: now when they fit, or the time enough entries
// have left the window. An empty window admits any cost (as a full bucket
// does), so that a key reconfigured below a queued job's cost does not
// hold that job forever; insert refuses such costs up front.
// Starts in flight count until they land; a window they alone fill is
// looked at again after FlightRetry.
func (l *startLog) admitAt(now int64, cost int64, limit float64, period int64) (bool, int64) {
	horizon := now - period
	in := satAdd(l.since(horizon), l.flown(math.MaxInt64))
	if in == 0 || float64(in)+float64(cost) <= limit+1e-9 {
		return true, now
	}
	for _, e := range l.entries {
		if e.at <= horizon {
			continue
		}
		in -= e.cost
		if in == 0 || float64(in)+float64(cost) <= limit+1e-9 {
			return false, satAdd(e.at, period)
		}
	}
	return false, satAdd(now, int64(FlightRetry)) // only starts in flight left
}

func satAdd(a, b int64) int64 {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// logVersion is the first byte of an encoded log set. Version 1 (before
// starts in flight were kept) is still read: its logs have no flights.
const (
	logVersion1 = 1
	logVersion  = 2
)

// encodeLogs writes the start logs of a key compactly: a version byte,
// then per log its entries and then its flights, each as a count and
// (delta time, cost) pairs as varints. Deltas of paced starts are small,
// so a full 512-entry log of a 20/s key takes about 2 KB and a typical
// one a few hundred bytes.
func encodeLogs(dst []byte, logs []startLog, extra []int64) []byte {
	dst = append(dst, logVersion)
	dst = binary.AppendUvarint(dst, uint64(len(extra)))
	for _, v := range extra {
		dst = binary.AppendVarint(dst, v)
	}
	dst = binary.AppendUvarint(dst, uint64(len(logs)))
	for _, l := range logs {
		dst = appendStarts(dst, l.entries)
		dst = appendStarts(dst, l.flight)
	}
	return dst
}

// appendStarts writes a count and the (delta time, cost) pairs of ss.
func appendStarts(dst []byte, ss []start) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ss)))
	prev := int64(0)
	for _, e := range ss {
		dst = binary.AppendVarint(dst, e.at-prev)
		dst = binary.AppendVarint(dst, e.cost)
		prev = e.at
	}
	return dst
}

var errBadLog = errors.New("admission: corrupt start log")

// decodeLogs reads what encodeLogs wrote.
func decodeLogs(b []byte) (logs []startLog, extra []int64, err error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	version := b[0]
	if version != logVersion && version != logVersion1 {
		return nil, nil, errBadLog
	}
	b = b[1:]
	next := func() (int64, bool) {
		v, n := binary.Varint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	count := func(limit uint64) (int, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > limit {
			return 0, false
		}
		b = b[n:]
		return int(v), true
	}
	ne, ok := count(16)
	if !ok {
		return nil, nil, errBadLog
	}
	extra = make([]int64, ne)
	for i := range extra {
		if extra[i], ok = next(); !ok {
			return nil, nil, errBadLog
		}
	}
	nl, ok := count(64)
	if !ok {
		return nil, nil, errBadLog
	}
	starts := func(limit uint64) ([]start, bool) {
		n, ok := count(limit)
		if !ok {
			return nil, false
		}
		ss := make([]start, n)
		prev := int64(0)
		for k := range ss {
			d, ok1 := next()
			c, ok2 := next()
			if !ok1 || !ok2 || c < 0 {
				return nil, false
			}
			prev = satAdd(prev, d)
			ss[k] = start{at: prev, cost: c}
		}
		return ss, true
	}
	logs = make([]startLog, nl)
	for i := range logs {
		l := &logs[i]
		if l.entries, ok = starts(1 << 20); !ok {
			return nil, nil, errBadLog
		}
		for _, e := range l.entries {
			l.sum = satAdd(l.sum, e.cost)
		}
		if version == logVersion1 {
			continue
		}
		if l.flight, ok = starts(maxFlight); !ok {
			return nil, nil, errBadLog
		}
		if len(l.flight) == 0 {
			l.flight = nil
		}
	}
	return logs, extra, nil
}

// dropThrough forgets the entries at or before t (the log is ordered),
// taking their cost out of the sum, and keeps the rest in place.
func (l *startLog) dropThrough(t int64) {
	drop := 0
	for drop < len(l.entries) && l.entries[drop].at <= t {
		l.sum -= l.entries[drop].cost
		drop++
	}
	if drop > 0 {
		n := copy(l.entries, l.entries[drop:])
		l.entries = l.entries[:n]
	}
}
