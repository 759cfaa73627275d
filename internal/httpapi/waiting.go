package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// waitingFor explains why a waiting or retry_scheduled job has not started:
// what refuses it now, whether anything runs its kind at all, and when it
// is predicted to start. It is what an operator asks first when a job
// "hangs", so GET /v1/jobs/{id} answers it instead of leaving them to
// compare the job with every key by hand.
type waitingFor struct {
	Blocked bool   `json:"blocked" doc:"true when something refuses the job now"`
	Summary string `json:"summary" doc:"one sentence saying what the job waits for"`
	// NotEligibleUntil is the job's own eligible_at while it is ahead.
	NotEligibleUntil *time.Time `json:"not_eligible_until,omitempty" doc:"the job itself is not eligible before this time (a delay or a retry's backoff)"`
	Keys             []keyBlock `json:"keys" doc:"each of the job's limit keys: whether it admits the job now and, if not, why"`
	Handler          kindServed `json:"handler" doc:"whether anything runs jobs of this kind"`
	PredictedStartAt *time.Time `json:"predicted_start_at,omitempty" doc:"when the job is predicted to start; absent when nothing handles its kind"`
}

// keyBlock is one limit key's verdict on a waiting job.
type keyBlock struct {
	Key    string `json:"key"`
	Blocks bool   `json:"blocks" doc:"true when this key refuses the job now"`
	Why    string `json:"why,omitempty" enum:"paused,concurrency_cap,tokens,window" doc:"why the key refuses: paused (a 429), concurrency_cap (in flight at the cap), tokens (the bucket is short) or window (a key with windows has no room in one of its shapes)"`
	Detail string `json:"detail" doc:"a sentence for people"`
	// AdmitsAt is the earliest time the key may admit the job.
	AdmitsAt    *time.Time   `json:"admits_at,omitempty" doc:"earliest time the key may admit the job again"`
	PausedUntil *time.Time   `json:"paused_until,omitempty" doc:"the key's pause from a 429, while it lasts"`
	PauseSource *pauseSource `json:"pause_source,omitempty" doc:"the most recent 429 recorded on a job naming this key, when one is known"`
	Tokens      float64      `json:"tokens" doc:"cost units the bucket could admit now"`
	Cost        int64        `json:"cost" doc:"what the job takes from the bucket"`
	InFlight    int          `json:"in_flight" doc:"the key's leases in flight"`
	Concurrency int          `json:"concurrency,omitempty" doc:"the key's cap on leases in flight; absent when uncapped"`
	WaitingCost int64        `json:"waiting_cost" doc:"cost of every job waiting on the key"`
}

// pauseSource is the attempt whose 429 most likely set a key's pause.
type pauseSource struct {
	JobID      string    `json:"job_id"`
	At         time.Time `json:"at"`
	Status     int       `json:"status,omitempty"`
	RetryAfter float64   `json:"retry_after_seconds,omitempty" doc:"the delay the attempt was given"`
	Why        string    `json:"why,omitempty"`
}

// kindServed says whether the job's kind has a runner: an in-process
// handler in its region, or an external worker that leased it recently.
type kindServed struct {
	Handled        bool       `json:"handled" doc:"false when no handler is registered and no worker asked for this kind recently"`
	InProcess      bool       `json:"in_process" doc:"a handler for the kind runs inside this server"`
	WorkerLeasedAt *time.Time `json:"worker_leased_at,omitempty" doc:"when an external worker last asked this node for the kind"`
	Detail         string     `json:"detail,omitempty"`
}

// stampMillis formats times in details: RFC 3339 to the millisecond.
const stampMillis = "2006-01-02T15:04:05.000Z07:00"

// explainWait builds the waiting_for of a waiting or retry_scheduled job.
func (s *Server) explainWait(ctx context.Context, st store.Store, j *job.Job) (*waitingFor, error) {
	now := s.cfg.Now()
	w := &waitingFor{Keys: []keyBlock{}, Handler: s.kindServed(j, now)}
	backlog, err := st.Backlog(ctx, job.LaneBatch, j.LimitKeys)
	if err != nil {
		return nil, err
	}
	start := now
	if j.EligibleAt.After(now) {
		at := j.EligibleAt
		w.NotEligibleUntil, w.Blocked, start = &at, true, at
	}
	for _, name := range j.LimitKeys {
		k, err := st.GetLimit(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			def := s.cfg.DefaultLimit
			def.Name = name
			k, err = admission.NewState(def), nil
		}
		if err != nil {
			return nil, err
		}
		kb := keyVerdict(&k, j.Cost, now)
		kb.WaitingCost = backlog[name]
		if kb.PausedUntil != nil {
			kb.PauseSource = s.pauseSource(ctx, st, name)
		}
		w.Blocked = w.Blocked || kb.Blocks
		// The key's whole backlog is ahead of the job at worst; the
		// prediction is an upper estimate for a job near its head.
		start = maxTime(start, now.Add(k.Wait(now, max(kb.WaitingCost, k.Charge(j.Cost)))))
		if kb.AdmitsAt != nil {
			start = maxTime(start, *kb.AdmitsAt)
		}
		w.Keys = append(w.Keys, kb)
	}
	if w.Handler.Handled {
		w.PredictedStartAt = &start
	}
	w.Summary = w.summary(j, now)
	return w, nil
}

