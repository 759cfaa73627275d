package httpapi

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// TestBadRequests sends the malformed and refused requests of issue 3's
// "Done when" and checks each gets its status and a problem+json, and that
// no accepted job was lost or changed by them.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	idem := jobBody("email.send", "us")
	idem["idempotency_key"] = "order-7"
	e.createJob(acmeKey, idem)
	e.createJob(acmeKey, jobBody("email.send", "eu"))
	leased := e.createJob(acmeKey, jobBody("report.build", "us", "reports"))
	got := e.lease("us", 1, "report.build")
	if len(got) != 1 || got[0].ID != leased.ID {
		t.Fatalf("leased %v, want job %s", got, leased.ID)
	}
	short := e.createJob(acmeKey, jobBody("short.lease", "us", "short"))
	var shortLease leaseResponse
	e.do("POST", "/v1/leases", workerKey, map[string]any{"region": "us", "kinds": []string{"short.lease"}, "lease_seconds": 1}).
		want(t, 200).json(t, &shortLease)
	if len(shortLease.Jobs) != 1 {
		t.Fatalf("short lease got %d jobs", len(shortLease.Jobs))
	}
	before := e.snapshot()

	with := func(k string, v any) map[string]any {
		b := jobBody("email.send", "us")
		b[k] = v
		return b
	}
	big := `{"kind":"email.send","region":"us","limit_keys":["k"],"payload":"` + strings.Repeat("x", 300<<10) + `"}`
	huge := `{"kind":"email.send","region":"us","limit_keys":["k"],"payload":"` + strings.Repeat("x", 400<<10) + `"}`
	otherBody := with("payload", map[string]any{"to": "grace@example.com"})
	otherBody["idempotency_key"] = "order-7"
	cases := []struct {
		name, method, path, key string
		body                    any
		hdr                     []string
		status                  int
		slug, field             string
	}{
		{"malformed JSON", "POST", "/v1/jobs", acmeKey, `{"kind": "email.send",`, nil, 400, "malformed-json", ""},
		{"not an object", "POST", "/v1/jobs", acmeKey, `[1,2]`, nil, 400, "invalid-request", "(body)"},
		{"trailing data", "POST", "/v1/jobs", acmeKey, `{} {}`, nil, 400, "malformed-json", ""},
		{"empty body", "POST", "/v1/jobs", acmeKey, ``, nil, 400, "malformed-json", ""},
		{"unknown field", "POST", "/v1/jobs", acmeKey, with("colour", "blue"), nil, 400, "unknown-field", "colour"},
		{"wrong type", "POST", "/v1/jobs", acmeKey, with("priority", "high"), nil, 400, "invalid-request", "priority"},
		{"300 KiB payload", "POST", "/v1/jobs", acmeKey, big, nil, 413, "payload-too-large", ""},
		{"400 KiB body", "POST", "/v1/jobs", acmeKey, huge, nil, 413, "payload-too-large", ""},
		{"unknown region", "POST", "/v1/jobs", acmeKey, with("region", "mars"), nil, 400, "invalid-request", "region"},
		{"unknown lane", "POST", "/v1/jobs", acmeKey, with("lane", "express"), nil, 400, "invalid-request", "lane"},
		{"five limit keys", "POST", "/v1/jobs", acmeKey, with("limit_keys", []string{"a", "b", "c", "d", "e"}), nil, 400, "invalid-request", "limit_keys"},
		{"no limit keys", "POST", "/v1/jobs", acmeKey, with("limit_keys", []string{}), nil, 400, "invalid-request", "limit_keys"},
		{"negative delay", "POST", "/v1/jobs", acmeKey, with("delay_seconds", -5), nil, 400, "invalid-request", "delay_seconds"},
		{"delay over 7 days", "POST", "/v1/jobs", acmeKey, with("delay_seconds", 8*24*3600), nil, 400, "invalid-request", "delay_seconds"},
		{"run_at over 7 days", "POST", "/v1/jobs", acmeKey, with("run_at", t0.Add(8*24*time.Hour)), nil, 400, "invalid-request", "run_at"},
		{"bad on_overload", "POST", "/v1/jobs", acmeKey, with("on_overload", "panic"), nil, 400, "invalid-request", "on_overload"},
		{"long kind", "POST", "/v1/jobs", acmeKey, with("kind", strings.Repeat("k", 300)), nil, 400, "invalid-request", "kind"},
		{"reused idempotency key", "POST", "/v1/jobs", acmeKey, otherBody, nil, 422, "idempotency-mismatch", ""},
		{"header and body keys differ", "POST", "/v1/jobs", acmeKey, idem, []string{"Idempotency-Key", "other"}, 400, "invalid-request", "idempotency_key"},
		{"wrong content type", "POST", "/v1/jobs", acmeKey, `kind=email.send`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported-media-type", ""},
		{"bad lease token", "POST", "/v1/jobs/" + leased.ID + "/complete", workerKey, map[string]any{"lease_token": "forged"}, nil, 409, "lease-lost", ""},
		{"missing lease token", "POST", "/v1/jobs/" + leased.ID + "/complete", workerKey, map[string]any{}, nil, 400, "invalid-request", "lease_token"},
		{"outcome after lease expiry", "POST", "/v1/jobs/" + short.ID + "/complete", workerKey, map[string]any{"lease_token": shortLease.Jobs[0].LeaseToken}, nil, 409, "lease-lost", ""},
		{"heartbeat after lease expiry", "POST", "/v1/jobs/" + short.ID + "/heartbeat", workerKey, map[string]any{"lease_token": shortLease.Jobs[0].LeaseToken}, nil, 409, "lease-lost", ""},
		{"scope not a job key", "POST", "/v1/jobs/" + leased.ID + "/rate-limited", workerKey, map[string]any{"lease_token": got[0].LeaseToken, "scope": "smtp:default"}, nil, 400, "invalid-request", "scope"},
		{"lease max over 100", "POST", "/v1/leases", workerKey, map[string]any{"region": "us", "kinds": []string{"x"}, "max": 101}, nil, 400, "invalid-request", "max"},
		{"lease without kinds", "POST", "/v1/leases", workerKey, map[string]any{"region": "us"}, nil, 400, "invalid-request", "kinds"},
		{"long poll over 30 s", "POST", "/v1/leases", workerKey, map[string]any{"region": "us", "kinds": []string{"x"}, "wait_seconds": 31}, nil, 400, "invalid-request", "wait_seconds"},
		{"lease in unknown region", "POST", "/v1/leases", workerKey, map[string]any{"region": "mars", "kinds": []string{"x"}}, nil, 400, "invalid-request", "region"},
		{"unknown state filter", "GET", "/v1/jobs?state=done", acmeKey, nil, nil, 400, "invalid-request", "state"},
		{"page too large", "GET", "/v1/jobs?limit=5000", acmeKey, nil, nil, 400, "invalid-request", "limit"},
		{"unknown job", "GET", "/v1/jobs/0190-nope", acmeKey, nil, nil, 404, "not-found", ""},
		{"unknown region parameter", "POST", "/v1/jobs/" + leased.ID + "/cancel?region=mars", acmeKey, nil, nil, 400, "invalid-request", "region"},
		{"no such route", "GET", "/v1/nothing", acmeKey, nil, nil, 404, "not-found", ""},
		{"method not allowed", "DELETE", "/v1/jobs", acmeKey, nil, nil, 405, "method-not-allowed", ""},
	}
	e.clock.Add(2 * time.Second) // the short lease has expired; the reaper has not run
	for _, c := range cases {
		r := e.do(c.method, c.path, c.key, c.body, c.hdr...)
		p := r.wantProblem(t, c.status, c.slug)
		if c.field != "" && !slices.ContainsFunc(p.Errors, func(f job.FieldError) bool { return f.Field == c.field }) {
			t.Errorf("%s: errors %+v do not name field %q", c.name, p.Errors, c.field)
		}
		if c.name == "300 KiB payload" && !strings.Contains(p.Detail, "reference") {
			t.Errorf("%s: detail %q does not say to pass a reference", c.name, p.Detail)
		}
		if c.name == "method not allowed" && r.header.Get("Allow") == "" {
			t.Errorf("%s: no Allow header", c.name)
		}
	}
	if after := e.snapshot(); !reflect.DeepEqual(before, after) {
		t.Fatalf("bad requests changed the jobs:\nbefore %v\nafter  %v", before, after)
	}
}

