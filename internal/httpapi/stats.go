package httpapi

import (
	"net/http"
	"time"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/job"
)

// statsResponse is the answer of GET /v1/stats: the queue's shape per
// region and lane with this node's start and 429 counts of each, from
// which a client (the dashboard) derives rates between two reads.
type statsResponse struct {
	// At is the server's time of the read, so a client's rate is the
	// counters' difference over the server's interval, not its own.
	At      time.Time     `json:"at" doc:"the server's time of this read; divide counter differences by differences of at"`
	Regions []regionStats `json:"regions"`
	// Counters are totals since this process started; divide the
	// difference of two reads by the time between them for a rate.
	Counters nodeCounters `json:"counters" doc:"this node's totals since it started, for rates"`
}

// regionStats is one region's queue.
type regionStats struct {
	Region   string      `json:"region"`
	Lanes    []laneStats `json:"lanes"`
	InFlight int64       `json:"in_flight" doc:"jobs leased now"`
}

// laneStats is one lane of a region.
type laneStats struct {
	Lane               job.Lane         `json:"lane"`
	Depth              map[string]int64 `json:"depth" doc:"jobs by state"`
	OldestReadySeconds float64          `json:"oldest_ready_seconds" doc:"age of the oldest job ready to run; 0 when none"`
	BudgetSeconds      float64          `json:"budget_seconds" doc:"the lane's latency budget"`
	// Starts and RateLimited are the region's writer's totals on this node
	// (engine.Jobs.Counts): real counts of every lease and written 429,
	// the engine's and external workers', not estimates.
	Starts      int64 `json:"starts" doc:"jobs of the lane leased in the region through this node since it started (in-process and external workers)"`
	RateLimited int64 `json:"rate_limited" doc:"attempts of the lane written as rate limited (429) in the region through this node since it started"`
}

// nodeCounters are read from the process's Prometheus registry.
type nodeCounters struct {
	Starts      float64 `json:"starts" doc:"jobs leased by this node's engines (ratelane_leases_total)"`
	RateLimited float64 `json:"rate_limited" doc:"attempts answered 429 (ratelane_attempts_total{class=rate_limited})"`
	Attempts    float64 `json:"attempts" doc:"finished attempts (ratelane_attempts_total)"`
}

func (s *Server) handleGetStats(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	regions, err := s.searchRegions(r, p)
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	out := statsResponse{At: now, Regions: []regionStats{}, Counters: s.counters()}
	for _, region := range regions {
		st, err := s.cfg.Regions[region].Stats(r.Context(), now)
		if err != nil {
			return err
		}
		rs := regionStats{Region: region, InFlight: st.Running, Lanes: []laneStats{}}
		counts := s.jobs[region].Counts()
		for _, lane := range job.Lanes {
			ls := laneStats{Lane: lane, Depth: map[string]int64{}, OldestReadySeconds: st.OldestReady[lane].Seconds(),
				BudgetSeconds: s.cfg.BatchBudget.Seconds(), Starts: counts.Starts[lane], RateLimited: counts.RateLimited[lane]}
			if lane == job.LaneInteractive {
				ls.BudgetSeconds = s.cfg.InteractiveBudget.Seconds()
			}
			for _, state := range job.States {
				ls.Depth[string(state)] = st.Counts[lane][state]
			}
			rs.Lanes = append(rs.Lanes, ls)
		}
		out.Regions = append(out.Regions, rs)
	}
	return writeJSON(w, http.StatusOK, out)
}

// counters sums the start and attempt counters of the registry, when one
// is configured; zeros otherwise.
func (s *Server) counters() nodeCounters {
	var c nodeCounters
	if s.cfg.Gatherer == nil {
		return c
	}
	mfs, err := s.cfg.Gatherer.Gather()
	if err != nil {
		s.log.Warn("gather metrics for stats", "err", err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "ratelane_leases_total":
				c.Starts += m.GetCounter().GetValue()
			case "ratelane_attempts_total":
				v := m.GetCounter().GetValue()
				c.Attempts += v
				for _, l := range m.GetLabel() {
					if l.GetName() == "class" && l.GetValue() == string(job.ClassRateLimited) {
						c.RateLimited += v
					}
				}
			}
		}
	}
	return c
}
