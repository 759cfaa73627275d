package httpapi

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/webhook"
)

// batchBackends runs a test on SQLite and, when the suite has one, on
// PostgreSQL (region us on a fresh schema). poison installs a trigger in
// region us's database that makes inserting a job of kind "poison" fail
// inside the store's transaction.
func batchBackends(t *testing.T, fn func(t *testing.T, e *env, poison func())) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		fn(t, e, func() {
			db, err := sql.Open("sqlite", e.stores["us"].(interface{ Path() string }).Path())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`CREATE TRIGGER poison BEFORE INSERT ON jobs WHEN NEW.kind = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned'); END`); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		st, exec := pgStore(t)
		e := newEnv(t, func(c *Config) { c.Regions = map[string]store.Store{"us": st, "eu": c.Regions["eu"]} })
		e.stores["us"] = st
		fn(t, e, func() {
			exec(`CREATE FUNCTION $schema.poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'poisoned'; END $$`)
			exec(`CREATE TRIGGER poison BEFORE INSERT ON $schema.jobs FOR EACH ROW WHEN (NEW.kind = 'poison') EXECUTE FUNCTION $schema.poison()`)
		})
	})
}

func (e *env) createJobs(key string, jobs ...map[string]any) createJobsResponse {
	e.t.Helper()
	var out createJobsResponse
	e.do("POST", "/v1/jobs/batch", key, map[string]any{"jobs": jobs}).want(e.t, http.StatusOK).json(e.t, &out)
	if len(out.Results) != len(jobs) {
		e.t.Fatalf("%d results for %d jobs", len(out.Results), len(jobs))
	}
	for i, r := range out.Results {
		if r.Index != i {
			e.t.Fatalf("results[%d].index = %d", i, r.Index)
		}
	}
	return out
}