// snapshot returns every job of both regions as JSON, by id.
func (e *env) snapshot() map[string]string {
	e.t.Helper()
	out := map[string]string{}
	var list jobList
	e.do("GET", "/v1/jobs?limit=500", adminKey, nil).want(e.t, 200).json(e.t, &list)
	for _, j := range list.Jobs {
		v := e.getJob(j.ID)
		raw, _ := json.Marshal(v)
		out[j.ID] = string(raw)
	}
	return out
}

func TestIdempotentReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := jobBody("email.send", "us")
	first := e.do("POST", "/v1/jobs", acmeKey, body, "Idempotency-Key", "signup-1").want(t, 201)
	// The same request with whitespace and reordered keys is the same body.
	again := e.do("POST", "/v1/jobs", acmeKey, `{ "region":"us", "kind":"email.send", "limit_keys":["smtp:default"],
		"payload": { "to" : "ada@example.com" }, "idempotency_key":"signup-1", "delay_seconds": 0 }`).want(t, 201)
	if again.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("Idempotent-Replayed: first %q, replay %q", first.header.Get("Idempotent-Replayed"), again.header.Get("Idempotent-Replayed"))
	}
	var a, b jobView
	first.json(t, &a)
	again.json(t, &b)
	if a.ID != b.ID {
		t.Fatalf("replay created job %s, want %s", b.ID, a.ID)
	}
	// Another tenant's key is another namespace.
	other := e.do("POST", "/v1/jobs", globexKey, body, "Idempotency-Key", "signup-1").want(t, 201)
	if other.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("another tenant's request was replayed")
	}
}

