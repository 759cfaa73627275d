package httpapi

import (
	"strings"
	"testing"
	"time"
)

// TestWaitingForExplainsEachBlock reads waiting_for on a real server and
// store through every reason a job can wait: nothing handles its kind, a
// key paused by a worker's 429 (with the attempt that caused it), a
// concurrency cap, a short bucket and the job's own backoff.
func TestWaitingForExplainsEachBlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.Handles = func(region, kind string) bool { return kind == "report.build" } })

	// Nothing runs email.send yet: the job says so and predicts nothing.
	a := e.createJob(acmeKey, jobBody("email.send", "us"))
	w := e.getJob(a.ID).WaitingFor
	if w == nil || w.Handler.Handled || w.PredictedStartAt != nil || !strings.Contains(w.Summary, `nothing handles kind "email.send"`) {
		t.Fatalf("unhandled kind: waiting_for %+v", w)
	}
	if len(w.Keys) != 1 || w.Keys[0].Blocks || w.Keys[0].Key != "smtp:default" {
		t.Fatalf("an unpaced key should admit the job: %+v", w.Keys)
	}
	// An in-process handler counts as handled.
	r := e.createJob(acmeKey, jobBody("report.build", "us", "reports"))
	if w := e.getJob(r.ID).WaitingFor; !w.Handler.Handled || !w.Handler.InProcess || w.PredictedStartAt == nil || w.Blocked {
		t.Fatalf("in-process kind: waiting_for %+v", w)
	}

	// A worker leases a, and its upstream answers 429 with Retry-After 30.
	leased := e.lease("us", 1, "email.send")
	if len(leased) != 1 || leased[0].ID != a.ID {
		t.Fatalf("leased %+v, want job a", leased)
	}
	e.do("POST", "/v1/jobs/"+a.ID+"/rate-limited", workerKey, map[string]any{
		"lease_token": leased[0].LeaseToken, "headers": map[string]string{"Retry-After": "30"}}).want(t, 200)
	b := e.createJob(acmeKey, jobBody("email.send", "us"))
	w = e.getJob(b.ID).WaitingFor
	if !w.Blocked || !w.Handler.Handled || w.Handler.WorkerLeasedAt == nil {
		t.Fatalf("after the 429: waiting_for %+v", w)
	}
	kb := w.Keys[0]
	pausedUntil := t0.Add(30 * time.Second)
	if !kb.Blocks || kb.Why != "paused" || kb.PausedUntil == nil || !kb.PausedUntil.Equal(pausedUntil) {
		t.Fatalf("paused key verdict %+v, want paused until %v", kb, pausedUntil)
	}
	if kb.PauseSource == nil || kb.PauseSource.JobID != a.ID || kb.PauseSource.Status != 429 {
		t.Fatalf("pause source %+v, want job %s's 429", kb.PauseSource, a.ID)
	}
	if kb.WaitingCost != 2 {
		t.Fatalf("waiting_cost %d, want 2 (a rescheduled, b waiting)", kb.WaitingCost)
	}
	if w.PredictedStartAt == nil || w.PredictedStartAt.Before(pausedUntil) {
		t.Fatalf("predicted start %v, want no earlier than the pause's end %v", w.PredictedStartAt, pausedUntil)
	}
	// The rescheduled job also waits for its own eligible_at.
	if wa := e.getJob(a.ID).WaitingFor; wa == nil || wa.NotEligibleUntil == nil || !wa.NotEligibleUntil.After(t0) {
		t.Fatalf("rescheduled job: waiting_for %+v", wa)
	}

	// A concurrency cap of one with one lease in flight.
	e.do("PUT", "/v1/limits/cap:one?region=us", adminKey, map[string]any{"concurrency": 1}).want(t, 200)
	e.createJob(acmeKey, jobBody("capped", "us", "cap:one"))
	second := e.createJob(acmeKey, jobBody("capped", "us", "cap:one"))
	if got := e.lease("us", 1, "capped"); len(got) != 1 {
		t.Fatalf("leased %d capped jobs, want 1", len(got))
	}
	kb = e.getJob(second.ID).WaitingFor.Keys[0]
	if !kb.Blocks || kb.Why != "concurrency_cap" || kb.InFlight != 1 || kb.Concurrency != 1 || !strings.Contains(kb.Detail, "1 in flight of 1") {
		t.Fatalf("capped key verdict %+v", kb)
	}

	// A bucket of one token a second, spent.
	e.do("PUT", "/v1/limits/slow?region=us", adminKey, map[string]any{"per_second": 0.5, "burst": 1}).want(t, 200)
	e.createJob(acmeKey, jobBody("paced", "us", "slow"))
	next := e.createJob(acmeKey, jobBody("paced", "us", "slow"))
	if got := e.lease("us", 2, "paced"); len(got) != 1 {
		t.Fatalf("leased %d paced jobs, want 1", len(got))
	}
	w = e.getJob(next.ID).WaitingFor
	kb = w.Keys[0]
	if !kb.Blocks || kb.Why != "tokens" || kb.AdmitsAt == nil || !kb.AdmitsAt.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("short bucket verdict %+v, want tokens until t0+2s", kb)
	}
	if !w.PredictedStartAt.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("predicted start %v, want t0+2s", w.PredictedStartAt)
	}

	// A window of two starts a minute, spent, with no bucket to pace.
	e.do("PUT", "/v1/limits/win?region=us", adminKey, map[string]any{"windows": []map[string]any{{"limit": 2, "period": "1m"}}}).want(t, 200)
	for range 3 {
		e.createJob(acmeKey, jobBody("windowed", "us", "win"))
	}
	if got := e.lease("us", 3, "windowed"); len(got) != 2 {
		t.Fatalf("leased %d windowed jobs, want 2", len(got))
	}
	var third jobList
	e.do("GET", "/v1/jobs?state=waiting&kind=windowed", adminKey, nil).want(t, 200).json(t, &third)
	if len(third.Jobs) != 1 {
		t.Fatalf("waiting windowed jobs %+v", third.Jobs)
	}
	kb = e.getJob(third.Jobs[0].ID).WaitingFor.Keys[0]
	if !kb.Blocks || kb.Why != "window" || kb.AdmitsAt == nil || !kb.AdmitsAt.After(t0) {
		t.Fatalf("spent window verdict %+v", kb)
	}

	// Finished and running jobs carry no waiting_for.
	if v := e.getJob(leased[0].ID); v.State == "running" && v.WaitingFor != nil {
		t.Fatalf("running job has waiting_for %+v", v.WaitingFor)
	}
}

