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
	d := decision{limited: true, limit: b.burst, window: seconds(float64(b.burst) / b.rate)}
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
