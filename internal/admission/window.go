package admission

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Window is a sliding-window shape: at most Limit cost units start in any
// interval of length Period. It is the strictest reading of "20 per
// second", and how many upstreams count; a token bucket of the same rate
// admits its burst on top of the rate in any such interval.
type Window struct {
	// Limit is the cost units that may start in any window, at least 1.
	Limit float64
	// Period is the window's length, from 1 ms to 24 h.
	Period time.Duration
}

type windowJSON struct {
	Limit  float64 `json:"limit"`
	Period string  `json:"period"`
}

// MarshalJSON writes the period as a Go duration string ("1s", "1m0s").
func (w Window) MarshalJSON() ([]byte, error) {
	return json.Marshal(windowJSON{Limit: w.Limit, Period: w.Period.String()})
}

// UnmarshalJSON reads {"limit": N, "period": "1s"}; the period may also be
// a number of seconds.
func (w *Window) UnmarshalJSON(b []byte) error {
	var raw struct {
		Limit  float64         `json:"limit"`
		Period json.RawMessage `json:"period"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	w.Limit = raw.Limit
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
	}
	return nil
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
	drop := 0
	for drop < len(l.entries) && l.entries[drop].at <= horizon {
		l.sum -= l.entries[drop].cost
		drop++
	}
	if drop > 0 {
		n := copy(l.entries, l.entries[drop:])
		l.entries = l.entries[:n]
	}
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
