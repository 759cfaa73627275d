package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/testkit"
)

// The schedule verbs end to end against a live server whose client runs
// the region's producer on the wall clock: a one-second interval schedule
// produces a job, visible with jobs ls, and names its schedule in jobs get.
func TestLiveSchedules(t *testing.T) {
	t.Parallel()
	api := newLiveAPI(t)
	out := api.ok(t, "schedules", "create", "tick", "--region", "eu", "--every", "1s", "--kind", "report.build", "--key", "reports",
		"--payload", `{"r":1}`)
	if !strings.Contains(out, "created schedule") || !strings.Contains(out, "every 1s") {
		t.Fatalf("create printed %q", out)
	}
	var list struct {
		Schedules []struct {
			ID, Name string
		} `json:"schedules"`
	}
	api.okJSON(t, &list, "schedules", "ls")
	if len(list.Schedules) != 1 || list.Schedules[0].Name != "tick" {
		t.Fatalf("ls: %+v", list)
	}
	id := list.Schedules[0].ID
	if out := api.ok(t, "schedules", "ls"); !strings.Contains(out, "tick") || !strings.Contains(out, "every 1s") {
		t.Fatalf("ls table: %s", out)
	}
	var jobID string
	testkit.WaitFor(t, testkit.Timeout, "a tick's job", func() bool {
		var sc struct {
			LastJobID string `json:"last_job_id"`
		}
		api.okJSON(t, &sc, "schedules", "get", id)
		jobID = sc.LastJobID
		return jobID != ""
	})
	var j struct {
		Kind     string `json:"kind"`
		Schedule struct {
			ID string `json:"id"`
		} `json:"schedule"`
	}
	api.okJSON(t, &j, "jobs", "get", jobID)
	if j.Kind != "report.build" || j.Schedule.ID != id {
		t.Fatalf("the tick's job: %+v", j)
	}
	if out := api.ok(t, "schedules", "pause", id); !strings.Contains(out, "paused") {
		t.Fatalf("pause printed %q", out)
	}
	if out := api.ok(t, "schedules", "resume", id); !strings.Contains(out, "resumed") || !strings.Contains(out, "active") {
		t.Fatalf("resume printed %q", out)
	}
	y := api.ok(t, "schedules", "get", id, "-o", "yaml")
	if !strings.Contains(y, "name: tick") {
		t.Fatalf("yaml: %s", y)
	}
	code, _, errOut := api.cli(t, "schedules", "create", "bad", "--region", "eu", "--cron", "61 * * * *", "--kind", "k", "--key", "k")
	if code == 0 || !strings.Contains(errOut, "cron") {
		t.Fatalf("a bad cron: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = api.cli(t, "schedules", "create", "bad", "--region", "eu", "--kind", "k", "--key", "k")
	if code == 0 || !strings.Contains(errOut, "--cron or --every") {
		t.Fatalf("no spec: exit %d, stderr %q", code, errOut)
	}
	if out := api.ok(t, "schedules", "rm", id); !strings.Contains(out, "deleted schedule "+id) {
		t.Fatalf("rm printed %q", out)
	}
	var after json.RawMessage
	api.okJSON(t, &after, "schedules", "ls")
	if strings.Contains(string(after), id) {
		t.Fatalf("ls after rm: %s", after)
	}
}