// TestListLimitsWaitingCostAndExpiredPause checks GET /v1/limits shows
// every key's region and waiting cost, and leaves out a pause once it
// ended (limits ls showed expired pauses as if the key were stuck).
func TestListLimitsWaitingCostAndExpiredPause(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.createJob(acmeKey, jobBody("email.send", "us"))
	e.createJob(acmeKey, jobBody("email.send", "us"))
	leased := e.lease("us", 1, "email.send")
	e.do("POST", "/v1/jobs/"+leased[0].ID+"/rate-limited", workerKey, map[string]any{
		"lease_token": leased[0].LeaseToken, "retry_after_seconds": 10}).want(t, 200)
	_ = a

	find := func() limitView {
		var list limitList
		e.do("GET", "/v1/limits?region=us", adminKey, nil).want(t, 200).json(t, &list)
		for _, l := range list.Limits {
			if l.Name == "smtp:default" {
				return l
			}
		}
		t.Fatalf("smtp:default missing from %+v", list)
		return limitView{}
	}
	l := find()
	if l.Region != "us" || l.WaitingCost != 2 || !l.PausedUntil.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("limit %+v, want region us, waiting_cost 2, paused until t0+10s", l)
	}
	e.clock.Add(11 * time.Second)
	resp := e.do("GET", "/v1/limits?region=us", adminKey, nil).want(t, 200)
	if strings.Contains(string(resp.body), "paused_until") {
		t.Fatalf("an ended pause is still shown: %s", resp.body)
	}
	if l := find(); !l.PausedUntil.IsZero() {
		t.Fatalf("paused_until %v after the pause ended", l.PausedUntil)
	}
}

// TestLimitShowsStrictCounting checks that GET /v1/limits/{key} and GET
// /v1/limits show a fixed key with a sliding window counting strictly
// after a 429 (strict and strict_until: the pause plus one pause per unit
// of the window's limit), and that both read it off once that time has
// passed, with no start or success needed to end it in the view.
func TestLimitShowsStrictCounting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("PUT", "/v1/limits/strict:hook?region=us", adminKey, map[string]any{"shape": "window", "rate": 5, "period": "1s"}).want(t, 200)
	e.createJob(acmeKey, jobBody("hook.send", "us", "strict:hook"))
	leased := e.lease("us", 1, "hook.send")
	if len(leased) != 1 {
		t.Fatalf("leased %d jobs, want 1", len(leased))
	}
	get := func() limitView {
		var v limitView
		e.do("GET", "/v1/limits/strict:hook?region=us", adminKey, nil).want(t, 200).json(t, &v)
		var list limitList
		e.do("GET", "/v1/limits?region=us", adminKey, nil).want(t, 200).json(t, &list)
		for _, l := range list.Limits {
			if l.Name == v.Name && (l.Strict != v.Strict || (l.StrictUntil == nil) != (v.StrictUntil == nil) ||
				l.StrictUntil != nil && !l.StrictUntil.Equal(*v.StrictUntil)) {
				t.Fatalf("GET /v1/limits shows strict %v until %v, the key's own view %v until %v", l.Strict, l.StrictUntil, v.Strict, v.StrictUntil)
			}
		}
		return v
	}
	if v := get(); v.Strict || v.StrictUntil != nil {
		t.Fatalf("strict before any refusal: %+v", v)
	}
	e.do("POST", "/v1/jobs/"+leased[0].ID+"/rate-limited", workerKey, map[string]any{
		"lease_token": leased[0].LeaseToken, "retry_after_seconds": 2}).want(t, 200)
	// Paused 2 s, then strict for 5 pauses of 2 s.
	want := t0.Add(2 * time.Second).Add(5 * 2 * time.Second)
	if v := get(); !v.Strict || v.StrictUntil == nil || !v.StrictUntil.Equal(want) {
		t.Fatalf("after a 429: strict %v until %v, want on until t0+12s", v.Strict, v.StrictUntil)
	}
	e.clock.Add(12*time.Second - time.Millisecond)
	if v := get(); !v.Strict {
		t.Fatalf("strict counting off 1 ms before it runs out: %+v", v)
	}
	e.clock.Add(time.Millisecond)
	resp := e.do("GET", "/v1/limits/strict:hook?region=us", adminKey, nil).want(t, 200)
	if strings.Contains(string(resp.body), "strict_until") {
		t.Fatalf("strict_until shown after strict counting ran out: %s", resp.body)
	}
	if v := get(); v.Strict || v.StrictUntil != nil {
		t.Fatalf("still strict after it ran out: %+v", v)
	}
}
