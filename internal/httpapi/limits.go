package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// limitRequest is the body of PUT /v1/limits/{key}. The rate is either
// per_second, or rate events per period; shape says whether it is a token
// bucket (the default, as before shapes existed) or a window, window
// whether that window slides (the default) or is fixed to the clock, and
// windows adds further windows to either.
type limitRequest struct {
	Shape       string      `json:"shape,omitempty" enum:"bucket,window" doc:"how rate is counted: bucket (default) is a token bucket of rate with burst; window is at most rate starts per period, counted as window says"`
	Window      string      `json:"window,omitempty" enum:"sliding,fixed" doc:"window shape: sliding (default; at most rate starts in any period, the strictest reading of 'rate per period') or fixed (at most rate starts in each period aligned to the Unix epoch, e.g. a per-minute quota reset at :00)"`
	PerSecond   *float64    `json:"per_second,omitempty" doc:"sustained starts per second (cost units); or rate + period"`
	Rate        *float64    `json:"rate,omitempty" doc:"starts per period, e.g. 500 with period 1m"`
	Period      string      `json:"period,omitempty" doc:"the period of rate as a Go duration: 1s, 1m, 1h; default 1s"`
	Burst       float64     `json:"burst,omitempty" doc:"bucket shape: starts allowed at once from a full bucket; default one second's worth (at least 1)"`
	Windows     []windowDoc `json:"windows,omitempty" doc:"further windows: at most limit cost units start in any period (sliding) or in each aligned period (fixed); every shape must admit a start"`
	Concurrency int         `json:"concurrency,omitempty" doc:"cap on leases in flight; 0 means none"`
	Adaptive    bool        `json:"adaptive,omitempty" doc:"429s lower the rate, successes raise it back up to the configured rate"`
	MinRate     float64     `json:"min_rate,omitempty" doc:"floor of an adaptive key's learned rate, per second"`
	PerStart    bool        `json:"per_start,omitempty" doc:"count starts, not cost: every start takes one unit whatever the job's cost, and usage is not reconciled (a requests-per-minute key named next to a tokens key)"`
}

// windowDoc is one window of a limit request on the wire.
type windowDoc struct {
	Limit  float64 `json:"limit" required:"true" doc:"cost units that may start in any window"`
	Period string  `json:"period" required:"true" doc:"the window's length as a Go duration, 1ms to 24h: 1s, 1m"`
	Fixed  bool    `json:"fixed,omitempty" doc:"count each period aligned to the Unix epoch (a quota reset at :00) instead of any period (sliding)"`
	Guard  string  `json:"guard,omitempty" doc:"fixed windows: a start this close to a window's end (a Go duration below the period, e.g. 30ms) also counts in the next window, for requests that arrive after the upstream's window rolled over; default 0"`
}

// limitView is a limit key's configuration and live state in one region.
type limitView struct {
	Region string `json:"region"`
	admission.State
	Tokens      float64 `json:"tokens" doc:"cost units the bucket could admit now"`
	WaitingCost int64   `json:"waiting_cost" doc:"cost of the jobs waiting on the key (waiting or retry_scheduled, both lanes)"`
	// Strict and StrictUntil show a fixed key counting strictly after an
	// upstream refused what its declared sliding window allowed
	// (admission/strict.go): it paces one under that limit with no burst,
	// which looks like a slow key unless the view says why and how long.
	Strict      bool       `json:"strict" doc:"true while the key counts strictly: a fixed key with a sliding window that an upstream refused paces evenly at one under the window's limit, with a burst of one, until strict_until"`
	StrictUntil *time.Time `json:"strict_until,omitempty" doc:"while strict: when strict counting ends (each further refusal extends it); absent when the key is not counting strictly"`
	// PauseSource is the 429 behind a pause in force, when one is known.
	PauseSource *pauseSource `json:"pause_source,omitempty" doc:"while paused: the most recent 429 recorded on a job naming the key, when one is known"`
	// Admitted are this node's real counts of the key's starts.
	Admitted *admittedCounts `json:"admitted,omitempty" doc:"this node's counts of the key's starts and 429s since it first saw one; absent before the first start here, or when the node counts too many keys"`
}

// admittedCounts is engine.KeyCounts on the wire: totals, so a client's
// rate is the difference of two reads over the difference of their at.
type admittedCounts struct {
	Starts      int64     `json:"starts" doc:"jobs leased through this node that name the key"`
	Cost        int64     `json:"cost" doc:"the units they took from the key's allowance (compare with its rate): their summed cost, or one per start on a per_start key"`
	RateLimited int64     `json:"rate_limited" doc:"attempts written as rate limited (429) that applied to the key"`
	Since       time.Time `json:"since" doc:"when this node first counted the key"`
}

// limitList is the answer of GET /v1/limits.
type limitList struct {
	At     time.Time   `json:"at" doc:"the server's time of this read, for rates from the admitted counts"`
	Limits []limitView `json:"limits"`
}

// viewLimit renders a key at now. A pause that has ended is left out: it
// refuses nothing, and showing it made operators think the key was stuck.
func (s *Server) viewLimit(region string, st admission.State) limitView {
	now := s.cfg.Now()
	if !st.PausedUntil.After(now) {
		st.PausedUntil = time.Time{}
	}
	v := limitView{Region: region, State: st, Tokens: st.Tokens(now)}
	if until, on := st.StrictUntil(now); on {
		v.Strict, v.StrictUntil = true, &until
	}
	if c, ok := s.jobs[region].KeyCounts(st.Name); ok {
		// A per-start key takes one unit a start whatever the job's cost
		// (the lease charges it so): its admitted cost is its starts.
		cost := c.Cost
		if st.PerStart {
			cost = c.Starts
		}
		v.Admitted = &admittedCounts{Starts: c.Starts, Cost: cost, RateLimited: c.RateLimited, Since: c.Since}
	}
	return v
}

