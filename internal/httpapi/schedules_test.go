package httpapi

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/schedule"
)

// createSchedule creates an every-minute schedule of acme named name.
func (e *env) createSchedule(region, name string) scheduleView {
	e.t.Helper()
	var v scheduleView
	e.do("POST", "/v1/schedules", acmeKey, map[string]any{
		"name": name, "region": region, "cron": "* * * * *", "job": map[string]any{"kind": "report.build", "limit_keys": []string{"reports"}},
	}).want(e.t, 201).json(e.t, &v)
	return v
}

func TestScheduleCRUD(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	region := e.srv.regions[0]
	var v scheduleView
	created := e.do("POST", "/v1/schedules", acmeKey, map[string]any{
		"name": "nightly", "region": region, "cron": "30 2 * * *", "timezone": "Europe/Berlin", "missed": "catch_up", "catch_up_max": 3,
		"job": map[string]any{"kind": "report.build", "limit_keys": []string{"reports"}, "payload": map[string]any{"r": 1}},
	}).want(t, 201)
	created.json(t, &v)
	// The answer to the create spells next_tick_at as every later read
	// does (UTC), not in the schedule's zone: one instant, one spelling.
	var made, read struct {
		NextTickAt string `json:"next_tick_at"`
	}
	created.json(t, &made)
	e.do("GET", "/v1/schedules/"+v.ID, acmeKey, nil).want(t, 200).json(t, &read)
	if made.NextTickAt != read.NextTickAt || !strings.HasSuffix(made.NextTickAt, "Z") {
		t.Fatalf("next_tick_at created %q, read back %q: want one UTC spelling", made.NextTickAt, read.NextTickAt)
	}
	if v.Tenant != "acme" || v.Timezone != "Europe/Berlin" || v.Missed != "catch_up" || v.CatchUpMax != 3 || v.Job.Kind != "report.build" ||
		string(v.Job.Payload) != `{"r":1}` || v.NextTickAt.IsZero() || v.Paused {
		t.Fatalf("created: %+v", v)
	}
	loc, _ := time.LoadLocation("Europe/Berlin")
	if nt := v.NextTickAt.In(loc); nt.Hour() != 2 || nt.Minute() != 30 {
		t.Fatalf("next tick %s is not 02:30 in Berlin", nt)
	}
	if v.MaxLateSeconds != 86400 {
		t.Fatalf("catch_up's default max_late_seconds is %v, want 86400", v.MaxLateSeconds)
	}
	if d := e.createSchedule(region, "defaults"); d.Missed != "skip" || d.CatchUpMax != 1 || d.MaxLateSeconds != 60 || d.Timezone != "UTC" {
		t.Fatalf("defaults: %+v", d)
	}
	e.do("POST", "/v1/schedules", acmeKey, map[string]any{
		"name": "nightly", "region": region, "cron": "* * * * *", "job": map[string]any{"kind": "x", "limit_keys": []string{"k"}},
	}).want(t, 409)
	e.do("GET", "/v1/schedules/"+v.ID, acmeKey, nil).want(t, 200)
	e.do("GET", "/v1/schedules/"+v.ID, globexKey, nil).want(t, 404) // another tenant's: as unknown
	e.do("POST", "/v1/schedules/"+v.ID+"/pause", globexKey, nil).want(t, 404)
	var paused scheduleView
	e.do("POST", "/v1/schedules/"+v.ID+"/pause", acmeKey, nil).want(t, 200).json(t, &paused)
	if !paused.Paused {
		t.Fatal("pause did not pause")
	}
	var resumed scheduleView
	e.do("POST", "/v1/schedules/"+v.ID+"/resume", acmeKey, nil).want(t, 200).json(t, &resumed)
	if resumed.Paused || resumed.NextTickAt.Before(e.clock.Now()) {
		t.Fatalf("resumed: %+v", resumed)
	}
	var put scheduleView
	e.do("PUT", "/v1/schedules/"+v.ID, acmeKey, map[string]any{
		"name": "nightly", "region": region, "every_seconds": 3600, "job": map[string]any{"kind": "report.build", "limit_keys": []string{"reports"}},
	}).want(t, 200).json(t, &put)
	if put.EverySeconds != 3600 || put.Cron != "" || !put.NextTickAt.Equal(e.clock.Now().Add(time.Hour)) {
		t.Fatalf("after PUT: %+v (now %s)", put, e.clock.Now())
	}
	for i := range 2 {
		e.createSchedule(region, "s"+string(rune('a'+i)))
	}
	var page scheduleList
	e.do("GET", "/v1/schedules?limit=2", acmeKey, nil).want(t, 200).json(t, &page)
	if len(page.Schedules) != 2 || page.NextCursor == "" {
		t.Fatalf("first page: %+v", page)
	}
	var rest scheduleList
	e.do("GET", "/v1/schedules?limit=2&after="+page.NextCursor, acmeKey, nil).want(t, 200).json(t, &rest)
	if len(rest.Schedules) != 2 || rest.NextCursor != "" {
		t.Fatalf("second page: %+v", rest)
	}
	var none scheduleList
	e.do("GET", "/v1/schedules", globexKey, nil).want(t, 200).json(t, &none)
	if len(none.Schedules) != 0 {
		t.Fatalf("globex sees acme's schedules: %+v", none)
	}
	e.do("GET", "/v1/schedules?tenant=acme", globexKey, nil).want(t, 403)
	e.do("DELETE", "/v1/schedules/"+v.ID, globexKey, nil).want(t, 404)
	e.do("DELETE", "/v1/schedules/"+v.ID, acmeKey, nil).want(t, 204)
	e.do("GET", "/v1/schedules/"+v.ID, acmeKey, nil).want(t, 404)
}

func TestScheduleRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	region := e.srv.regions[0]
	body := func(mut func(m map[string]any)) map[string]any {
		m := map[string]any{"name": "bad", "region": region, "cron": "* * * * *",
			"job": map[string]any{"kind": "report.build", "limit_keys": []string{"reports"}}}
		mut(m)
		return m
	}
	cases := []struct {
		name   string
		mut    func(m map[string]any)
		status int
		field  string
	}{
		{"bad cron", func(m map[string]any) { m["cron"] = "every tuesday" }, 422, "cron"},
		{"cron field out of range", func(m map[string]any) { m["cron"] = "0 25 * * *" }, 422, "cron"},
		{"both cron and every", func(m map[string]any) { m["every_seconds"] = 60 }, 422, "every_seconds"},
		{"neither", func(m map[string]any) { delete(m, "cron") }, 422, "cron"},
		{"short interval", func(m map[string]any) { delete(m, "cron"); m["every_seconds"] = 0.5 }, 422, "every_seconds"},
		{"unknown zone", func(m map[string]any) { m["timezone"] = "Europe/Atlantis" }, 422, "timezone"},
		{"unknown policy", func(m map[string]any) { m["missed"] = "retry" }, 422, "missed"},
		{"catch_up_max with skip", func(m map[string]any) { m["catch_up_max"] = 5 }, 422, "catch_up_max"},
		{"reserved kind", func(m map[string]any) { m["job"].(map[string]any)["kind"] = "ratelane.webhook" }, 422, "job.kind"},
		{"no limit keys", func(m map[string]any) { delete(m["job"].(map[string]any), "limit_keys") }, 422, "job.limit_keys"},
		{"cost no key admits", func(m map[string]any) { m["job"].(map[string]any)["cost"] = 1e13 }, 422, "job.cost"},
		{"unknown region", func(m map[string]any) { m["region"] = "mars" }, 400, "region"},
		{"no name", func(m map[string]any) { m["name"] = "" }, 422, "name"},
	}
	for _, c := range cases {
		r := e.do("POST", "/v1/schedules", acmeKey, body(c.mut)).want(t, c.status)
		var p Problem
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.header.Get("Content-Type") != "application/problem+json" || len(p.Errors) == 0 || p.Errors[0].Field != c.field ||
			!strings.Contains(p.Detail, c.field) {
			t.Errorf("%s: %d %+v; want problem+json naming %s in its detail and errors", c.name, r.status, p, c.field)
		}
		if c.status == 422 && c.field != "job.kind" && p.Type != problemBase+"invalid-schedule" {
			t.Errorf("%s: type %s, want invalid-schedule", c.name, p.Type)
		}
	}
}

// A tick's job shows, in GET /v1/jobs/{id}, the schedule and tick that
// produced it; the producer runs on the region's store with the test clock.
func TestJobViewNamesItsSchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	region := e.srv.regions[0]
	sc := e.createSchedule(region, "minutely")
	st := e.srv.cfg.Regions[region]
	jobs, err := engine.NewJobs(engine.JobsConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	p, err := schedule.New(schedule.Config{Store: st, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.RunOnce(context.Background(), sc.NextTickAt.Add(time.Second))
	if err != nil || res.Enqueued != 1 {
		t.Fatalf("poll: %+v, %v", res, err)
	}
	var got scheduleView
	e.do("GET", "/v1/schedules/"+sc.ID, acmeKey, nil).want(t, 200).json(t, &got)
	if got.Produced != 1 || len(got.RecentTicks) != 1 || got.LastJobID != got.RecentTicks[0].JobID {
		t.Fatalf("schedule after a tick: %+v", got)
	}
	var jv struct {
		ID       string       `json:"id"`
		Schedule *jobSchedule `json:"schedule"`
	}
	e.do("GET", "/v1/jobs/"+got.LastJobID, acmeKey, nil).want(t, 200).json(t, &jv)
	if jv.Schedule == nil || jv.Schedule.ID != sc.ID || !jv.Schedule.Tick.Equal(sc.NextTickAt) {
		t.Fatalf("job view: %+v; want schedule %s tick %s", jv.Schedule, sc.ID, sc.NextTickAt)
	}
}
