package main

// This file holds the schedule verbs over /v1/schedules: periodic producers
// that enqueue a job once per tick of a cron expression or fixed interval.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

func init() {
	registerVerbs("schedules", "create, list, show, update, pause, resume and delete schedules (periodic producers)", scheduleVerbs)
}

// scheduleFlags are the flags of schedules create and update; the body
// mirrors the API's schedule request.
type scheduleFlags struct {
	region, tenant, cron, timezone, missed, kind, lane, payload string
	every, maxLate                                              time.Duration
	catchUpMax, priority                                        int
	cost                                                        int64
	keys                                                        stringList
	paused                                                      bool
}

func (sf *scheduleFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&sf.region, "region", "", "the schedule's region, where its jobs live (required)")
	fs.StringVar(&sf.tenant, "tenant", "", "admin keys: the tenant whose schedule it is")
	fs.StringVar(&sf.cron, "cron", "", "a cron `EXPRESSION`: minute hour day-of-month month day-of-week, or @hourly, @daily, ...")
	fs.DurationVar(&sf.every, "every", 0, "or: a fixed interval, e.g. 15m (at least 1s)")
	fs.StringVar(&sf.timezone, "timezone", "", "IANA time `ZONE` the cron fields are read in (default UTC)")
	fs.StringVar(&sf.missed, "missed", "", "missed-tick policy: skip (default) or catch_up")
	fs.IntVar(&sf.catchUpMax, "catch-up-max", 0, "catch_up: most missed ticks enqueued at once (server default 10)")
	fs.DurationVar(&sf.maxLate, "max-late", 0, "age past which a due tick is skipped (server default 1m for skip, 24h for catch_up)")
	fs.BoolVar(&sf.paused, "paused", false, "create or leave the schedule paused")
	fs.StringVar(&sf.kind, "kind", "", "the job kind every tick enqueues (required)")
	fs.Var(&sf.keys, "key", "a `LIMIT_KEY` each job names; repeat for several (required)")
	fs.StringVar(&sf.lane, "lane", "", "interactive or batch (default batch)")
	fs.StringVar(&sf.payload, "payload", "", "JSON payload of every job, or @file, or @- for stdin")
	fs.IntVar(&sf.priority, "priority", 0, "-100..100, higher first")
	fs.Int64Var(&sf.cost, "cost", 0, "what one start takes from each key's bucket (default 1)")
}

func (sf *scheduleFlags) body(name string) (map[string]any, error) {
	switch {
	case sf.region == "":
		return nil, usageError{"--region is required"}
	case sf.cron == "" && sf.every == 0:
		return nil, usageError{"--cron or --every is required"}
	case sf.kind == "":
		return nil, usageError{"--kind is required"}
	case len(sf.keys) == 0:
		return nil, usageError{"--key is required (repeat it for several limit keys)"}
	case sf.every < 0 || sf.maxLate < 0 || sf.catchUpMax < 0:
		return nil, usageError{"--every, --max-late and --catch-up-max must not be negative"}
	}
	j := map[string]any{"kind": sf.kind, "limit_keys": []string(sf.keys)}
	if sf.lane != "" {
		j["lane"] = sf.lane
	}
	if sf.priority != 0 {
		j["priority"] = sf.priority
	}
	if sf.cost != 0 {
		j["cost"] = sf.cost
	}
	if sf.payload != "" {
		p, err := readPayload(sf.payload)
		if err != nil {
			return nil, err
		}
		j["payload"] = json.RawMessage(p)
	}
	b := map[string]any{"name": name, "region": sf.region, "job": j}
	for k, v := range map[string]string{"tenant": sf.tenant, "cron": sf.cron, "timezone": sf.timezone, "missed": sf.missed} {
		if v != "" {
			b[k] = v
		}
	}
	if sf.every != 0 {
		b["every_seconds"] = sf.every.Seconds()
	}
	if sf.catchUpMax != 0 {
		b["catch_up_max"] = sf.catchUpMax
	}
	if sf.maxLate != 0 {
		b["max_late_seconds"] = sf.maxLate.Seconds()
	}
	if sf.paused {
		b["paused"] = true
	}
	return b, nil
}

// scheduleRow is the part of the API's schedule the tables show.
type scheduleRow struct {
	ID           string  `json:"id"`
	Name         string  `json:"name"`
	Tenant       string  `json:"tenant"`
	Region       string  `json:"region"`
	Cron         string  `json:"cron"`
	EverySeconds float64 `json:"every_seconds"`
	Timezone     string  `json:"timezone"`
	Missed       string  `json:"missed"`
	Paused       bool    `json:"paused"`
	NextTickAt   string  `json:"next_tick_at"`
	Produced     int64   `json:"produced"`
	Skipped      int64   `json:"skipped"`
	Job          struct {
		Kind string `json:"kind"`
	} `json:"job"`
}

