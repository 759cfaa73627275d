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
	// both never lets the upstream see more than Limit in either. A
	// sliding window is guarded by lengthening its Period instead (see
	// [JitterGuard]).
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

// admitAt is startLog.admitAt or fixedAdmitAt, as the window counts.
func (w Window) admitAt(l *startLog, now, cost int64, limit float64) (bool, int64) {
	if w.Fixed {
		return l.fixedAdmitAt(now, cost, limit, int64(w.Period), int64(w.Guard))
	}
	return l.admitAt(now, cost, limit, int64(w.Period))
}

// add records cost units started at t in the window's log.
func (w Window) add(l *startLog, t, cost int64) {
	if w.Fixed {
		l.fixedAdd(t, cost, int64(w.Period), int64(w.Guard))
		return
	}
	l.add(t, cost, t-int64(w.Period), int64(w.Period)/LogSlots)
}

// used is the cost counted against the window at t: for a fixed window
// the larger count of its aligned window and, within Guard of its end,
// of the next one (a start now counts in both).
func (w Window) used(l *startLog, t int64) int64 {
	if !w.Fixed {
		return l.since(t - int64(w.Period))
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

// fixedCount is the cost counted in the window starting at ws.
func (l *startLog) fixedCount(ws int64) int64 {
	for _, e := range l.entries {
		if e.at == ws {
			return e.cost
		}
	}
	return 0
}

// fixedAdd counts cost units started at t in its aligned window and, when
// t is within guard of that window's end, in the next one; windows before
// t's are dropped. A start from a clock behind the log's (another node's)
// is counted in its own window, which is kept in order.
func (l *startLog) fixedAdd(t, cost, period, guard int64) {
	ws := fixedStart(t, period)
	l.dropThrough(ws - 1) // times are integer nanoseconds: before ws
	cost = min(max(cost, 0), MaxCost)
	l.bump(ws, cost)
	if ns := fixedStart(satAdd(t, guard), period); ns != ws {
		l.bump(ns, cost)
	}
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
			next = max(next, satAdd(w, period))
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
func (l *startLog) admitAt(now int64, cost int64, limit float64, period int64) (bool, int64) {
	horizon := now - period
	in := l.since(horizon)
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
	return false, now // unreachable: the loop empties the window
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

// logVersion is the first byte of an encoded log set.
const logVersion = 1

// encodeLogs writes the start logs of a key compactly: a version byte,
// then per log its entry count and (delta time, cost) pairs as varints.
// Deltas of paced starts are small, so a full 512-entry log of a 20/s key
// takes about 2 KB and a typical one a few hundred bytes.
func encodeLogs(dst []byte, logs []startLog, extra []int64) []byte {
	dst = append(dst, logVersion)
	dst = binary.AppendUvarint(dst, uint64(len(extra)))
	for _, v := range extra {
		dst = binary.AppendVarint(dst, v)
	}
	dst = binary.AppendUvarint(dst, uint64(len(logs)))
	for _, l := range logs {
		dst = binary.AppendUvarint(dst, uint64(len(l.entries)))
		prev := int64(0)
		for _, e := range l.entries {
			dst = binary.AppendVarint(dst, e.at-prev)
			dst = binary.AppendVarint(dst, e.cost)
			prev = e.at
		}
	}
	return dst
}

var errBadLog = errors.New("admission: corrupt start log")

// decodeLogs reads what encodeLogs wrote.
func decodeLogs(b []byte) (logs []startLog, extra []int64, err error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	if b[0] != logVersion {
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
	logs = make([]startLog, nl)
	for i := range logs {
		n, ok := count(1 << 20)
		if !ok {
			return nil, nil, errBadLog
		}
		l := &logs[i]
		l.entries = make([]start, n)
		prev := int64(0)
		for k := range l.entries {
			d, ok1 := next()
			c, ok2 := next()
			if !ok1 || !ok2 || c < 0 {
				return nil, nil, errBadLog
			}
			prev = satAdd(prev, d)
			l.entries[k] = start{at: prev, cost: c}
			l.sum = satAdd(l.sum, c)
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