// countJobs counts the jobs of a kind in a region's store.
func (e *env) countJobs(region, kind string) int {
	e.t.Helper()
	js, err := e.stores[region].List(context.Background(), store.ListParams{Kind: kind, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(js)
}

func withKey(body map[string]any, k string, v any) map[string]any {
	body[k] = v
	return body
}

// TestBatchEnqueuePartialFailure sends good and bad items together: each
// bad one is answered with its own problem (index in detail and fields)
// and nothing is written for it; the good ones are created.
func TestBatchEnqueuePartialFailure(t *testing.T) {
	t.Parallel()
	batchBackends(t, func(t *testing.T, e *env, _ func()) {
		e.do("PUT", "/v1/limits/tiny?region=us", adminKey, map[string]any{"per_second": 1, "burst": 2}).want(t, 200)
		out := e.createJobs(acmeKey,
			jobBody("email.send", "us"),
			jobBody(webhook.Kind, "us"), // reserved kind
			withKey(jobBody("email.send", "us", "tiny"), "cost", 5),
			jobBody("email.send", "eu"), // a second region in one batch
			withKey(jobBody("email.send", "us"), "priority", 1000),
			withKey(jobBody("email.send", "us"), "payload", map[string]any{"to": "grace@example.com"}),
		)
		if out.Created != 2 || out.Failed != 4 || out.Replayed != 0 {
			t.Fatalf("created %d failed %d replayed %d, want 2 4 0: %+v", out.Created, out.Failed, out.Replayed, out.Results)
		}
		for i, want := range []struct {
			status int
			slug   string
			field  string
		}{{201, "", ""}, {422, "reserved-kind", "jobs[1].kind"}, {400, "invalid-request", "jobs[2].cost"},
			{400, "invalid-request", "jobs[3].region"}, {400, "invalid-request", "jobs[4].priority"}, {201, "", ""}} {
			r := out.Results[i]
			if r.Status != want.status {
				t.Errorf("results[%d].status = %d, want %d: %+v", i, r.Status, want.status, r.Error)
				continue
			}
			if want.slug == "" {
				if r.ID == "" || r.State != job.StateWaiting || r.Error != nil || r.PredictedWaitSeconds == nil {
					t.Errorf("results[%d] = %+v, want a created waiting job", i, r)
				} else if got := e.getJob(r.ID); got.Region != "us" || got.Tenant != "acme" {
					t.Errorf("job %s is in %s for %s", r.ID, got.Region, got.Tenant)
				}
				continue
			}
			prefix := fmt.Sprintf("jobs[%d]: ", i)
			if r.Error == nil || r.Error.Type != problemBase+want.slug || !strings.HasPrefix(r.Error.Detail, prefix) || r.ID != "" {
				t.Errorf("results[%d] = %+v, want problem %s with detail starting %q", i, r.Error, want.slug, prefix)
				continue
			}
			if len(r.Error.Errors) == 0 || r.Error.Errors[0].Field != want.field {
				t.Errorf("results[%d] fields = %+v, want %s", i, r.Error.Errors, want.field)
			}
		}
		if n := e.countJobs("us", "email.send"); n != 2 {
			t.Errorf("%d jobs in us, want the 2 created", n)
		}
		if n := e.countJobs("eu", "email.send"); n != 0 {
			t.Errorf("%d jobs in eu, want none", n)
		}
	})
}

// TestBatchEnqueueIdempotentReplay: each item's idempotency key applies to
// its own job, across batches, within one batch and with POST /v1/jobs; a
// replay with a different body is that item's 422.
func TestBatchEnqueueIdempotentReplay(t *testing.T) {
	t.Parallel()
	batchBackends(t, func(t *testing.T, e *env, _ func()) {
		single := e.createJob(acmeKey, withKey(jobBody("email.send", "us"), "idempotency_key", "k-0"))
		items := func() []map[string]any {
			return []map[string]any{
				withKey(jobBody("email.send", "us"), "idempotency_key", "k-0"),
				withKey(jobBody("email.send", "us"), "idempotency_key", "k-1"),
				withKey(jobBody("email.send", "us"), "idempotency_key", "k-1"), // repeats the item before
				withKey(jobBody("email.send", "us"), "idempotency_key", "k-2"),
			}
		}
		first := e.createJobs(acmeKey, items()...)
		if first.Created != 2 || first.Replayed != 2 || first.Failed != 0 {
			t.Fatalf("first batch: %+v", first)
		}
		if r := first.Results[0]; !r.Replayed || r.Status != 200 || r.ID != single.ID {
			t.Errorf("k-0 = %+v, want the single enqueue's job %s replayed", r, single.ID)
		}
		if a, b := first.Results[1], first.Results[2]; a.Status != 201 || !b.Replayed || a.ID != b.ID {
			t.Errorf("k-1 twice in one batch = %+v, %+v; want one job, the second replayed", a, b)
		}
		again := items()
		again[3]["payload"] = map[string]any{"to": "someone.else@example.com"}
		second := e.createJobs(acmeKey, again...)
		if second.Created != 0 || second.Replayed != 3 || second.Failed != 1 {
			t.Fatalf("second batch: %+v", second)
		}
		for i := range 3 {
			if second.Results[i].ID != first.Results[i].ID {
				t.Errorf("results[%d] replayed %s, want %s", i, second.Results[i].ID, first.Results[i].ID)
			}
		}
		if r := second.Results[3]; r.Status != 422 || r.Error == nil || r.Error.Type != problemBase+"idempotency-mismatch" ||
			!strings.HasPrefix(r.Error.Detail, "jobs[3]: ") || !strings.Contains(r.Error.Detail, "payload") {
			t.Errorf("changed k-2 = %+v %+v, want 422 idempotency-mismatch naming payload", r, r.Error)
		}
		// Keys are per tenant: globex's k-1 is its own job.
		g := e.createJobs(globexKey, withKey(jobBody("email.send", "us"), "idempotency_key", "k-1"))
		if g.Created != 1 || g.Results[0].ID == first.Results[1].ID {
			t.Errorf("globex's k-1 = %+v, want a new job", g.Results[0])
		}
		if n := e.countJobs("us", "email.send"); n != 4 {
			t.Errorf("%d jobs, want 4 (k-0, k-1, k-2, globex's k-1)", n)
		}
	})
}

// TestBatchEnqueueAllOrNothing: the accepted items are one transaction. A
// job the database itself refuses in the middle of a batch (a trigger
// raising an error) fails the request with 500 and leaves none of the
// batch's other jobs behind.
func TestBatchEnqueueAllOrNothing(t *testing.T) {
	t.Parallel()
	batchBackends(t, func(t *testing.T, e *env, poison func()) {
		poison()
		e.do("POST", "/v1/jobs/batch", acmeKey, map[string]any{"jobs": []map[string]any{
			jobBody("email.send", "us"), jobBody("email.send", "us"), jobBody("poison", "us"), jobBody("email.send", "us"),
		}}).wantProblem(t, http.StatusInternalServerError, "internal")
		if n := e.countJobs("us", "email.send"); n != 0 {
			t.Fatalf("%d jobs of the failed batch were written, want none", n)
		}
		if out := e.createJobs(acmeKey, jobBody("email.send", "us")); out.Created != 1 {
			t.Fatalf("a later batch: %+v", out)
		}
	})
}

// TestBatchEnqueueTenantAndRegion: items follow POST /v1/jobs's rules. A
// producer's tenant field is ignored (its jobs are its tenant's); an admin
// may name a tenant per item; a key limited to eu gets 403 items for us.
func TestBatchEnqueueTenantAndRegion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := e.createJobs(acmeKey, withKey(jobBody("email.send", "us"), "tenant", "globex"))
	if got := e.getJob(out.Results[0].ID); got.Tenant != "acme" {
		t.Errorf("a producer's item with tenant globex made a job of %q, want acme", got.Tenant)
	}
	// globex does not see acme's job, whichever route it asks.
	e.do("GET", "/v1/jobs/"+out.Results[0].ID, globexKey, nil).wantProblem(t, 404, "not-found")
	adm := e.createJobs(adminKey, withKey(jobBody("email.send", "us"), "tenant", "globex"), withKey(jobBody("email.send", "us"), "tenant", "initech"))
	for i, want := range []string{"globex", "initech"} {
		if got := e.getJob(adm.Results[i].ID); got.Tenant != want {
			t.Errorf("admin item %d made a job of %q, want %q", i, got.Tenant, want)
		}
	}
	eu := e.createJobs(euKey, jobBody("email.send", "us"))
	if r := eu.Results[0]; r.Status != 403 || r.Error == nil || r.Error.Type != problemBase+"region-forbidden" || !strings.HasPrefix(r.Error.Detail, "jobs[0]: ") {
		t.Errorf("eu key's us item = %+v %+v, want 403 region-forbidden", r, r.Error)
	}
	e.do("POST", "/v1/jobs/batch", workerKey, map[string]any{"jobs": []map[string]any{jobBody("email.send", "us")}}).wantProblem(t, 403, "forbidden")
}

// TestBatchEnqueueBounds: too many items and too large a body are 413 with
// a detail naming the limit (and, for the count, the first index past it);
// an empty batch is 422, the per-job header 400; nothing is written.
func TestBatchEnqueueBounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	many := make([]map[string]any, maxBatchJobs+1)
	for i := range many {
		many[i] = jobBody("email.send", "us")
	}
	p := e.do("POST", "/v1/jobs/batch", acmeKey, map[string]any{"jobs": many}).wantProblem(t, 413, "payload-too-large")
	if !strings.Contains(p.Detail, fmt.Sprintf("jobs[%d]", maxBatchJobs)) {
		t.Errorf("detail %q does not name jobs[%d]", p.Detail, maxBatchJobs)
	}
	big := strings.Repeat("x", 200<<10)
	huge := make([]map[string]any, maxBatchBody/(200<<10)+1)
	for i := range huge {
		huge[i] = withKey(jobBody("email.send", "us"), "payload", map[string]any{"blob": big})
	}
	p = e.do("POST", "/v1/jobs/batch", acmeKey, map[string]any{"jobs": huge}).wantProblem(t, 413, "payload-too-large")
	if !strings.Contains(p.Detail, fmt.Sprint(maxBatchBody)) {
		t.Errorf("detail %q does not name the %d-byte limit", p.Detail, maxBatchBody)
	}
	e.do("POST", "/v1/jobs/batch", acmeKey, map[string]any{"jobs": []any{}}).wantProblem(t, 422, "invalid-request")
	e.do("POST", "/v1/jobs/batch", acmeKey, map[string]any{"jobs": []map[string]any{jobBody("email.send", "us")}}, "Idempotency-Key", "k").
		wantProblem(t, 400, "invalid-request")
	e.do("POST", "/v1/jobs/batch", acmeKey, `{"jobs":[{"kind":"email.send","region":"us","limit_keys":["a"],"colour":"red"}]}`).
		wantProblem(t, 400, "unknown-field")
	if n := e.countJobs("us", "email.send"); n != 0 {
		t.Errorf("%d jobs written by refused batches", n)
	}
}

