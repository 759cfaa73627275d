package httpapi

import (
	"context"
	"errors"
	"net/http"
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

// readyProbeKey is looked up to check a store answers; it need not exist.
const readyProbeKey = "ratelane:readyz"

// handleGetReady says whether every region's store answers a cheap query
// within 2 s.
func (s *Server) handleGetReady(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	out := healthResponse{Status: "ready", Regions: map[string]string{}}
	for _, region := range s.regions {
		_, err := s.cfg.Regions[region].GetLimit(ctx, readyProbeKey)
		if err == nil || errors.Is(err, store.ErrNotFound) {
			out.Regions[region] = "ok"
			continue
		}
		s.log.Warn("region store not ready", "region", region, "err", err)
		out.Status, out.Regions[region] = "not ready", "store did not answer"
	}
	if out.Status != "ready" {
		return writeJSON(w, http.StatusServiceUnavailable, out)
	}
	return writeJSON(w, http.StatusOK, out)
}

// handleGetMetrics serves the Prometheus exposition of Config.Gatherer.
func (s *Server) handleGetMetrics(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	if s.cfg.Gatherer == nil {
		return problemf(http.StatusNotFound, "not-found", "metrics are not enabled on this server")
	}
	promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	return nil
}
