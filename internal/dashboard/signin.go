package dashboard

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// maxTrackedAddrs bounds the client addresses the sign-in limiter keeps a
// bucket for. Past it, full buckets (the same as none) are dropped; when
// every bucket is in use, the untracked addresses share one overflow
// bucket, so a flood from many addresses slows their sign-ins down without
// growing memory.
const maxTrackedAddrs = 10000

// addrLimiter is a token bucket per client address for sign-in attempts.
type addrLimiter struct {
	rate  float64 // tokens per second
	burst float64

	mu       sync.Mutex
	buckets  map[string]*bucket
	overflow bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newAddrLimiter(perSecond float64, burst int) *addrLimiter {
	return &addrLimiter{rate: perSecond, burst: float64(burst), buckets: map[string]*bucket{},
		overflow: bucket{tokens: float64(burst)}}
}

// allow takes one attempt for addr at now; when none is left it returns
// how long until one is.
func (l *addrLimiter) allow(addr string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[addr]
	if b == nil {
		if len(l.buckets) >= maxTrackedAddrs {
			for a, old := range l.buckets {
				if l.refill(old, now) >= l.burst {
					delete(l.buckets, a)
				}
			}
		}
		if len(l.buckets) >= maxTrackedAddrs {
			b = &l.overflow
		} else {
			b = &bucket{tokens: l.burst, at: now}
			l.buckets[addr] = b
		}
	}
	b.tokens, b.at = l.refill(b, now), now
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
}

// refill returns b's tokens at now.
func (l *addrLimiter) refill(b *bucket, now time.Time) float64 {
	if b.at.IsZero() {
		return min(l.burst, b.tokens)
	}
	return min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
}

// clientAddr is the address a sign-in is limited by: the connection's
// peer IP. Forwarding headers are not trusted (anyone can send them); a
// deployment behind a proxy therefore shares one bucket per proxy, which
// errs towards refusing rather than towards unlimited guessing.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
