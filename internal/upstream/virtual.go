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
	// transit is the sender's side of a request's trip (see SetTransit),
	// drawn from its own generator so that setting it leaves the route's
	// latency and fault draws as they were.
	transit     Latency
	transitRand *lockedRand
}

// SetTransit makes every request sent to v take a delay drawn from l
// (Fixed plus a uniform [0, Jitter)) between the sender's decision to
// send it and its arrival at the route: what a real sender spends
// between admitting a start and the upstream counting it (committing the
// lease, starting the handler, signing, sending, the network), which
// varies by tens of ms on a loaded machine. The zero Latency (the
// default) means requests arrive the instant they are sent. Draws are
// seeded from NewVirtual's seed.
func (v *Virtual) SetTransit(l Latency) error {
	if l.Fixed < 0 || l.Jitter < 0 {
		return fmt.Errorf("upstream: transit %+v: want durations >= 0", l)
	}
	v.transit = l
	return nil
}

// Arrival returns when a request sent at sent arrives at the route: sent
// plus a transit drawn as SetTransit says. Requests sent in order may
// arrive out of order; the caller answers each with Answer at its
// arrival, in arrival order.
func (v *Virtual) Arrival(sent time.Time) time.Time {
	d := v.transit.Fixed
	if j := v.transit.Jitter; j > 0 {
		d += time.Duration(v.transitRand.Int64N(int64(j)))
	}
	return sent.Add(d)
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
	return &Virtual{s: s, rt: newRoute(rc, nil, epoch, 1<<20, 600), transitRand: newLockedRand(seed ^ 0x5eed7a417)}, nil
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
