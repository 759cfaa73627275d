package upstream

import (
	"math"
	"time"
)

// decision is a limiter's answer to one request and its state just after.
// Limiters are pure: they take the time as a parameter and are not safe for
// concurrent use (a route's mutex guards them).
type decision struct {
	allowed bool
	// limited is false for AlgorithmNone: no limiter, no headers.
	limited bool
	// limit is the quota: the bucket's Burst or the window's Limit.
	limit int
	// remaining is the whole requests available now.
	remaining int
	// retryAfter is, when !allowed, the time until one request would be admitted.
	retryAfter time.Duration
	// reset is the time until the limiter is back to its full quota.
	reset time.Duration
	// window is the policy window: Burst/Rate for a bucket, Window for a window.
	window time.Duration
	// rate is a bucket's refill rate in requests per second; 0 for a window.
	rate float64
}

// limiter is one route's admission rule.
type limiter interface {
	// take answers a request at now, consuming quota when it is admitted.
	take(now time.Time) decision
}

// newLimiter builds the limiter for rc (after WithDefaults), carrying state
// over from prev when it is of the same kind, so that a limit change
// mid-run neither refills a drained bucket nor forgets recent requests.
func newLimiter(rc RouteConfig, prev limiter, now time.Time) limiter {
	switch rc.Algorithm {
	case AlgorithmTokenBucket:
		b := &tokenBucket{rate: rc.Rate, burst: rc.Burst, tokens: float64(rc.Burst), last: now}
		if old, ok := prev.(*tokenBucket); ok {
			old.refill(now)
			b.tokens = min(old.tokens, float64(rc.Burst))
		}
		return b
	case AlgorithmSlidingWindow:
		w := newSlidingWindow(rc.Window, rc.Limit)
		if old, ok := prev.(*slidingWindow); ok {
			old.carryInto(w, now)
		}
		return w
	case AlgorithmFixedWindow:
		f := newFixedWindow(rc.Window, rc.Limit)
		if old, ok := prev.(*fixedWindow); ok && old.window == rc.Window {
			f.start, f.count = old.start, old.count
		}
		return f
	case AlgorithmSlidingCounter:
		c := newSlidingCounter(rc.Window, rc.Limit)
		if old, ok := prev.(*slidingCounter); ok && old.window == rc.Window {
			c.start, c.prev, c.cur = old.start, old.prev, old.cur
		}
		return c
	default:
		return unlimited{}
	}
}

// unlimited admits everything.
type unlimited struct{}

func (unlimited) take(time.Time) decision { return decision{allowed: true} }

// tokenBucket refills rate tokens per second up to burst.
type tokenBucket struct {
	rate   float64
	burst  int
	tokens float64
	last   time.Time
}

// epsilon absorbs float rounding, so 10 refills of 0.1 make one token.
const epsilon = 1e-9

func (b *tokenBucket) refill(now time.Time) {
	if !now.After(b.last) {
		return // a clock that steps back refills nothing
	}
	b.tokens = min(float64(b.burst), b.tokens+b.rate*now.Sub(b.last).Seconds())
	b.last = now
}

func (b *tokenBucket) take(now time.Time) decision {
	b.refill(now)
	d := decision{limited: true, limit: b.burst, window: seconds(float64(b.burst) / b.rate), rate: b.rate}
	if b.tokens+epsilon >= 1 {
		b.tokens = max(0, b.tokens-1)
		d.allowed = true
	} else {
		d.retryAfter = seconds((1 - b.tokens) / b.rate)
	}
	d.remaining = int(math.Floor(b.tokens + epsilon))
	d.reset = seconds((float64(b.burst) - b.tokens) / b.rate)
	return d
}

// seconds converts float seconds to a Duration, rounding up to a nanosecond.
func seconds(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(s * float64(time.Second)))
}

// slidingWindow is an exact sliding log: a ring of the admission times of
// the last limit admitted requests.
type slidingWindow struct {
	window time.Duration
	times  []time.Time // ring of capacity limit
	head   int         // index of the oldest entry
	n      int         // entries in use
}

func newSlidingWindow(window time.Duration, limit int) *slidingWindow {
	return &slidingWindow{window: window, times: make([]time.Time, limit)}
}

// expire drops entries that left the window: admitted at or before now-window.
func (w *slidingWindow) expire(now time.Time) {
	for w.n > 0 && !w.times[w.head].Add(w.window).After(now) {
		w.head = (w.head + 1) % len(w.times)
		w.n--
	}
}

func (w *slidingWindow) push(t time.Time) {
	w.times[(w.head+w.n)%len(w.times)] = t
	w.n++
}

func (w *slidingWindow) newest() time.Time {
	return w.times[(w.head+w.n-1)%len(w.times)]
}

