package upstream

import (
	"fmt"
	"net/http"
	"time"
)

// Virtual answers requests to one route in virtual time, without HTTP: the
// same limiter, scheduled changes, faults, latency draw and headers as a
// [Server] route, decided at the instant the caller names. It lets a test
// run a pacing strategy against a receiver for seconds of simulated time
// in milliseconds, with no scheduler noise, so that convergence can be
// compared exactly; the HTTP server remains what benchmarks measure.
// Signatures are not checked. A Virtual is not safe for concurrent use.
type Virtual struct {
	s  *Server
	rt *route
	// holds are the answer times of admitted requests that hold a
	// concurrency slot (MaxConcurrent): each slot is freed when its
	// answer arrives, as the server frees it when its handler returns.
	holds []time.Time
}

// NewVirtual returns rc answered in virtual time, its schedule of limit
// changes running from epoch; seed seeds its latency and fault draws.
func NewVirtual(rc RouteConfig, epoch time.Time, seed uint64) (*Virtual, error) {
	rc = rc.WithDefaults()
	rc.Secrets = nil
	if err := rc.validate(); err != nil {
		return nil, fmt.Errorf("upstream: virtual route: %w", err)
	}
	s := &Server{cfg: Config{}.WithDefaults(), rand: newLockedRand(seed)}
	return &Virtual{s: s, rt: newRoute(rc, nil, epoch, 1<<20, 600)}, nil
}

// Answer decides a request arriving at now and returns its status, its
// headers (Date on the route's skewed clock at answer time, rate-limit
// headers and Retry-After as the server writes them) and the latency after
// which the answer arrives. A refusal is answered at once, as the server
// does. A request admitted on a route with MaxConcurrent holds its slot
// until its answer arrives: calls must come in time order.
func (v *Virtual) Answer(now time.Time) (status int, h http.Header, latency time.Duration) {
	kept := v.holds[:0]
	for _, at := range v.holds {
		if at.After(now) {
			kept = append(kept, at)
		} else {
			v.rt.release()
		}
	}
	v.holds = kept
	vd := v.rt.decide(v.s, now, incoming{endpoint: endpointHook})
	if vd.held {
		v.holds = append(v.holds, now.Add(vd.delay))
	}
	h = http.Header{}
	h.Set("Date", now.Add(vd.delay).Add(vd.cfg.DateSkew).UTC().Format(http.TimeFormat))
	writeLimitHeaders(h, headerStyle(vd.cfg.Headers, hookDialect{}), vd.dec, now)
	if vd.step == stepOverLimit {
		writeRetryAfter(h, vd.cfg.OverLimit, vd.dec.retryAfter, now.Add(vd.cfg.DateSkew))
	}
	return vd.status, h, vd.delay
}
