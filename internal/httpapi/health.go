package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/store"
)

// healthResponse is the answer of /healthz and /readyz.
type healthResponse struct {
	Status  string            `json:"status"`
	Version string            `json:"version,omitempty"`
	Regions map[string]string `json:"regions,omitempty" doc:"per region: ok, or why its store did not answer"`
}

// handleGetHealth says the process is up; it touches no store, so a slow
// database never gets the process restarted.
func (s *Server) handleGetHealth(w http.ResponseWriter, _ *http.Request, _ auth.Principal) error {
	return writeJSON(w, http.StatusOK, healthResponse{Status: "ok", Version: s.cfg.Version})
}

// readyProbeKey is looked up to check a store that has no Ready method
// answers; it need not exist.
const readyProbeKey = "ratelane:readyz"

// Readiness bounds: one probe of every region takes at most readyTimeout,
// and its answer is reused for readyCacheFor, so a load balancer (or an
// attacker) polling /readyz many times a second costs the stores at most
// one probe each per period.
const (
	readyTimeout  = 2 * time.Second
	readyCacheFor = time.Second
)

// readier is what a store offers for a real read of its data (the SQLite
// and PostgreSQL drivers both do): not just a connection that answers, but
// the region's tables read from disk.
type readier interface {
	Ready(ctx context.Context) error
}

// readyCache holds the last readiness answer. Its mutex is held during a
// probe, so concurrent requests wait for one probe rather than each
// starting their own.
type readyCache struct {
	mu  sync.Mutex
	at  time.Time // of the last probe, by the monotonic wall clock
	out healthResponse
}

// readyProblem is the 503 answer: a problem+json body that also names each
// region's state.
type readyProblem struct {
	Problem
	Regions map[string]string `json:"regions"`
}

// handleGetReady says whether every region's store can be read, within
// readyTimeout, answering from a cache for readyCacheFor. A store that
// cannot be read answers 503 problem+json; the cause is logged, not shown
// (the route is public).
func (s *Server) handleGetReady(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	out := s.readiness(r.Context())
	if out.Status == "ready" {
		return writeJSON(w, http.StatusOK, out)
	}
	var bad []string
	for _, region := range s.regions {
		if out.Regions[region] != "ok" {
			bad = append(bad, region)
		}
	}
	p := readyProblem{Problem: Problem{Type: problemBase + "unavailable", Title: titles["unavailable"], Status: http.StatusServiceUnavailable,
		Detail: fmt.Sprintf("the store of region %s cannot be read; see the server log, and docs/operations.md for what to do",
			strings.Join(bad, ", ")), Instance: r.URL.Path}, Regions: out.Regions}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	return json.NewEncoder(w).Encode(p)
}

// readiness returns the cached answer, or probes every region when it is
// older than readyCacheFor.
func (s *Server) readiness(ctx context.Context) healthResponse {
	c := &s.ready
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < readyCacheFor {
		return c.out
	}
	// The probe outlives a cancelled request: its answer serves the others.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
	defer cancel()
	out := healthResponse{Status: "ready", Regions: map[string]string{}}
	for _, region := range s.regions {
		err := probeStore(ctx, s.cfg.Regions[region])
		if err == nil {
			out.Regions[region] = "ok"
			continue
		}
		s.log.Error("region store cannot be read", "region", region, "err", err)
		out.Status, out.Regions[region] = "not ready", "store cannot be read"
	}
	c.at, c.out = time.Now(), out
	return out
}

func probeStore(ctx context.Context, st store.Store) error {
	if rd, ok := st.(readier); ok {
		return rd.Ready(ctx)
	}
	_, err := st.GetLimit(ctx, readyProbeKey)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}

// handleGetMetrics serves the Prometheus exposition of Config.Gatherer.
func (s *Server) handleGetMetrics(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	if s.cfg.Gatherer == nil {
		return problemf(http.StatusNotFound, "not-found", "metrics are not enabled on this server")
	}
	promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}