func (s scheduleRow) spec() string {
	if s.Cron != "" {
		return s.Cron + " " + s.Timezone
	}
	return "every " + (time.Duration(s.EverySeconds * float64(time.Second))).String()
}

func (s scheduleRow) state() string {
	if s.Paused {
		return "paused"
	}
	return "active"
}

func showSchedule(done string) func(io.Writer, []string, []byte) error {
	return func(w io.Writer, _ []string, body []byte) error {
		var s scheduleRow
		if err := json.Unmarshal(body, &s); err != nil {
			return fmt.Errorf("unexpected response: %w", err)
		}
		fmt.Fprintf(w, "%s schedule %s %q (region %s, %s, %s); next tick %s\n", done, s.ID, s.Name, s.Region, s.spec(), s.state(), when(s.NextTickAt))
		return nil
	}
}

func scheduleVerbs() []subcommand {
	var region string
	rq := func() url.Values { return regionQuery(region) }
	regionFlag := func(fs *flag.FlagSet) {
		fs.StringVar(&region, "region", "", "the schedule's region (default: every region the key may use is searched)")
	}
	one := func(name, summary, method, suffix string, show func(io.Writer, []string, []byte) error, done func([]string) string) apiCall {
		return apiCall{name: "schedules " + name, usage: "ID [flags]", summary: summary, args: []string{"ID"}, flags: regionFlag,
			request: func(pos []string) (string, string, url.Values, any, error) {
				return method, "/v1/schedules/" + esc(pos[0]) + suffix, rq(), nil, nil
			}, show: show, done: done}
	}
	cf := &scheduleFlags{}
	create := apiCall{name: "schedules create", usage: "NAME (--cron EXPR | --every DURATION) --kind KIND --key LIMIT_KEY --region REGION [flags]",
		summary: "Create a schedule: a job enqueued once per tick, exactly once across nodes (POST /v1/schedules).",
		args:    []string{"NAME"}, flags: cf.define,
		request: func(pos []string) (string, string, url.Values, any, error) {
			b, err := cf.body(pos[0])
			return http.MethodPost, "/v1/schedules", nil, b, err
		}, show: showSchedule("created")}
	uf := &scheduleFlags{}
	var name string
	update := apiCall{name: "schedules update", usage: "ID --name NAME (--cron EXPR | --every DURATION) --kind KIND --key LIMIT_KEY --region REGION [flags]",
		summary: "Replace a schedule's definition (PUT /v1/schedules/ID); a changed cron, interval or zone restarts it from its next tick.",
		args:    []string{"ID"}, flags: func(fs *flag.FlagSet) {
			uf.define(fs)
			fs.StringVar(&name, "name", "", "the schedule's name (required: the whole definition is replaced)")
		},
		request: func(pos []string) (string, string, url.Values, any, error) {
			if name == "" {
				return "", "", nil, nil, usageError{"--name is required"}
			}
			b, err := uf.body(name)
			return http.MethodPut, "/v1/schedules/" + esc(pos[0]), regionQuery(uf.region), b, err
		}, show: showSchedule("updated")}
	list := listCall("schedules ls", "List schedules in id order.", "/v1/schedules", []listFilter{
		{"region", "list one region (default every region the key may use)"},
		{"tenant", "admin keys: only this tenant's schedules"},
	}, listTable[scheduleRow]{keys: []string{"schedules"}, noun: "schedule",
		header: []string{"ID", "NAME", "REGION", "TENANT", "SCHEDULE", "KIND", "STATE", "NEXT TICK", "PRODUCED", "SKIPPED"},
		row: func(s scheduleRow) []string {
			return []string{s.ID, s.Name, s.Region, s.Tenant, s.spec(), s.Job.Kind, s.state(), when(s.NextTickAt),
				strconv.FormatInt(s.Produced, 10), strconv.FormatInt(s.Skipped, 10)}
		}})
	get := one("get", "Show a schedule: its definition, next tick, counters and the last ticks enqueued.", http.MethodGet, "",
		func(w io.Writer, _ []string, body []byte) error { return showFields(w, body) }, nil)
	pause := one("pause", "Pause a schedule: no tick is enqueued until it is resumed.", http.MethodPost, "/pause", showSchedule("paused"), nil)
	resume := one("resume", "Resume a schedule from its next tick after now (the ticks of the pause are not enqueued).", http.MethodPost, "/resume",
		showSchedule("resumed"), nil)
	del := one("rm", "Delete a schedule; the jobs it produced stay.", http.MethodDelete, "", nil,
		func(pos []string) string { return "deleted schedule " + pos[0] })
	return []subcommand{
		{"create", "create a schedule", create.run},
		{"ls", "list schedules", list.run},
		{"get", "show a schedule", get.run},
		{"update", "replace a schedule's definition", update.run},
		{"pause", "pause a schedule", pause.run},
		{"resume", "resume a schedule", resume.run},
		{"rm", "delete a schedule", del.run},
	}
}
