package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

var _ engine.Observer = (*Metrics)(nil)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func newJob(kind string, keys ...string) *job.Job {
	j := &job.Job{ID: "j1", Kind: kind, Region: "us", Lane: job.LaneInteractive, Tenant: "acme", LimitKeys: keys, Cost: 1,
		Budgets: job.Budgets{Congestion: 3, Transient: 2, Schema: 1}, State: job.StateRunning, Attempt: 1, LeaseToken: "tok"}
	return j
}

// finish feeds an outcome through the engine's real classification, as the
// engine does.
func finish(m *Metrics, j *job.Job, o job.Outcome) store.Transition {
	t := engine.Decide(j, o, t0, false, engine.Backoff{}, 0.5)
	m.Finished(j, o, t)
	return t
}

func TestNewRegistersOnGivenRegistry(t *testing.T) {
	t.Parallel()
	_, reg := newMetrics(t)
	if _, err := New(reg); err == nil {
		t.Fatal("registering twice on one registry succeeded")
	}
	// Other registries are independent: ratelane never uses the global one.
	if _, err := New(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
}

func TestFinished(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	finish(m, newJob("webhook", "subscriber:store_17"), job.Outcome{Class: job.ClassSuccess})
	finish(m, newJob("webhook", "subscriber:store_17", "tenant:acme"), job.Outcome{Class: job.ClassRateLimited, RetryAfter: 2 * time.Second})
	finish(m, newJob("llm", "openai:gpt-4o-mini", "tenant:acme"), job.Outcome{Class: job.ClassRateLimited, Scope: "openai:gpt-4o-mini"})
	finish(m, newJob("llm", "openai:gpt-4o-mini"), job.Outcome{Class: job.ClassTransient})
	finish(m, newJob("llm", "openai:gpt-4o-mini"), job.Outcome{Class: job.ClassPermanent, Err: "bad input"})
	spent := newJob("llm", "openai:gpt-4o-mini")
	spent.Attempts.Schema = 1
	if tr := finish(m, spent, job.Outcome{Class: job.ClassInvalidOutput}); tr.Reason != job.ReasonSchemaBudgetExhausted {
		t.Fatalf("setup: reason %q", tr.Reason)
	}
	m.Leased(3)
	m.Leased(2)
	m.IdempotentReplay()

	for _, c := range []struct {
		got  prometheus.Collector
		want float64
	}{
		{m.attempts.WithLabelValues("webhook", "success"), 1},
		{m.attempts.WithLabelValues("webhook", "rate_limited"), 1},
		{m.attempts.WithLabelValues("llm", "rate_limited"), 1},
		{m.attempts.WithLabelValues("llm", "transient"), 1},
		{m.attempts.WithLabelValues("llm", "permanent"), 1},
		{m.attempts.WithLabelValues("llm", "invalid_output"), 1},
		// No scope: the 429 applies to both keys, one count per scope.
		{m.rateLimited.WithLabelValues("subscriber"), 1},
		{m.rateLimited.WithLabelValues("tenant"), 1},
		// Scoped: only the named key's scope, never the whole key.
		{m.rateLimited.WithLabelValues("openai"), 1},
		{m.terminal.WithLabelValues("permanent_error"), 1},
		{m.terminal.WithLabelValues("schema_budget_exhausted"), 1},
		{m.leases, 5},
		{m.replays, 1},
	} {
		if got := value(t, c.got); got != c.want {
			t.Errorf("%v = %v, want %v", c.got.(prometheus.Metric).Desc(), got, c.want)
		}
	}
	if n := len(collect(m.rateLimited)); n != 3 {
		t.Errorf("%d rate-limited series, want 3 (subscriber, tenant, openai)", n)
	}
	// Three retries were scheduled: two rate limits and one transient.
	if got := value(t, m.retryDelay); got != 3 {
		t.Errorf("retry delay observations = %v, want 3", got)
	}
}

func TestScope(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"openai:gpt-4o-mini":  "openai",
		"subscriber:store_17": "subscriber",
		"a:b:c":               "a",
		"global":              "global",
		":x":                  "_none",
		"":                    "_none",
	} {
		if got := Scope(key); got != want {
			t.Errorf("Scope(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestLabelsBounded(t *testing.T) {
	t.Parallel()
	m, _ := newMetrics(t)
	for i := range 3 * MaxLabelValues {
		j := newJob(fmt.Sprintf("kind-%d", i), fmt.Sprintf("scope%d:key", i))
		finish(m, j, job.Outcome{Class: job.ClassRateLimited})
	}
	finish(m, newJob(strings.Repeat("k", 500), "x:y"), job.Outcome{Class: "made-up"})
	finish(m, newJob("bad\xffutf8", "x:y"), job.Outcome{Class: job.ClassSuccess})
	for name, c := range map[string]prometheus.Collector{"attempts": m.attempts, "rate_limited": m.rateLimited} {
		// MaxLabelValues values plus _other, times the few classes or
		// codes this test uses.
		if n := len(collect(c)); n > MaxLabelValues+3 {
			t.Errorf("%s has %d series; labels are not bounded", name, n)
		}
	}
	if got := value(t, m.attempts.WithLabelValues(OtherLabel, OtherLabel)); got != 1 {
		t.Errorf("unknown class with an over-long kind = %v, want 1 under %s/%s", got, OtherLabel, OtherLabel)
	}
}

// TestNoContentInMetrics is invariant 10: payloads, results, error texts,
// idempotency keys, tenants and limit-key suffixes never reach a metric
// name, label or value.
func TestNoContentInMetrics(t *testing.T) {
	t.Parallel()
	const canary = "CANARY7f3e"
	m, reg := newMetrics(t)
	src := &fakeSource{stats: store.Stats{
		Counts:      map[job.Lane]map[job.State]int64{job.LaneBatch: {job.StateWaiting: 4}, job.Lane(canary): {job.State(canary): 1}},
		OldestReady: map[job.Lane]time.Duration{job.LaneBatch: time.Minute},
	}}
	m.AddRegion("us", src)
	for _, class := range knownClasses {
		j := newJob("webhook", "subscriber:"+canary, "tenant:"+canary)
		j.Payload = json.RawMessage(`{"secret":"` + canary + `"}`)
		j.Result = json.RawMessage(`"` + canary + `"`)
		j.IdempotencyKey, j.Tenant, j.ID = canary, canary, canary
		o := job.Outcome{Class: class, Err: canary, Result: j.Result, RetrySource: canary,
			Hints: []job.Hint{{Key: canary, Limit: 1, Remaining: 0}}}
		finish(m, j, o)
		o.Scope = "openai:" + canary
		finish(m, j, o)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) < 8 {
		t.Fatalf("gathered only %d families; the test would prove nothing", len(mfs))
	}
	for _, mf := range mfs {
		if s := mf.String(); strings.Contains(s, canary) {
			t.Errorf("metric family %s carries content:\n%s", mf.GetName(), s)
		}
	}
}

type fakeSource struct {
	mu    sync.Mutex
	calls int
	stats store.Stats
	err   error
}

func (f *fakeSource) Stats(_ context.Context, _ time.Time) (store.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.stats, f.err
}

func (f *fakeSource) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func TestStatsCollector(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	var mu sync.Mutex
	now := t0
	m.stats.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	us := &fakeSource{stats: store.Stats{
		Counts: map[job.Lane]map[job.State]int64{
			job.LaneInteractive: {job.StateWaiting: 7, job.StateRunning: 2},
			job.LaneBatch:       {job.StateTerminal: 1},
		},
		OldestReady: map[job.Lane]time.Duration{job.LaneInteractive: 1500 * time.Millisecond},
		Running:     2,
	}}
	eu := &fakeSource{err: errors.New("database is down")}
	m.AddRegion("us", us)
	m.AddRegion("eu", eu)

	for name, want := range map[string][]string{
		"ratelane_leases_in_flight": {`ratelane_leases_in_flight{region="us"} 2`},
		"ratelane_oldest_ready_seconds": {
			`ratelane_oldest_ready_seconds{lane="batch",region="us"} 0`,
			`ratelane_oldest_ready_seconds{lane="interactive",region="us"} 1.5`,
		},
		"ratelane_store_up": {`ratelane_store_up{region="eu"} 0`, `ratelane_store_up{region="us"} 1`},
	} {
		wantScrape(t, reg, []string{name}, want...)
	}
	jobs := 0
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "ratelane_jobs" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			jobs++
			labels := map[string]string{}
			for _, l := range mm.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			wantN := us.stats.Counts[job.Lane(labels["lane"])][job.State(labels["state"])]
			if got := mm.GetGauge().GetValue(); got != float64(wantN) || labels["region"] != "us" {
				t.Errorf("ratelane_jobs%v = %v, want %v", labels, got, wantN)
			}
		}
	}
	if want := len(job.Lanes) * len(job.States); jobs != want {
		t.Errorf("%d ratelane_jobs series, want %d (every lane and state, zeros included)", jobs, want)
	}
	// Three gathers so far; within the TTL the stores were read once.
	if us.Calls() != 1 || eu.Calls() != 1 {
		t.Fatalf("stores read %d and %d times within the cache TTL, want 1", us.Calls(), eu.Calls())
	}
	advance(StatsCacheTTL)
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	if us.Calls() != 2 {
		t.Fatalf("stores read %d times after the TTL, want 2", us.Calls())
	}
}

func TestStatsConcurrentScrapes(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	src := &fakeSource{}
	m.AddRegion("us", src)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if src.Calls() != 1 {
		t.Fatalf("8 concurrent scrapes read the store %d times, want 1", src.Calls())
	}
}