// TestTenantIsolation: tenant A cannot read, cancel or redrive tenant B's
// jobs (404), a key limited to eu cannot use us (403), unknown and revoked
// keys are 401 and roles are enforced (403).
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.createJob(acmeKey, jobBody("email.send", "us"))
	dead := e.createJob(acmeKey, jobBody("email.send", "us"))
	e.do("POST", "/v1/jobs/"+dead.ID+"/cancel", acmeKey, nil).want(t, 200)

	for _, path := range []string{"/v1/jobs/" + j.ID, "/v1/jobs/" + j.ID + "?region=us"} {
		e.do("GET", path, globexKey, nil).wantProblem(t, 404, "not-found")
	}
	e.do("POST", "/v1/jobs/"+j.ID+"/cancel", globexKey, nil).wantProblem(t, 404, "not-found")
	e.do("POST", "/v1/dead-letters/"+dead.ID+"/redrive", globexKey, nil).wantProblem(t, 404, "not-found")
	e.do("DELETE", "/v1/dead-letters/"+dead.ID, globexKey, nil).wantProblem(t, 404, "not-found")
	var list jobList
	e.do("GET", "/v1/jobs", globexKey, nil).want(t, 200).json(t, &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("globex lists %d of acme's jobs", len(list.Jobs))
	}
	e.do("GET", "/v1/jobs?tenant=acme", globexKey, nil).wantProblem(t, 403, "forbidden")
	e.do("GET", "/v1/dead-letters", globexKey, nil).want(t, 200).json(t, &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("globex lists %d of acme's dead letters", len(list.Jobs))
	}
	if got := e.getJob(j.ID); got.State != job.StateWaiting {
		t.Fatalf("acme's job is %s after globex's attempts, want waiting", got.State)
	}
	e.do("GET", "/v1/jobs/"+j.ID, acmeKey, nil).want(t, 200)

	// The eu-only key of the same tenant: us is forbidden, eu works.
	e.do("POST", "/v1/jobs", euKey, jobBody("email.send", "us")).wantProblem(t, 403, "region-forbidden")
	e.do("GET", "/v1/jobs/"+j.ID+"?region=us", euKey, nil).wantProblem(t, 403, "region-forbidden")
	e.do("GET", "/v1/jobs/"+j.ID, euKey, nil).wantProblem(t, 404, "not-found") // searches eu only
	e.createJob(euKey, jobBody("email.send", "eu"))

	// Authentication.
	e.do("GET", "/v1/jobs", "", nil).wantProblem(t, 401, "unauthenticated")
	e.do("GET", "/v1/jobs", "rl_nobody_secret", nil).wantProblem(t, 401, "unauthenticated")
	r := e.do("GET", "/v1/jobs", revokedKey, nil)
	if p := r.wantProblem(t, 401, "unauthenticated"); !strings.Contains(p.Detail, "revoked") {
		t.Fatalf("revoked key detail %q", p.Detail)
	}
	if r.header.Get("WWW-Authenticate") == "" {
		t.Fatal("401 without WWW-Authenticate")
	}
	e.do("GET", "/v1/jobs", "", nil, "Authorization", "Basic YTpi").wantProblem(t, 401, "unauthenticated")

	// Roles.
	e.do("PUT", "/v1/limits/k?region=us", acmeKey, map[string]any{"per_second": 1}).wantProblem(t, 403, "forbidden")
	e.do("POST", "/v1/jobs", workerKey, jobBody("email.send", "us")).wantProblem(t, 403, "forbidden")
	e.do("POST", "/v1/leases", acmeKey, map[string]any{"region": "us", "kinds": []string{"email.send"}}).wantProblem(t, 403, "forbidden")
	e.do("GET", "/v1/keys", acmeKey, nil).wantProblem(t, 403, "forbidden")

	// Built-in kinds are refused for every role, and never leased.
	for _, key := range []string{acmeKey, adminKey} {
		p := e.do("POST", "/v1/jobs", key, jobBody("webhook", "us")).wantProblem(t, 422, "reserved-kind")
		if len(p.Errors) != 1 || p.Errors[0].Field != "kind" || !strings.Contains(p.Detail, `"webhook"`) {
			t.Fatalf("reserved kind problem %+v", p)
		}
	}
	e.do("POST", "/v1/leases", workerKey, map[string]any{"region": "us", "kinds": []string{"review.part"}}).wantProblem(t, 422, "reserved-kind")

	// A worker of acme on globex's job: 404 like an unknown id, not 409.
	g := e.createJob(globexKey, jobBody("email.send", "us"))
	for _, route := range []string{"heartbeat", "complete", "fail", "rate-limited"} {
		e.do("POST", "/v1/jobs/"+g.ID+"/"+route, workerKey, map[string]any{"lease_token": "t"}).wantProblem(t, 404, "not-found")
	}

	// The admin sees and acts on every tenant's jobs.
	e.do("POST", "/v1/dead-letters/"+dead.ID+"/redrive", adminKey, nil).want(t, 200)
	tenantJob := jobBody("email.send", "us")
	tenantJob["tenant"] = "globex"
	if v := e.createJob(adminKey, tenantJob); v.Tenant != "globex" {
		t.Fatalf("admin-created job has tenant %q", v.Tenant)
	}
	tenantJob["tenant"] = "globex" // a producer's tenant field is ignored
	if v := e.createJob(acmeKey, tenantJob); v.Tenant != "acme" {
		t.Fatalf("producer-created job has tenant %q, want its key's", v.Tenant)
	}
}

