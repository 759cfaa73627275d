package upstream

import (
	"maps"
	"time"
)

// Report is a snapshot of every route's counters, as returned by
// [Server.Stats] and served as JSON at /_stats.
type Report struct {
	// Now is when the snapshot was taken.
	Now time.Time `json:"now"`
	// Routes maps route names to their counters.
	Routes map[string]RouteReport `json:"routes"`
}

// RouteReport holds one route's counters. The named counters count the
// step that answered (see the package documentation); Accepted counts every
// 2xx answer, whichever step produced it, because that is what a client
// sees as delivered. Counts are taken when a request is decided, before any
// latency.
type RouteReport struct {
	// Config is the route's current configuration (secrets omitted).
	Config RouteConfig `json:"config"`
	// Attempts counts every request to the route.
	Attempts int64 `json:"attempts"`
	// Accepted counts 2xx answers.
	Accepted int64 `json:"accepted"`
	// Duplicates counts accepted requests whose webhook-id had already
	// been accepted: each is a delivery the receiver saw twice.
	Duplicates int64 `json:"duplicates"`
	// UniqueIDs counts distinct accepted webhook-ids.
	UniqueIDs int64 `json:"unique_ids"`
	// IDsTruncated is set once Config.MaxTrackedIDs ids are remembered;
	// later new ids are neither remembered nor counted as duplicates.
	IDsTruncated bool `json:"ids_truncated,omitzero"`
	// RateLimited counts over-limit answers (429, 503 or 529).
	RateLimited int64 `json:"rate_limited"`
	// Transient counts injected 500, 502 and 504 answers.
	Transient int64 `json:"transient"`
	// BadSignatures counts 401s for a missing or invalid webhook signature.
	BadSignatures int64 `json:"bad_signatures"`
	// Invalid counts 400s for malformed LLM requests.
	Invalid int64 `json:"invalid"`
	// QuotaExhausted counts answers after RouteConfig.Quota ran out.
	QuotaExhausted int64 `json:"quota_exhausted"`
	// Scripted counts answers taken from the script queue.
	Scripted int64 `json:"scripted"`
	// Overridden counts RouteConfig.StatusOverride answers.
	Overridden int64 `json:"overridden"`
	// StatusCounts counts answers by status code.
	StatusCounts map[int]int64 `json:"status_counts"`
	// FirstAccepted and LastAccepted bound the accepted requests in time.
	FirstAccepted time.Time `json:"first_accepted,omitzero"`
	LastAccepted  time.Time `json:"last_accepted,omitzero"`
	// AchievedRate is (Accepted-1) / (LastAccepted-FirstAccepted) in
	// requests per second, or 0 with fewer than two accepted requests.
	AchievedRate float64 `json:"achieved_rate"`
	// Timeline holds, oldest first, the recent seconds that saw an accepted
	// or over-limit answer (at most Config.TimelineSeconds of them).
	Timeline []TimelineSecond `json:"timeline"`
}

// TimelineSecond counts one wall-clock second's accepted and over-limit
// answers, so a plot shows how closely a client tracks the limit.
type TimelineSecond struct {
	Unix        int64 `json:"unix"`
	Accepted    int64 `json:"accepted"`
	RateLimited int64 `json:"rate_limited"`
}

// routeStats accumulates a route's counters; the route's mutex guards it.
type routeStats struct {
	r        RouteReport // counters only; Config and Timeline are filled in by snapshot
	seen     map[string]struct{}
	maxIDs   int
	timeline []TimelineSecond // ring indexed by Unix modulo its length
}

func newRouteStats(maxIDs, seconds int) *routeStats {
	return &routeStats{
		r:        RouteReport{StatusCounts: map[int]int64{}},
		seen:     map[string]struct{}{},
		maxIDs:   maxIDs,
		timeline: make([]TimelineSecond, seconds),
	}
}

// answered records an answer's status and, for 2xx, its acceptance.
func (s *routeStats) answered(now time.Time, status int, webhookID string) {
	s.r.StatusCounts[status]++
	if status < 200 || status > 299 {
		return
	}
	s.r.Accepted++
	if s.r.FirstAccepted.IsZero() {
		s.r.FirstAccepted = now
	}
	s.r.LastAccepted = now
	s.second(now).Accepted++
	s.remember(webhookID)
}

// remember records an accepted webhook-id, counting it when seen before.
func (s *routeStats) remember(id string) {
	if id == "" {
		return
	}
	if _, dup := s.seen[id]; dup {
		s.r.Duplicates++
		return
	}
	if len(s.seen) >= s.maxIDs {
		s.r.IDsTruncated = true
		return
	}
	s.seen[id] = struct{}{}
	s.r.UniqueIDs++
}

// rateLimited records an over-limit answer on the timeline.
func (s *routeStats) rateLimited(now time.Time) {
	s.r.RateLimited++
	s.second(now).RateLimited++
}

// second returns the timeline slot of now, clearing it if it held an
// older second.
func (s *routeStats) second(now time.Time) *TimelineSecond {
	unix := now.Unix()
	slot := &s.timeline[int(uint64(unix)%uint64(len(s.timeline)))]
	if slot.Unix != unix {
		*slot = TimelineSecond{Unix: unix}
	}
	return slot
}

// snapshot copies the counters, with the timeline seconds still within
// reach of now in ascending order.
func (s *routeStats) snapshot(now time.Time, cfg RouteConfig) RouteReport {
	r := s.r
	r.Config = cfg
	r.StatusCounts = maps.Clone(s.r.StatusCounts)
	if span := r.LastAccepted.Sub(r.FirstAccepted).Seconds(); r.Accepted > 1 && span > 0 {
		r.AchievedRate = float64(r.Accepted-1) / span
	}
	r.Timeline = []TimelineSecond{}
	n := int64(len(s.timeline))
	for unix := now.Unix() - n + 1; unix <= now.Unix(); unix++ {
		slot := s.timeline[int(uint64(unix)%uint64(n))]
		if slot.Unix == unix && (slot.Accepted > 0 || slot.RateLimited > 0) {
			r.Timeline = append(r.Timeline, slot)
		}
	}
	return r
}

// MaxInWindow returns the largest number of times in any half-open window
// (t-w, t] of length w: what an upstream counting a sliding window of w
// would have seen. times must be in ascending order (as [Server.Arrivals]
// returns them). A benchmark compares it with a destination's limit to
// find overruns.
func MaxInWindow(times []time.Time, w time.Duration) int {
	best, lo := 0, 0
	for hi, t := range times {
		for !times[lo].Add(w).After(t) {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}
