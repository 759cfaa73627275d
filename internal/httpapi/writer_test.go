package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/metrics"
	"github.com/ratelane/ratelane/internal/testkit"
)

// counter returns the value of the counter series name{labels...} in reg,
// 0 when it has not been written.
func counter(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// An external worker's lease and outcome are counted by the same metrics
// as an in-process handler's: both go through the region's one writer.
// Before the façade the HTTP routes wrote the store directly and neither
// ratelane_leases_total nor ratelane_attempts_total saw them.
func TestExternalWorkerSharesEngineMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	var writer *engine.Jobs
	e := newEnv(t, func(c *Config) {
		writer, err = engine.NewJobs(engine.JobsConfig{Store: c.Regions["us"], Now: c.Now, Observer: m})
		if err != nil {
			t.Fatal(err)
		}
		c.Jobs = map[string]*engine.Jobs{"us": writer}
	})
	eng, err := engine.New(engine.Config{
		Store: e.stores["us"], Region: "us", Jobs: writer, Now: e.clock.Now,
		Kinds: map[string]engine.Kind{"inproc": {Handler: engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			return job.Outcome{Class: job.ClassSuccess}
		})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })

	in := e.createJob(acmeKey, jobBody("inproc", "us"))
	ext := e.createJob(acmeKey, jobBody("ext", "us"))
	eng.Notify()
	leased := e.lease("us", 1, "ext")
	if len(leased) != 1 || leased[0].ID != ext.ID {
		t.Fatalf("leased %+v, want job %s", leased, ext.ID)
	}
	e.do("POST", "/v1/jobs/"+ext.ID+"/complete", workerKey, map[string]any{"lease_token": leased[0].LeaseToken}).want(t, http.StatusOK)
	testkit.WaitFor(t, testkit.Timeout, "the in-process job to publish", func() bool { return e.getJob(in.ID).State == job.StatePublished })
	for _, kind := range []string{"inproc", "ext"} {
		if got := counter(t, reg, "ratelane_attempts_total", "kind", kind, "class", "success"); got != 1 {
			t.Errorf("ratelane_attempts_total{kind=%q,class=success} = %v, want 1", kind, got)
		}
	}
	if got := counter(t, reg, "ratelane_leases_total"); got != 2 {
		t.Errorf("ratelane_leases_total = %v, want 2 (one in-process, one over HTTP)", got)
	}
}

// The lease route follows the engine's batch-share policy: batch earns a
// tenth of every start, so a worker leasing one job at a time still gets a
// batch job within about ten leases while interactive work is within
// budget. The old route asked the store for max/10 batch jobs, which is 0
// for max 1: batch starved behind any interactive backlog.
func TestLeaseRouteUsesEngineBatchShare(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for range 20 {
		b := jobBody("mixed", "us")
		b["lane"] = "interactive"
		e.createJob(acmeKey, b)
	}
	batch := map[string]bool{}
	for range 3 {
		b := jobBody("mixed", "us")
		b["lane"] = "batch"
		batch[e.createJob(acmeKey, b).ID] = true
	}
	for n := 1; n <= 12; n++ {
		got := e.lease("us", 1, "mixed")
		if len(got) != 1 {
			t.Fatalf("lease %d returned %d jobs", n, len(got))
		}
		e.do("POST", "/v1/jobs/"+got[0].ID+"/complete", workerKey, map[string]any{"lease_token": got[0].LeaseToken}).want(t, http.StatusOK)
		if batch[got[0].ID] {
			if n < 10 {
				t.Fatalf("a batch job came %d of 12 with interactive work waiting: the share is a tenth", n)
			}
			return
		}
	}
	t.Fatal("12 leases of one job took no batch job: the lease route ignores batch's share")
}

// Cancel, redrive and the worker routes write through Config.Jobs: a
// writer with its own clock stamps what they record.
func TestRoutesWriteThroughJobs(t *testing.T) {
	t.Parallel()
	writerNow := t0.Add(time.Hour)
	e := newEnv(t, func(c *Config) {
		w, err := engine.NewJobs(engine.JobsConfig{Store: c.Regions["eu"], Now: func() time.Time { return writerNow }})
		if err != nil {
			t.Fatal(err)
		}
		c.Jobs = map[string]*engine.Jobs{"eu": w}
	})
	j := e.createJob(acmeKey, jobBody("sms.send", "eu", "sms"))
	l := e.lease("eu", 1, "sms.send")[0]
	if want := writerNow.Add(60 * time.Second); !e.getJob(j.ID).LeaseExpiresAt.Equal(want) {
		t.Fatalf("lease expires %v, want %v (the writer's clock)", e.getJob(j.ID).LeaseExpiresAt, want)
	}
	var hb heartbeatResponse
	e.do("POST", "/v1/jobs/"+j.ID+"/heartbeat?region=eu", workerKey, map[string]any{"lease_token": l.LeaseToken, "lease_seconds": 120}).
		want(t, 200).json(t, &hb)
	if !hb.LeaseExpiresAt.Equal(writerNow.Add(120 * time.Second)) {
		t.Fatalf("heartbeat extended the lease to %v, want the writer's now + 120 s", hb.LeaseExpiresAt)
	}
	e.do("POST", "/v1/jobs/"+j.ID+"/fail", workerKey, map[string]any{"lease_token": l.LeaseToken, "status": 400, "error": "bad number"}).want(t, 200)
	var v jobView
	e.do("POST", "/v1/dead-letters/"+j.ID+"/redrive", acmeKey, nil).want(t, 200).json(t, &v)
	e.do("POST", "/v1/jobs/"+j.ID+"/cancel", acmeKey, nil).want(t, 200)
	got, err := e.stores["eu"].Get(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var classes []job.Class
	for _, h := range got.History {
		classes = append(classes, h.Outcome)
		if !h.At.Equal(writerNow) {
			t.Errorf("history %s at %v, want the writer's clock %v", h.Outcome, h.At, writerNow)
		}
	}
	if len(classes) != 3 || classes[0] != job.ClassPermanent || classes[1] != job.ClassRedriven || classes[2] != job.ClassCancelled {
		t.Fatalf("history %v, want permanent, redriven, cancelled", classes)
	}
	if got.State != job.StateTerminal || got.Reason != job.ReasonCancelled {
		t.Fatalf("job is %s/%s", got.State, got.Reason)
	}
}