// TestExternalWorkerRateLimited is issue 3's external worker flow: lease,
// the upstream answers 429 with Retry-After: 2, the worker reports it, no
// job with that key is leased to any worker for 2 s while other keys flow,
// then success publishes the job.
func TestExternalWorkerRateLimited(t *testing.T) {
	t.Parallel()
	for name, report := range map[string]map[string]any{
		"retry_after_seconds": {"retry_after_seconds": 2},
		"raw headers":         {"headers": map[string]string{"retry-after": "2", "x-ratelimit-remaining-requests": "0"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			const key = "partner:acme"
			a := e.createJob(acmeKey, jobBody("partner.call", "us", key))
			got := e.lease("us", 10, "partner.call")
			if len(got) != 1 || got[0].ID != a.ID || got[0].LeaseToken == "" {
				t.Fatalf("lease returned %+v, want job %s with a token", got, a.ID)
			}
			report["lease_token"] = got[0].LeaseToken
			var out outcomeResponse
			e.do("POST", "/v1/jobs/"+a.ID+"/rate-limited", workerKey, report).want(t, 200).json(t, &out)
			if out.State != job.StateRetryScheduled || !out.EligibleAt.Equal(t0.Add(2*time.Second)) {
				t.Fatalf("outcome %+v, want retry_scheduled at t0+2s", out)
			}
			// The late duplicate report of the same lease is refused.
			e.do("POST", "/v1/jobs/"+a.ID+"/rate-limited", workerKey, report).wantProblem(t, 409, "lease-lost")

			b := e.createJob(acmeKey, jobBody("partner.call", "us", key))
			other := e.createJob(acmeKey, jobBody("partner.call", "us", "partner:globex"))
			for _, at := range []time.Duration{0, time.Second, 1999 * time.Millisecond} {
				e.clock.Add(at - e.clock.Now().Sub(t0))
				for worker := range 2 {
					for _, j := range e.lease("us", 10, "partner.call") {
						if slices.Contains(j.LimitKeys, key) {
							t.Fatalf("worker %d leased job %s with the paused key at t0+%v", worker, j.ID, at)
						}
						if j.ID != other.ID {
							t.Fatalf("leased unexpected job %s", j.ID)
						}
						e.do("POST", "/v1/jobs/"+j.ID+"/complete", workerKey, map[string]any{"lease_token": j.LeaseToken}).want(t, 200)
					}
				}
			}
			if st := e.getJob(other.ID).State; st != job.StatePublished {
				t.Fatalf("the job on another key is %s, want published while the key was paused", st)
			}
			e.clock.Add(time.Millisecond) // t0 + 2 s: the pause is over
			got = e.lease("us", 10, "partner.call")
			ids := []string{}
			for _, j := range got {
				ids = append(ids, j.ID)
				e.do("POST", "/v1/jobs/"+j.ID+"/complete", workerKey,
					map[string]any{"lease_token": j.LeaseToken, "result": map[string]any{"ok": true}}).want(t, 200)
			}
			slices.Sort(ids)
			want := []string{a.ID, b.ID}
			slices.Sort(want)
			if !slices.Equal(ids, want) {
				t.Fatalf("after the pause leased %v, want %v", ids, want)
			}
			final := e.getJob(a.ID)
			if final.State != job.StatePublished || string(final.Result) != `{"ok":true}` {
				t.Fatalf("job %s is %s with result %s, want published", a.ID, final.State, final.Result)
			}
			if h := final.History; len(h) == 0 || h[0].Outcome != job.ClassRateLimited || h[0].Delay != 2*time.Second {
				t.Fatalf("history %+v, want a rate_limited attempt with a 2 s delay", h)
			}
		})
	}
}