func (w *slidingWindow) take(now time.Time) decision {
	w.expire(now)
	limit := len(w.times)
	d := decision{limited: true, limit: limit, window: w.window}
	if w.n < limit {
		w.push(now)
		d.allowed = true
	} else {
		d.retryAfter = w.times[w.head].Add(w.window).Sub(now)
	}
	d.remaining = limit - w.n
	if w.n > 0 {
		d.reset = w.newest().Add(w.window).Sub(now)
	}
	return d
}

// carryInto copies the newest entries that still count at now into dst.
func (w *slidingWindow) carryInto(dst *slidingWindow, now time.Time) {
	w.expire(now)
	skip := max(0, w.n-len(dst.times))
	for i := skip; i < w.n; i++ {
		t := w.times[(w.head+i)%len(w.times)]
		if t.Add(dst.window).After(now) {
			dst.push(t)
		}
	}
}

// fixedWindow counts requests per aligned window [k*W, (k+1)*W) of the
// Unix epoch, the way a Redis INCR + EXPIRE limiter or an hourly quota
// that "resets at" a clock time counts (GitHub's x-ratelimit-reset). It
// admits up to limit in each window, so two windows' worth may arrive
// within a moment across a boundary: stricter readings of "N per W" are
// the sliding log and the sliding counter.
type fixedWindow struct {
	window time.Duration
	limit  int
	start  time.Time // start of the current window
	count  int
}

func newFixedWindow(window time.Duration, limit int) *fixedWindow {
	return &fixedWindow{window: window, limit: limit}
}

// windowStart is the start of the aligned window holding now.
func windowStart(now time.Time, w time.Duration) time.Time {
	return time.Unix(0, now.UnixNano()-now.UnixNano()%int64(w)).In(now.Location())
}

func (f *fixedWindow) roll(now time.Time) {
	if s := windowStart(now, f.window); !s.Equal(f.start) {
		if s.After(f.start) {
			f.count = 0
		}
		f.start = s
	}
}

func (f *fixedWindow) take(now time.Time) decision {
	f.roll(now)
	d := decision{limited: true, limit: f.limit, window: f.window, reset: f.start.Add(f.window).Sub(now)}
	if f.count < f.limit {
		f.count++
		d.allowed = true
	} else {
		d.retryAfter = d.reset
	}
	d.remaining = f.limit - f.count
	return d
}

// slidingCounter is the two-window "sliding window counter" many edge
// proxies use (Cloudflare's, and most Redis recipes): the previous aligned
// window's count, weighted by how much of it still overlaps the window
// ending now, plus the current window's count. It admits a request when
// that estimate is below limit. It assumes the previous window's requests
// were spread evenly, so a sender that bunched them at the end of the
// previous window is admitted more than limit in some sliding window, and
// one that bunched them at its start less.
type slidingCounter struct {
	window    time.Duration
	limit     int
	start     time.Time // start of the current aligned window
	prev, cur int
}

func newSlidingCounter(window time.Duration, limit int) *slidingCounter {
	return &slidingCounter{window: window, limit: limit}
}

func (c *slidingCounter) roll(now time.Time) {
	s := windowStart(now, c.window)
	switch {
	case !s.After(c.start):
	case s.Sub(c.start) == c.window:
		c.prev, c.cur, c.start = c.cur, 0, s
	default:
		c.prev, c.cur, c.start = 0, 0, s
	}
}

// estimate is the weighted count at now (after roll).
func (c *slidingCounter) estimate(now time.Time) float64 {
	elapsed := float64(now.Sub(c.start)) / float64(c.window)
	return float64(c.prev)*(1-elapsed) + float64(c.cur)
}

func (c *slidingCounter) take(now time.Time) decision {
	c.roll(now)
	d := decision{limited: true, limit: c.limit, window: c.window}
	if c.estimate(now)+1 <= float64(c.limit)+epsilon {
		c.cur++
		d.allowed = true
	} else {
		d.retryAfter = c.wait(now)
	}
	d.remaining = max(0, int(math.Floor(float64(c.limit)-c.estimate(now)+epsilon)))
	// Full again once both windows' weight is gone: the end of the next window
	// when this one has requests, else the end of this one.
	end := c.start.Add(c.window)
	if c.cur > 0 {
		end = end.Add(c.window)
	}
	d.reset = end.Sub(now)
	return d
}

// wait is the time from now until one request would be admitted.
func (c *slidingCounter) wait(now time.Time) time.Duration {
	room := float64(c.limit - 1)
	W := float64(c.window)
	e := float64(now.Sub(c.start))
	if float64(c.cur) <= room && c.prev > 0 {
		// Within this window: prev*(1-(e+x)/W) + cur <= room.
		x := W*(1-(room-float64(c.cur))/float64(c.prev)) - e
		if e+x < W {
			return time.Duration(math.Ceil(math.Max(x, 0)))
		}
	}
	// In the next window the current count becomes the previous one:
	// cur*(1-y/W) <= room.
	y := 0.0
	if c.cur > 0 {
		y = math.Max(0, W*(1-room/float64(c.cur)))
	}
	return time.Duration(math.Ceil(W - e + y))
}
