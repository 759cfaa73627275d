package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// TestOverloadRejects: with a key at 1/s and 100 interactive jobs queued on
// it, a new interactive job with on_overload reject gets 429 with a
// Retry-After within 2x of the real wait, which the test then measures by
// leasing through the store on the same clock.
func TestOverloadRejects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const key = "llm:slow"
	e.do("PUT", "/v1/limits/"+key+"?region=us", adminKey, map[string]any{"rate": 60, "period": "1m", "burst": 1}).want(t, 200)
	body := jobBody("llm.call", "us", key)
	body["lane"] = "interactive"
	body["on_overload"] = "queue"
	var last jobView
	for range 100 {
		last = e.createJob(acmeKey, body)
	}
	if last.PredictedWaitSeconds == nil || *last.PredictedWaitSeconds < 90 {
		t.Fatalf("the 100th job's predicted wait is %v, want about 100 s", last.PredictedWaitSeconds)
	}
	delete(body, "on_overload") // interactive defaults to reject
	r := e.do("POST", "/v1/jobs", acmeKey, body)
	p := r.wantProblem(t, http.StatusTooManyRequests, "overloaded")
	retryAfter, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || retryAfter < 1 {
		t.Fatalf("Retry-After %q, want whole seconds >= 1", r.header.Get("Retry-After"))
	}
	if p.PredictedWaitSeconds == nil || p.BudgetSeconds == nil || *p.BudgetSeconds != 30 {
		t.Fatalf("problem %+v lacks the predicted wait and budget", p)
	}

	// The real wait: lease on the same clock, 100 ms steps, until the
	// backlog is drained and a new job would be admitted.
	st := e.stores["us"]
	leased, now := 0, t0
	for leased < 100 && now.Sub(t0) < 10*time.Minute {
		jobs, err := st.Lease(context.Background(), store.LeaseParams{Now: now, Max: 100, LeaseFor: time.Hour, Kinds: []string{"llm.call"}})
		if err != nil {
			t.Fatal(err)
		}
		leased += len(jobs)
		now = now.Add(100 * time.Millisecond)
	}
	real := now.Sub(t0).Seconds() + 1 // the new job is admitted one token after the backlog
	t.Logf("Retry-After %d s, predicted wait %.1f s, real wait %.1f s", retryAfter, *p.PredictedWaitSeconds, real)
	if float64(retryAfter) > 2*real || 2*float64(retryAfter) < real {
		t.Fatalf("Retry-After %d s is not within 2x of the real wait %.1f s", retryAfter, real)
	}
	if *p.PredictedWaitSeconds > 2*real || 2**p.PredictedWaitSeconds < real {
		t.Fatalf("predicted wait %.1f s is not within 2x of the real wait %.1f s", *p.PredictedWaitSeconds, real)
	}
}

// TestOverloadPolicies: degrade accepts and marks the job, queue accepts,
// batch work has a 24 h budget, and a paused key adds its pause.
func TestOverloadPolicies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const key = "llm:tiny"
	e.do("PUT", "/v1/limits/"+key+"?region=us", adminKey, map[string]any{"per_second": 0.01}).want(t, 200)
	body := jobBody("llm.call", "us", key)
	body["lane"] = "interactive"
	e.createJob(acmeKey, body) // takes the one token; the next waits 100 s
	e.do("POST", "/v1/jobs", acmeKey, body).wantProblem(t, 429, "overloaded")
	body["on_overload"] = "degrade"
	if v := e.createJob(acmeKey, body); v.Depth != "degraded" {
		t.Fatalf("degraded job has depth %q", v.Depth)
	}
	body["on_overload"] = "queue"
	if v := e.createJob(acmeKey, body); v.Depth != "" {
		t.Fatalf("queued job has depth %q", v.Depth)
	}
	batch := jobBody("llm.call", "us", key)
	if v := e.createJob(acmeKey, batch); v.Lane != job.LaneBatch || *v.PredictedWaitSeconds < 100 {
		t.Fatalf("batch job %+v, want accepted with a long predicted wait", v)
	}

	// An unpaced key adds its remaining pause.
	paused := jobBody("llm.call", "us", "llm:paused")
	paused["lane"] = "interactive"
	j := e.createJob(acmeKey, paused)
	l := e.lease("us", 10, "llm.call")
	for _, x := range l {
		if x.ID == j.ID {
			e.do("POST", "/v1/jobs/"+x.ID+"/rate-limited", workerKey, map[string]any{"lease_token": x.LeaseToken, "retry_after_seconds": 45}).want(t, 200)
		}
	}
	r := e.do("POST", "/v1/jobs", acmeKey, paused)
	p := r.wantProblem(t, 429, "overloaded")
	if *p.PredictedWaitSeconds < 44 || r.header.Get("Retry-After") != "15" {
		t.Fatalf("paused key: predicted %v s, Retry-After %q; want 45 s and 15", *p.PredictedWaitSeconds, r.header.Get("Retry-After"))
	}
}