// TestWorkerOutcomes covers heartbeat, fail (retryable and permanent) and
// the dead-letter endpoints they lead to.
func TestWorkerOutcomes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.createJob(acmeKey, jobBody("sms.send", "eu", "sms"))
	l := e.lease("eu", 1, "sms.send")[0]
	var hb heartbeatResponse
	e.do("POST", "/v1/jobs/"+j.ID+"/heartbeat?region=eu", workerKey, map[string]any{"lease_token": l.LeaseToken, "lease_seconds": 120}).
		want(t, 200).json(t, &hb)
	if !hb.LeaseExpiresAt.Equal(t0.Add(120 * time.Second)) {
		t.Fatalf("heartbeat extended the lease to %v", hb.LeaseExpiresAt)
	}
	var out outcomeResponse
	e.do("POST", "/v1/jobs/"+j.ID+"/fail", workerKey, map[string]any{"lease_token": l.LeaseToken, "retryable": true, "status": 503, "error": "upstream 503"}).
		want(t, 200).json(t, &out)
	if out.State != job.StateRetryScheduled {
		t.Fatalf("retryable failure -> %s", out.State)
	}
	e.clock.Add(time.Hour)
	l = e.lease("eu", 1, "sms.send")[0]
	e.do("POST", "/v1/jobs/"+j.ID+"/fail", workerKey, map[string]any{"lease_token": l.LeaseToken, "error": "bad number", "status": 400}).
		want(t, 200).json(t, &out)
	if out.State != job.StateTerminal || out.Reason != string(job.ReasonPermanentError) {
		t.Fatalf("permanent failure -> %+v", out)
	}
	var list jobList
	e.do("GET", "/v1/dead-letters?reason=permanent_error", acmeKey, nil).want(t, 200).json(t, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].ID != j.ID || list.Jobs[0].Payload != nil {
		t.Fatalf("dead letters %+v, want job %s without payload", list.Jobs, j.ID)
	}
	e.do("GET", "/v1/dead-letters?reason=cancelled", acmeKey, nil).want(t, 200).json(t, &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("reason filter kept %d jobs", len(list.Jobs))
	}
	var v jobView
	e.do("POST", "/v1/dead-letters/"+j.ID+"/redrive", acmeKey, nil).want(t, 200).json(t, &v)
	if v.State != job.StateWaiting {
		t.Fatalf("redriven job is %s", v.State)
	}
	e.do("DELETE", "/v1/dead-letters/"+j.ID, acmeKey, nil).wantProblem(t, 409, "conflict")
	e.do("POST", "/v1/jobs/"+j.ID+"/cancel", acmeKey, nil).want(t, 200)
	e.do("POST", "/v1/jobs/"+j.ID+"/cancel", acmeKey, nil).wantProblem(t, 409, "conflict")
	e.do("DELETE", "/v1/dead-letters/"+j.ID, acmeKey, nil).want(t, 204)
	e.do("GET", "/v1/jobs/"+j.ID, acmeKey, nil).wantProblem(t, 404, "not-found")
}