// TestBatchEnqueueOverload: a batch of interactive jobs counts its own
// earlier items in each item's predicted wait, so a batch is refused for
// overload from the item that breaches the budget on, as the same jobs
// sent one by one would be.
func TestBatchEnqueueOverload(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// 1 start per second, 30 s interactive budget: about the 31st job
	// would wait past it.
	e.do("PUT", "/v1/limits/slow?region=us", adminKey, map[string]any{"per_second": 1, "burst": 1}).want(t, 200)
	items := make([]map[string]any, 40)
	for i := range items {
		items[i] = withKey(jobBody("chat.reply", "us", "slow"), "lane", "interactive")
	}
	out := e.createJobs(acmeKey, items...)
	if out.Created < 25 || out.Created > 35 || out.Failed != 40-out.Created {
		t.Fatalf("created %d failed %d of 40 at 1/s with a 30 s budget", out.Created, out.Failed)
	}
	last := out.Results[39]
	if last.Status != 429 || last.Error == nil || last.Error.Type != problemBase+"overloaded" || last.Error.PredictedWaitSeconds == nil {
		t.Errorf("last item = %+v %+v, want 429 overloaded with the predicted wait", last, last.Error)
	}
}

// TestBatchCompleteLeases: one request reports many successes; each item
// is checked like POST /v1/jobs/{id}/complete (token, tenant, repeat) and
// the accepted ones are published together.
func TestBatchCompleteLeases(t *testing.T) {
	t.Parallel()
	batchBackends(t, func(t *testing.T, e *env, _ func()) {
		for range 4 {
			e.createJob(acmeKey, jobBody("email.send", "us"))
		}
		foreign := e.createJob(globexKey, jobBody("email.send", "us"))
		l := e.lease("us", 4, "email.send")
		if len(l) != 4 {
			t.Fatalf("leased %d, want acme's 4", len(l))
		}
		var fl leaseResponse
		e.do("POST", "/v1/leases", adminKey, map[string]any{"region": "us", "kinds": []string{"email.send"}, "max": 1}).want(t, 200).json(t, &fl)
		if len(fl.Jobs) != 1 || fl.Jobs[0].ID != foreign.ID {
			t.Fatalf("admin lease = %+v, want globex's job", fl.Jobs)
		}
		item := func(id, token string) map[string]any {
			return map[string]any{"id": id, "lease_token": token, "result": map[string]any{"ok": true}, "usage": 1}
		}
		var out completeLeasesResponse
		e.do("POST", "/v1/leases/complete", workerKey, map[string]any{"region": "us", "jobs": []map[string]any{
			item(l[0].ID, l[0].LeaseToken),
			item(l[1].ID, "not-the-token"),
			item(foreign.ID, fl.Jobs[0].LeaseToken), // right token, other tenant
			item(l[0].ID, l[0].LeaseToken),          // reported twice
			item("no-such-job", "t"),
			item(l[2].ID, l[2].LeaseToken),
			{"id": l[3].ID, "lease_token": l[3].LeaseToken, "usage": -1},
		}}).want(t, 200).json(t, &out)
		want := []int{200, 409, 404, 400, 404, 200, 400}
		if out.Completed != 2 || out.Failed != 5 || len(out.Results) != len(want) {
			t.Fatalf("completed %d failed %d: %+v", out.Completed, out.Failed, out.Results)
		}
		for i, st := range want {
			r := out.Results[i]
			if r.Index != i || r.Status != st || (st == 200) != (r.Error == nil) {
				t.Errorf("results[%d] = %+v %+v, want status %d", i, r, r.Error, st)
			} else if r.Error != nil && !strings.HasPrefix(r.Error.Detail, fmt.Sprintf("jobs[%d]: ", i)) {
				t.Errorf("results[%d] detail %q lacks its index", i, r.Error.Detail)
			}
		}
		for id, st := range map[string]job.State{l[0].ID: job.StatePublished, l[2].ID: job.StatePublished,
			l[1].ID: job.StateRunning, l[3].ID: job.StateRunning, foreign.ID: job.StateRunning} {
			if got := e.getJob(id).State; got != st {
				t.Errorf("job %s is %s, want %s", id, got, st)
			}
		}
		// Bounds: an empty batch, too many items, a region the key may not use.
		e.do("POST", "/v1/leases/complete", workerKey, map[string]any{"region": "us", "jobs": []any{}}).wantProblem(t, 422, "invalid-request")
		many := make([]map[string]any, maxCompleteJobs+1)
		for i := range many {
			many[i] = item(l[1].ID, l[1].LeaseToken)
		}
		p := e.do("POST", "/v1/leases/complete", workerKey, map[string]any{"region": "us", "jobs": many}).wantProblem(t, 413, "payload-too-large")
		if !strings.Contains(p.Detail, fmt.Sprintf("jobs[%d]", maxCompleteJobs)) {
			t.Errorf("detail %q does not name jobs[%d]", p.Detail, maxCompleteJobs)
		}
		e.do("POST", "/v1/leases/complete", workerKey, map[string]any{"region": "mars", "jobs": []map[string]any{item(l[1].ID, l[1].LeaseToken)}}).
			wantProblem(t, 400, "invalid-request")
		e.do("POST", "/v1/leases/complete", acmeKey, map[string]any{"region": "us", "jobs": []map[string]any{item(l[1].ID, l[1].LeaseToken)}}).
			wantProblem(t, 403, "forbidden")
	})
}