func (s *Server) handlePutLimit(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req limitRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	region, err := s.oneRegion(r, p)
	if err != nil {
		return err
	}
	c, err := req.config(r.PathValue("key"))
	if err != nil {
		return err
	}
	st, err := s.cfg.Regions[region].UpsertLimit(r.Context(), c, s.cfg.Now())
	s.limits.drop(region, c.Name) // also on an error: the write may have happened
	if err != nil {
		return err
	}
	s.notify(region) // a faster or unpaused key may admit waiting jobs now
	return writeJSON(w, http.StatusOK, s.viewLimit(region, st))
}

// config validates the request into a key configuration.
func (req limitRequest) config(name string) (admission.Config, error) {
	c := admission.Config{Name: name, Burst: req.Burst, Concurrency: req.Concurrency, Adaptive: req.Adaptive, MinRate: req.MinRate,
		PerStart: req.PerStart}
	for i, w := range req.Windows {
		d, err := time.ParseDuration(w.Period)
		if err != nil {
			return c, fieldError(fmt.Sprintf("windows[%d].period", i), "period must be a duration such as 1s or 1m, got %q", w.Period)
		}
		win := admission.Window{Limit: w.Limit, Period: d, Fixed: w.Fixed}
		if w.Guard != "" {
			if win.Guard, err = time.ParseDuration(w.Guard); err != nil {
				return c, fieldError(fmt.Sprintf("windows[%d].guard", i), "guard must be a duration such as 30ms, got %q", w.Guard)
			}
		}
		c.Windows = append(c.Windows, win)
	}
	var period time.Duration
	switch {
	case req.PerSecond != nil && (req.Rate != nil || req.Period != ""):
		return c, fieldError("per_second", "send per_second, or rate with period, not both")
	case req.PerSecond != nil:
		c.Rate = *req.PerSecond
	case req.Rate != nil:
		period = time.Second
		if req.Period != "" {
			d, err := time.ParseDuration(req.Period)
			if err != nil || d < time.Millisecond || d > 24*time.Hour {
				return c, fieldError("period", "period must be a duration from 1ms to 24h such as 1s, 1m or 1h, got %q", req.Period)
			}
			period = d
		}
		c.Rate = *req.Rate / period.Seconds()
	case req.Period != "":
		return c, fieldError("rate", "period needs a rate")
	}
	switch req.Window {
	case "", "sliding", "fixed":
		if req.Window != "" && req.Shape != "window" {
			return c, fieldError("window", "window (sliding or fixed) applies to shape window; windows[].fixed sets it per further window")
		}
	default:
		return c, fieldError("window", "window must be sliding (default) or fixed, got %q", req.Window)
	}
	switch req.Shape {
	case "", "bucket":
	case "window":
		if c.Rate <= 0 {
			return c, fieldError("rate", "a window shape needs a rate (per period) greater than 0")
		}
		if req.Burst != 0 {
			return c, fieldError("burst", "burst applies to the bucket shape; a window admits up to its rate at once")
		}
		if c.Adaptive {
			return c, fieldError("adaptive", "an adaptive key needs the bucket shape as its ceiling; add a window with windows")
		}
		if period == 0 {
			period = time.Second
		}
		limit := c.Rate * period.Seconds()
		c.Windows = append([]admission.Window{{Limit: limit, Period: period, Fixed: req.Window == "fixed"}}, c.Windows...)
		c.Rate = 0
	default:
		return c, fieldError("shape", "shape must be bucket (default) or window, got %q", req.Shape)
	}
	if err := c.Validate(); err != nil {
		return c, badRequest("limit key %q: %s", name, err.Error())
	}
	return c, nil
}

func (s *Server) handleListLimits(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	regions, err := s.searchRegions(r, p)
	if err != nil {
		return err
	}
	out := limitList{At: s.cfg.Now(), Limits: []limitView{}}
	for _, region := range regions {
		st := s.cfg.Regions[region]
		states, err := st.ListLimits(r.Context())
		if err != nil {
			return err
		}
		names := make([]string, len(states))
		for i, k := range states {
			names[i] = k.Name
		}
		// The batch lane's backlog counts both lanes: everything waiting.
		backlog, err := st.Backlog(r.Context(), job.LaneBatch, names)
		if err != nil {
			return err
		}
		for _, k := range states {
			v := s.viewLimit(region, k)
			v.WaitingCost = backlog[k.Name]
			if !v.PausedUntil.IsZero() {
				v.PauseSource = s.pauseSource(r.Context(), st, k.Name)
			}
			out.Limits = append(out.Limits, v)
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleGetLimit(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	region, err := s.oneRegion(r, p)
	if err != nil {
		return err
	}
	name := r.PathValue("key")
	st := s.cfg.Regions[region]
	k, err := st.GetLimit(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("limit key " + name + " in region " + region)
	}
	if err != nil {
		return err
	}
	// The batch lane's backlog counts both lanes: everything waiting.
	backlog, err := st.Backlog(r.Context(), job.LaneBatch, []string{name})
	if err != nil {
		return err
	}
	v := s.viewLimit(region, k)
	v.WaitingCost = backlog[name]
	if !v.PausedUntil.IsZero() {
		v.PauseSource = s.pauseSource(r.Context(), st, name)
	}
	return writeJSON(w, http.StatusOK, v)
}