// TestListPagination pages through jobs of two regions with one cursor.
func TestListPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var want []string
	for i := range 7 {
		region := []string{"us", "eu"}[i%2]
		want = append(want, e.createJob(acmeKey, jobBody("email.send", region)).ID)
	}
	slices.Reverse(want) // newest first
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		var list jobList
		e.do("GET", "/v1/jobs?limit=3&after="+cursor, acmeKey, nil).want(t, 200).json(t, &list)
		for _, j := range list.Jobs {
			got = append(got, j.ID)
		}
		if cursor = list.NextCursor; cursor == "" || pages > 5 {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages gave %v, want %v", got, want)
	}
	var list jobList
	e.do("GET", "/v1/jobs?region=eu&lane=batch&state=waiting&kind=email.send", acmeKey, nil).want(t, 200).json(t, &list)
	if len(list.Jobs) != 3 {
		t.Fatalf("eu filter gave %d jobs, want 3", len(list.Jobs))
	}
}

// TestFail503WithRetryAfter: a 503 forwarded to /fail with a Retry-After
// (here an HTTP-date from a server whose clock runs an hour ahead) is
// congestion: the job is rescheduled at the server's delay measured from
// its Date, and the key pauses for every worker until then. A 503 without
// one stays a transient failure and pauses nothing.
func TestFail503WithRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const key = "partner:acme"
	serverNow := t0.Add(time.Hour)
	a := e.createJob(acmeKey, jobBody("partner.call", "us", key))
	l := e.lease("us", 1, "partner.call")[0]
	var out outcomeResponse
	e.do("POST", "/v1/jobs/"+a.ID+"/fail", workerKey, map[string]any{
		"lease_token": l.LeaseToken, "retryable": true, "status": 503, "error": "upstream 503",
		"headers": map[string]string{"Date": serverNow.Format(http.TimeFormat), "Retry-After": serverNow.Add(3 * time.Second).Format(http.TimeFormat)},
	}).want(t, 200).json(t, &out)
	if out.State != job.StateRetryScheduled || !out.EligibleAt.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("outcome %+v, want retry_scheduled at t0+3s", out)
	}
	if h := e.getJob(a.ID).History; len(h) != 1 || h[0].Outcome != job.ClassRateLimited || h[0].Delay != 3*time.Second {
		t.Fatalf("history %+v, want one rate_limited attempt with a 3 s delay", h)
	}
	b := e.createJob(acmeKey, jobBody("partner.call", "us", key))
	e.clock.Add(2999 * time.Millisecond)
	if got := e.lease("us", 10, "partner.call"); len(got) != 0 {
		t.Fatalf("leased %d jobs of the paused key before the Retry-After", len(got))
	}
	e.clock.Add(time.Millisecond)
	got := e.lease("us", 1, "partner.call")
	if len(got) != 1 {
		t.Fatalf("leased %d jobs after the pause, want 1", len(got))
	}
	// A 503 without Retry-After: transient, no pause for the other job.
	e.do("POST", "/v1/jobs/"+got[0].ID+"/fail", workerKey, map[string]any{
		"lease_token": got[0].LeaseToken, "retryable": true, "status": 503,
		"headers": map[string]string{"Date": serverNow.Format(http.TimeFormat)},
	}).want(t, 200).json(t, &out)
	if out.State != job.StateRetryScheduled {
		t.Fatalf("503 without Retry-After -> %s, want retry_scheduled", out.State)
	}
	h := e.getJob(got[0].ID).History
	if last := h[len(h)-1]; last.Outcome != job.ClassTransient {
		t.Fatalf("503 without Retry-After recorded as %s, want transient", last.Outcome)
	}
	rest := []string{a.ID, b.ID}
	if next := e.lease("us", 10, "partner.call"); len(next) != 1 || !slices.Contains(rest, next[0].ID) || next[0].ID == got[0].ID {
		t.Fatalf("after a transient 503 leased %+v, want the other job at once", next)
	}
}