// TestBatchCompleteEveryOutcome: each outcome an external worker can
// report on its own route (success, retryable, invalid output and
// permanent failure, a 503 with Retry-After, a 429 with headers or a
// delay) is accepted by the batch complete and lands where the single
// route lands it; items the single route would refuse are refused with
// its problem, and the rest of the batch is still recorded.
func TestBatchCompleteEveryOutcome(t *testing.T) {
	t.Parallel()
	batchBackends(t, func(t *testing.T, e *env, _ func()) {
		type tc struct {
			name   string
			route  string         // the single route
			single map[string]any // its body, without lease_token
			item   map[string]any // the batch item's fields, without id and lease_token
		}
		cases := []tc{
			{"success", "complete", map[string]any{"result": map[string]any{"ok": 1}, "usage": 3},
				map[string]any{"result": map[string]any{"ok": 1}, "usage": 3}},
			{"retryable", "fail", map[string]any{"retryable": true, "error": "upstream 502", "status": 502},
				map[string]any{"outcome": "fail", "retryable": true, "error": "upstream 502", "status": 502}},
			{"invalid output", "fail", map[string]any{"invalid_output": true, "error": "bad schema"},
				map[string]any{"outcome": "fail", "invalid_output": true, "error": "bad schema"}},
			{"permanent", "fail", map[string]any{"error": "no such mailbox", "status": 400},
				map[string]any{"outcome": "fail", "error": "no such mailbox", "status": 400}},
			{"503 with Retry-After", "fail", map[string]any{"retryable": true, "status": 503, "headers": map[string]string{"Retry-After": "7"}},
				map[string]any{"outcome": "fail", "retryable": true, "status": 503, "headers": map[string]string{"Retry-After": "7"}}},
			{"429 headers", "rate-limited", map[string]any{"headers": map[string]string{"Retry-After": "5"}},
				map[string]any{"outcome": "rate_limited", "headers": map[string]string{"Retry-After": "5"}}},
			{"429 delay and scope", "rate-limited", map[string]any{"retry_after_seconds": 2.5, "scope": "SCOPE"},
				map[string]any{"outcome": "rate_limited", "retry_after_seconds": 2.5, "scope": "SCOPE"}},
		}
		// Two jobs per case, each case on its own limit key so that one
		// case's pause does not hold back another's lease.
		key := func(i, copy int) string { return fmt.Sprintf("case%d-%d:k", i, copy) }
		for i := range cases {
			for c := range 2 {
				e.createJob(acmeKey, jobBody("email.send", "us", key(i, c)))
			}
		}
		leased := e.lease("us", 2*len(cases), "email.send")
		if len(leased) != 2*len(cases) {
			t.Fatalf("leased %d, want %d", len(leased), 2*len(cases))
		}
		byKey := map[string]jobView{}
		for _, j := range leased {
			byKey[j.LimitKeys[0]] = j
		}
		withScope := func(m map[string]any, scope string) map[string]any {
			out := map[string]any{}
			for k, v := range m {
				if v == "SCOPE" {
					v = scope
				}
				out[k] = v
			}
			return out
		}
		var items []map[string]any
		for i, c := range cases {
			j := byKey[key(i, 1)]
			it := withScope(c.item, key(i, 1))
			it["id"], it["lease_token"] = j.ID, j.LeaseToken
			items = append(items, it)
		}
		// Refused items, each next to good ones: what the single routes
		// refuse, plus fields of another outcome.
		bad := []struct {
			item  map[string]any
			field string
		}{
			{map[string]any{"outcome": "retry"}, "outcome"},
			{map[string]any{"outcome": "fail", "result": map[string]any{"ok": 1}}, "result"},
			{map[string]any{"retryable": true}, "retryable"},
			{map[string]any{"outcome": "rate_limited", "scope": "not-its-key"}, "scope"},
			{map[string]any{"outcome": "rate_limited", "retry_after_seconds": -1}, "retry_after_seconds"},
			{map[string]any{"outcome": "fail", "error": strings.Repeat("x", maxErrorLen+1)}, "error"},
			{map[string]any{"outcome": "fail", "status": 1000}, "status"},
		}
		victim := byKey[key(0, 0)] // still held: every bad item names it
		for _, b := range bad {
			b.item["id"], b.item["lease_token"] = victim.ID, victim.LeaseToken
			items = append(items, b.item)
		}
		var out completeLeasesResponse
		e.do("POST", "/v1/leases/complete", workerKey, map[string]any{"region": "us", "jobs": items}).want(t, 200).json(t, &out)
		if out.Completed != len(cases) || out.Failed != len(bad) || len(out.Results) != len(items) {
			t.Fatalf("completed %d failed %d of %d: %+v", out.Completed, out.Failed, len(items), out.Results)
		}
		for k, b := range bad {
			r := out.Results[len(cases)+k]
			want := fmt.Sprintf("jobs[%d].%s", len(cases)+k, b.field)
			if r.Status != 400 || r.Error == nil || len(r.Error.Errors) != 1 || r.Error.Errors[0].Field != want {
				t.Errorf("bad item %v = %+v %+v, want 400 on %s", b.item, r, r.Error, want)
			}
		}
		if got := e.getJob(victim.ID).State; got != job.StateRunning {
			t.Errorf("the job every refused item named is %s, want still running", got)
		}
		// Now the same outcomes through the single routes: the same
		// transitions.
		for i, c := range cases {
			j := byKey[key(i, 0)]
			if i == 0 {
				j = victim
			}
			body := withScope(c.single, key(i, 0))
			body["lease_token"] = j.LeaseToken
			var one outcomeResponse
			e.do("POST", "/v1/jobs/"+j.ID+"/"+c.route, workerKey, body).want(t, 200).json(t, &one)
			r := out.Results[i]
			if r.Status != 200 || r.State != one.State || r.Reason != one.Reason || r.EligibleAt.IsZero() != one.EligibleAt.IsZero() {
				t.Errorf("%s: batch item %+v, single route %+v", c.name, r, one)
			}
			if got := e.getJob(r.ID).State; got != r.State {
				t.Errorf("%s: job is %s, the batch answered %s", c.name, got, r.State)
			}
			if c.route == "rate-limited" || c.name == "503 with Retry-After" {
				var lv limitView
				e.do("GET", "/v1/limits/"+key(i, 1)+"?region=us", adminKey, nil).want(t, 200).json(t, &lv)
				if !lv.PausedUntil.After(e.clock.Now()) {
					t.Errorf("%s: key %s is not paused after the batch's 429", c.name, key(i, 1))
				}
			}
		}
		if out.Results[0].State != job.StatePublished {
			t.Errorf("success went to %s", out.Results[0].State)
		}
	})
}

