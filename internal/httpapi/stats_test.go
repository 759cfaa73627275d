package httpapi

import (
	"testing"
)

// TestStatsAndLimitCountsAreReal: GET /v1/stats reports each region and
// lane's starts and 429s, and GET /v1/limits each key's admitted starts
// and cost, from the region writer's counts of real leases and outcomes
// (here an external worker's over the API), with the server's time of the
// read for rates.
func TestStatsAndLimitCountsAreReal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	inter := jobBody("email.send", "us", "smtp:acme")
	inter["lane"], inter["cost"] = "interactive", 2
	e.createJob(acmeKey, inter)
	for range 2 {
		e.createJob(acmeKey, jobBody("email.send", "us", "smtp:acme"))
	}
	got := e.lease("us", 10, "email.send")
	if len(got) != 3 {
		t.Fatalf("leased %d jobs, want 3", len(got))
	}
	e.do("POST", "/v1/jobs/"+got[0].ID+"/rate-limited?region=us", workerKey,
		map[string]any{"lease_token": got[0].LeaseToken, "headers": map[string]string{"Retry-After": "30"}}).want(t, 200)

	var st statsResponse
	e.do("GET", "/v1/stats", adminKey, nil).want(t, 200).json(t, &st)
	if !st.At.Equal(e.clock.Now()) {
		t.Errorf("stats at %v, want the server's clock %v", st.At, e.clock.Now())
	}
	lanes := map[string]laneStats{}
	for _, r := range st.Regions {
		for _, l := range r.Lanes {
			lanes[r.Region+"/"+string(l.Lane)] = l
		}
	}
	us, usBatch, eu := lanes["us/interactive"], lanes["us/batch"], lanes["eu/interactive"]
	if us.Starts != 1 || usBatch.Starts != 2 || eu.Starts != 0 {
		t.Fatalf("starts: us interactive %d, us batch %d, eu interactive %d; want 1, 2, 0", us.Starts, usBatch.Starts, eu.Starts)
	}
	if limited := us.RateLimited + usBatch.RateLimited; limited != 1 {
		t.Fatalf("429s in us: %d + %d, want 1 in all", us.RateLimited, usBatch.RateLimited)
	}
	if got[0].Lane == "interactive" && us.RateLimited != 1 {
		t.Fatalf("the interactive job's 429 counted on batch: %+v", lanes)
	}

	var list limitList
	e.do("GET", "/v1/limits?region=us", adminKey, nil).want(t, 200).json(t, &list)
	var smtp *limitView
	for i := range list.Limits {
		if list.Limits[i].Name == "smtp:acme" {
			smtp = &list.Limits[i]
		}
	}
	if smtp == nil || smtp.Admitted == nil {
		t.Fatalf("smtp:acme in %+v has no admitted counts", list.Limits)
	}
	if a := smtp.Admitted; a.Starts != 3 || a.Cost != 4 || a.RateLimited != 1 {
		t.Fatalf("smtp:acme admitted %+v, want 3 starts of cost 4 and one 429", a)
	}
	if list.At.IsZero() {
		t.Error("limits list has no at")
	}
}

// TestPerStartKeyAdmittedCost: a per_start key's admitted cost counts one
// unit a start (what its lease charged), not the jobs' cost, while a cost
// key named beside it by the same jobs sums their cost.
func TestPerStartKeyAdmittedCost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("PUT", "/v1/limits/rpm:acme?region=us", adminKey, map[string]any{"per_second": 100, "burst": 100, "per_start": true}).want(t, 200)
	e.do("PUT", "/v1/limits/tpm:acme?region=us", adminKey, map[string]any{"per_second": 100, "burst": 100}).want(t, 200)
	for range 2 {
		b := jobBody("email.send", "us", "rpm:acme", "tpm:acme")
		b["cost"] = 5
		e.createJob(acmeKey, b)
	}
	if got := e.lease("us", 10, "email.send"); len(got) != 2 {
		t.Fatalf("leased %d jobs, want 2", len(got))
	}
	var list limitList
	e.do("GET", "/v1/limits?region=us", adminKey, nil).want(t, 200).json(t, &list)
	admitted := map[string]admittedCounts{}
	for _, l := range list.Limits {
		if l.Admitted != nil {
			admitted[l.Name] = *l.Admitted
		}
	}
	if a := admitted["rpm:acme"]; a.Starts != 2 || a.Cost != 2 {
		t.Errorf("per-start rpm:acme admitted %+v, want 2 starts taking 2 units", a)
	}
	if a := admitted["tpm:acme"]; a.Starts != 2 || a.Cost != 10 {
		t.Errorf("tpm:acme admitted %+v, want 2 starts of cost 5 each", a)
	}
}