// keyVerdict asks the key whether it admits one start of cost at now and
// says why not. It reads the key only through its exported methods, so it
// follows whatever shapes admission gives a key.
func keyVerdict(k *admission.State, cost int64, now time.Time) keyBlock {
	kb := keyBlock{Key: k.Name, Tokens: roundTo(k.Tokens(now), 3), Cost: cost, InFlight: k.InFlight, Concurrency: k.InFlightCap()}
	if k.PausedUntil.After(now) {
		at := k.PausedUntil
		kb.PausedUntil = &at
	}
	ok, next := k.Check(now, cost)
	if ok {
		kb.Detail = "admits the job now"
		return kb
	}
	kb.Blocks, kb.AdmitsAt = true, &next
	switch {
	case kb.PausedUntil != nil:
		kb.Why = "paused"
		kb.Detail = fmt.Sprintf("paused by a 429 until %s (%.1f s from now)", k.PausedUntil.UTC().Format(stampMillis), k.PausedUntil.Sub(now).Seconds())
	case k.InFlightCap() > 0 && k.InFlight >= k.InFlightCap():
		kb.Why = "concurrency_cap"
		kb.Detail = fmt.Sprintf("concurrency cap reached: %d in flight of %d", k.InFlight, k.InFlightCap())
		if k.InFlightCap() != k.Concurrency {
			kb.Detail += " (learned from the upstream's refusals)"
		}
	case len(k.Windows) == 0:
		kb.Why = "tokens"
		kb.Detail = fmt.Sprintf("tokens short: %.2f in the bucket, the job costs %d; next admission at %s", kb.Tokens, cost, next.UTC().Format(stampMillis))
	default:
		// Tokens reports the room of the tightest shape, bucket or window.
		kb.Why = "window"
		kb.Detail = fmt.Sprintf("no room in the key's windows: %.2f of the job's cost %d available; next admission at %s", kb.Tokens, cost, next.UTC().Format(stampMillis))
	}
	return kb
}

// pauseSourceScan is how many of a key's rescheduled jobs are read to find
// the 429 behind its pause.
const pauseSourceScan = 10

// pauseSource finds the most recent rate-limited attempt among the key's
// rescheduled jobs: the likely cause of its pause. It is best effort: a
// pause from a remaining-quota hint or a job already retried has none.
func (s *Server) pauseSource(ctx context.Context, st store.Store, key string) *pauseSource {
	jobs, err := st.List(ctx, store.ListParams{LimitKey: key, State: job.StateRetryScheduled, Limit: pauseSourceScan})
	if err != nil {
		s.log.Warn("pause source", "limit_key", key, "err", err)
		return nil
	}
	var best *pauseSource
	for _, j := range jobs {
		if j, err = st.Get(ctx, j.ID); err != nil { // List leaves histories out
			continue
		}
		for _, rec := range slices.Backward(j.History) {
			if rec.Outcome != job.ClassRateLimited {
				continue
			}
			if best == nil || rec.At.After(best.At) {
				best = &pauseSource{JobID: j.ID, At: rec.At, Status: rec.Status, RetryAfter: rec.Delay.Seconds(), Why: rec.Why}
			}
			break
		}
	}
	return best
}

// kindServed reports whether anything runs j's kind in its region.
func (s *Server) kindServed(j *job.Job, now time.Time) kindServed {
	ks := kindServed{}
	w := s.jobs[j.Region]
	// A handler here runs the job only when this node serves its lane
	// (ratelane.Config.Lanes; the writer knows the engine's lane).
	if s.cfg.Handles != nil && s.cfg.Handles(j.Region, j.Kind) && (w == nil || !w.OtherLaneOnly(j.Kind, j.Lane)) {
		ks.InProcess, ks.Handled = true, true
	}
	if w != nil {
		at, always, ok := w.LastLeased(j.Kind)
		if ok && !always {
			ks.WorkerLeasedAt = &at
		}
		ks.Handled = ks.Handled || w.ServesIn(j.Kind, j.Lane, now)
	}
	if !ks.Handled {
		ks.Detail = fmt.Sprintf("nothing handles kind %q in region %s: no handler is registered in this server for the %s lane and no external worker "+
			"has leased the kind here in the last %v; start a worker for it (POST /v1/leases with kinds [%q]), or a node serving the lane (serve --lanes)", j.Kind, j.Region, j.Lane, engine.ServeWindow, j.Kind)
	}
	return ks
}

func (w *waitingFor) summary(j *job.Job, now time.Time) string {
	var parts []string
	if !w.Handler.Handled {
		parts = append(parts, fmt.Sprintf("nothing handles kind %q", j.Kind))
	}
	if w.NotEligibleUntil != nil {
		parts = append(parts, fmt.Sprintf("not eligible for %.1f s (its own delay or backoff)", w.NotEligibleUntil.Sub(now).Seconds()))
	}
	for _, kb := range w.Keys {
		if kb.Blocks {
			parts = append(parts, kb.Key+": "+kb.Detail)
		}
	}
	if len(parts) == 0 {
		return "nothing refuses the job now; it starts at the next lease"
	}
	return strings.Join(parts, "; ")
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func roundTo(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