// TestBatchEnqueueUnserved: a batch item of a kind nothing leases carries
// the same unserved note as POST /v1/jobs, and none once it is served.
func TestBatchEnqueueUnserved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	single := e.createJob(acmeKey, jobBody("report", "us"))
	if single.Unserved == nil {
		t.Fatal("single create of an unserved kind has no note")
	}
	out := e.createJobs(acmeKey, jobBody("report", "us"), withKey(jobBody("report", "us"), "idempotency_key", "u-1"))
	for i, r := range out.Results {
		if r.Status != 201 || r.Unserved == nil || r.Unserved.Detail != single.Unserved.Detail {
			t.Errorf("results[%d] = %+v unserved %+v, want the single create's note %q", i, r, r.Unserved, single.Unserved.Detail)
		}
	}
	if len(e.lease("us", 1, "report")) != 1 {
		t.Fatal("lease of the kind found nothing")
	}
	out = e.createJobs(acmeKey, jobBody("report", "us"), withKey(jobBody("report", "us"), "idempotency_key", "u-1"))
	for i, r := range out.Results {
		if r.Unserved != nil {
			t.Errorf("results[%d] still unserved once the kind is leased: %+v", i, r.Unserved)
		}
	}
}

// TestBatchCompleteLeasedHere: the jobs a lease through this server
// returned are reported without reading them back (leasedJobs), and that
// shortcut answers exactly as the store read would: a cancelled job's
// outcome is refused (the guarded write conflicts), a lease another node
// extended past the remembered expiry is still held, an expired lease
// is lost.
func TestBatchCompleteLeasedHere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for range 4 {
		e.createJob(acmeKey, jobBody("email.send", "us"))
	}
	l := e.lease("us", 4, "email.send") // 60 s leases
	if len(l) != 4 {
		t.Fatalf("leased %d", len(l))
	}
	now := e.clock.Now()
	for _, j := range l {
		if c := e.srv.leased.get(j.ID, j.LeaseToken, now); c == nil || c.Region != "us" {
			t.Fatalf("job %s leased here is not remembered for region us: %+v", j.ID, c)
		}
	}
	item := func(j jobView) map[string]any {
		return map[string]any{"id": j.ID, "lease_token": j.LeaseToken, "result": map[string]any{"ok": true}}
	}
	complete := func(items ...map[string]any) completeLeasesResponse {
		var out completeLeasesResponse
		e.do("POST", "/v1/leases/complete", workerKey, map[string]any{"region": "us", "jobs": items}).want(t, 200).json(t, &out)
		return out
	}
	// l[0]: cancelled by its producer while leased.
	e.do("POST", "/v1/jobs/"+l[0].ID+"/cancel?region=us", acmeKey, nil).want(t, 200)
	// l[1]: its lease extended to 10 minutes on another node (its writer,
	// not this server).
	if _, err := e.srv.jobs["us"].Heartbeat(context.Background(), l[1].ID, l[1].LeaseToken, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	// A heartbeat through this server moves the remembered expiry.
	e.do("POST", "/v1/jobs/"+l[3].ID+"/heartbeat?region=us", workerKey, map[string]any{"lease_token": l[3].LeaseToken, "lease_seconds": 600}).want(t, 200)
	e.clock.Add(90 * time.Second) // past the 60 s every lease was remembered with
	out := complete(item(l[0]), item(l[1]), item(l[2]))
	want := []int{409, 200, 409}
	for i, st := range want {
		if out.Results[i].Status != st {
			t.Errorf("results[%d] = %+v %+v, want %d", i, out.Results[i], out.Results[i].Error, st)
		}
	}
	for id, st := range map[string]job.State{l[0].ID: job.StateTerminal, l[1].ID: job.StatePublished, l[2].ID: job.StateRunning} {
		if got := e.getJob(id).State; got != st {
			t.Errorf("job %s is %s, want %s", id, got, st)
		}
	}
	// A report forgets the job: a repeat reads the store and is refused.
	if e.srv.leased.get(l[1].ID, l[1].LeaseToken, e.clock.Now()) != nil {
		t.Error("a reported job is still remembered")
	}
	if r := complete(item(l[1])).Results[0]; r.Status != 409 {
		t.Errorf("second report of a published job = %+v, want 409", r)
	}
	// l[3] was heartbeated through this server: remembered with its new expiry.
	if c := e.srv.leased.get(l[3].ID, l[3].LeaseToken, e.clock.Now()); c == nil {
		t.Error("a job heartbeated here is not remembered with its new expiry")
	}
	if r := complete(item(l[3])).Results[0]; r.Status != 200 || r.State != job.StatePublished {
		t.Errorf("report after a heartbeat here = %+v %+v", r, r.Error)
	}
}
