package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
)

// keyLimiter paces each API key's own requests with a token bucket in
// memory, one per key id. It reuses admission's GCRA bucket (the same
// arithmetic that paces jobs), so there is one token-bucket implementation.
// Limits are per process: with N nodes a key may make N times the rate,
// which is what a per-node guard against a runaway client needs.
type keyLimiter struct {
	rate, burst float64
	mu          sync.Mutex
	keys        map[string]*admission.State
}

func newKeyLimiter(rate float64, burst int) *keyLimiter {
	if rate < 0 {
		return nil
	}
	return &keyLimiter{rate: rate, burst: float64(burst), keys: map[string]*admission.State{}}
}

// allow takes one request from the key's bucket at now. It returns whether
// the request may proceed, the whole requests left and how long until the
// bucket admits the next one (ok false) or is full again (ok true).
func (l *keyLimiter) allow(id string, now time.Time) (ok bool, remaining int, reset time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.keys[id]
	if st == nil {
		s := admission.NewState(admission.Config{Name: id, Rate: l.rate, Burst: l.burst})
		st = &s
		l.keys[id] = st
	}
	ok, next := st.Check(now, 1)
	if ok {
		st.Take(now, 1)
		st.End(now, 1) // Take counts a lease in flight; a request is not one
	}
	tokens := st.Tokens(now)
	if !ok {
		return false, 0, next.Sub(now)
	}
	return true, int(math.Floor(tokens)), time.Duration((l.burst - tokens) / l.rate * float64(time.Second))
}

// setHeaders writes the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers) so clients can slow down before
// they are refused.
func (l *keyLimiter) setHeaders(h http.Header, remaining int, reset time.Duration) {
	window := int64(math.Ceil(l.burst / l.rate))
	h.Set("RateLimit-Policy", fmt.Sprintf(`"api-key";q=%d;w=%d`, int64(l.burst), max(window, 1)))
	h.Set("RateLimit", fmt.Sprintf(`"api-key";r=%d;t=%s`, remaining, retryAfterSeconds(reset.Seconds())))
}

// check applies the limit to one request of the key, setting the RateLimit
// headers, and returns a 429 problem when the key is over its rate.
func (l *keyLimiter) check(h http.Header, id string, now time.Time) error {
	if l == nil {
		return nil
	}
	ok, remaining, reset := l.allow(id, now)
	l.setHeaders(h, remaining, reset)
	if ok {
		return nil
	}
	secs := retryAfterSeconds(reset.Seconds())
	return problemf(http.StatusTooManyRequests, "too-many-requests",
		"this API key may make %s requests per second (bursts of %d); retry after %s s",
		strconv.FormatFloat(l.rate, 'f', -1, 64), int64(l.burst), secs).withHeader("Retry-After", secs)
}
