package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/schedule"
	"github.com/ratelane/ratelane/internal/store"
)

// scheduleRequest is the body of POST /v1/schedules and PUT
// /v1/schedules/{id}.
type scheduleRequest struct {
	Name           string            `json:"name" required:"true" doc:"unique within the tenant, at most 200 bytes"`
	Region         string            `json:"region" required:"true" doc:"the region the schedule and every job it produces live in"`
	Tenant         string            `json:"tenant,omitempty" doc:"admin keys only; other keys always use their own tenant"`
	Cron           string            `json:"cron,omitempty" doc:"cron expression: minute hour day-of-month month day-of-week, or @hourly, @daily, @weekly, @monthly, @yearly; set cron or every_seconds"`
	EverySeconds   float64           `json:"every_seconds,omitempty" doc:"a fixed interval in seconds (at least 1), counted from the schedule's creation"`
	Timezone       string            `json:"timezone,omitempty" doc:"IANA time zone the cron fields are read in; default UTC"`
	Missed         string            `json:"missed,omitempty" enum:"skip,catch_up" doc:"missed-tick policy: skip (default: only the latest due tick, if at most max_late_seconds old) or catch_up (the latest catch_up_max due ticks at most max_late_seconds old, oldest first)"`
	CatchUpMax     int               `json:"catch_up_max,omitempty" doc:"catch_up: most missed ticks enqueued at once, 1 to 1000; default 10"`
	MaxLateSeconds float64           `json:"max_late_seconds,omitempty" doc:"age past which a due tick is skipped; default 60 (skip) or 86400 (catch_up), at most 7 days"`
	Paused         bool              `json:"paused,omitempty" doc:"create the schedule paused"`
	Job            schedule.Template `json:"job" required:"true" doc:"the job every tick enqueues"`
}

// scheduleView is a schedule as the API shows it.
type scheduleView struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	Tenant         string            `json:"tenant"`
	Region         string            `json:"region"`
	Cron           string            `json:"cron,omitempty"`
	EverySeconds   float64           `json:"every_seconds,omitempty"`
	Timezone       string            `json:"timezone"`
	Missed         string            `json:"missed" enum:"skip,catch_up"`
	CatchUpMax     int               `json:"catch_up_max"`
	MaxLateSeconds float64           `json:"max_late_seconds"`
	Paused         bool              `json:"paused"`
	Job            schedule.Template `json:"job"`
	NextTickAt     time.Time         `json:"next_tick_at" doc:"the earliest tick not yet enqueued or skipped"`
	LastTickAt     time.Time         `json:"last_tick_at,omitzero" doc:"the last tick enqueued"`
	LastJobID      string            `json:"last_job_id,omitempty" doc:"the job of the last tick enqueued"`
	Produced       int64             `json:"produced" doc:"ticks enqueued"`
	Skipped        int64             `json:"skipped" doc:"ticks the missed-tick policy skipped (or whose job could no longer be admitted)"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
	RecentTicks    []tickView        `json:"recent_ticks,omitempty" doc:"GET /v1/schedules/{id}: the last ticks enqueued, newest first"`
}

// tickView is one enqueued tick.
type tickView struct {
	Tick      time.Time `json:"tick"`
	JobID     string    `json:"job_id"`
	ClaimedAt time.Time `json:"claimed_at"`
}

// scheduleList is the answer of GET /v1/schedules.
type scheduleList struct {
	Schedules  []scheduleView `json:"schedules"`
	NextCursor string         `json:"next_cursor,omitempty" doc:"pass as after= for the next page; absent on the last page"`
}

// jobSchedule names the schedule tick that produced a job.
type jobSchedule struct {
	ID   string    `json:"id" doc:"the schedule's id"`
	Tick time.Time `json:"tick" doc:"the tick the job was enqueued for"`
}

var scheduleVars = map[string]string{"id": "SCHEDULE_ID"}

func (s *Server) scheduleRoutes() []route {
	region := s.regions[0]
	one := []param{query("region", "the schedule's region; without it every region the key may use is searched")}
	return []route{
		{method: "POST", path: "/v1/schedules", name: "createSchedule", resource: "schedule", role: auth.RoleProducer,
			summary: "Create a schedule: a job enqueued once per tick of a cron expression (in an IANA time zone) or a fixed interval, exactly once across nodes. A bad cron, interval, zone or policy is 422 naming the field",
			handle:  s.handleCreateSchedule, request: scheduleRequest{}, response: scheduleView{}, status: 201,
			example: `{"name":"nightly-report","region":"` + region + `","cron":"30 2 * * *","timezone":"Europe/Berlin","missed":"catch_up","catch_up_max":3,"job":{"kind":"report.build","limit_keys":["reports"],"payload":{"report":"daily"}}}`},
		{method: "GET", path: "/v1/schedules", name: "listSchedules", role: auth.RoleProducer, summary: "List schedules in id order",
			handle: s.handleListSchedules, response: scheduleList{}, status: 200, params: []param{regionEvery, query("tenant", "admin keys only: only this tenant's schedules"), pageAfter, pageLimit}},
		{method: "GET", path: "/v1/schedules/{id}", name: "getSchedule", resource: "schedule", role: auth.RoleProducer,
			summary: "Get a schedule: its next tick, counters and the last ticks enqueued",
			handle:  s.handleGetSchedule, response: scheduleView{}, status: 200, params: one, vars: scheduleVars},
		{method: "PUT", path: "/v1/schedules/{id}", name: "putSchedule", resource: "schedule", role: auth.RoleProducer,
			summary: "Replace a schedule's definition (not its region or tenant); a changed cron, interval or zone restarts it from its next tick after now",
			handle:  s.handlePutSchedule, request: scheduleRequest{}, response: scheduleView{}, status: 200, params: one, vars: scheduleVars,
			example: `{"name":"nightly-report-3am","region":"` + region + `","cron":"0 3 * * *","timezone":"Europe/Berlin","job":{"kind":"report.build","limit_keys":["reports"]}}`},
		{method: "POST", path: "/v1/schedules/{id}/pause", name: "pauseSchedule", resource: "schedule", role: auth.RoleProducer,
			summary: "Pause a schedule: no tick is enqueued until it is resumed",
			handle:  s.handlePauseSchedule, response: scheduleView{}, status: 200, params: one, vars: scheduleVars},
		{method: "POST", path: "/v1/schedules/{id}/resume", name: "resumeSchedule", resource: "schedule", role: auth.RoleProducer,
			summary: "Resume a schedule from its next tick after now; the ticks of the pause are not enqueued",
			handle:  s.handleResumeSchedule, response: scheduleView{}, status: 200, params: one, vars: scheduleVars},
		{method: "DELETE", path: "/v1/schedules/{id}", name: "deleteSchedule", resource: "schedule", role: auth.RoleProducer,
			summary: "Delete a schedule; the jobs it produced stay",
			handle:  s.handleDeleteSchedule, status: 204, params: one, vars: scheduleVars},
	}
}

// invalidSchedule answers a schedule the request describes but that cannot
// run (a bad cron expression, zone, interval, policy or job template): 422
// naming the fields.
func invalidSchedule(err error) error {
	var ve *job.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	parts := make([]string, len(ve.Fields))
	for i, f := range ve.Fields {
		parts[i] = "field " + f.Field + ": " + f.Detail
	}
	e := problemf(http.StatusUnprocessableEntity, "invalid-schedule", "%s", strings.Join(parts, "; "))
	e.p.Errors = ve.Fields
	return e
}

// buildSchedule validates a request into the schedule it describes, for
// tenant at now; prev is the stored schedule a PUT replaces (nil on create).
func (s *Server) buildSchedule(ctx context.Context, p auth.Principal, req *scheduleRequest, prev *store.Schedule, now time.Time) (*store.Schedule, error) {
	if err := s.checkRegion(p, req.Region, "region"); err != nil {
		return nil, err
	}
	tenant := p.Tenant
	if p.Role == auth.RoleAdmin && req.Tenant != "" {
		tenant = req.Tenant
	}
	if prev != nil && (req.Region != prev.Region || tenant != prev.Tenant) {
		return nil, invalidSchedule(&job.ValidationError{Fields: []job.FieldError{{Field: "region",
			Detail: "a schedule's region and tenant cannot change; delete it and create a new one"}}})
	}
	ve := &job.ValidationError{}
	if req.Name == "" || len(req.Name) > job.MaxNameLen || strings.ContainsAny(req.Name, "\x00\n\r\t") {
		ve.Fields = append(ve.Fields, job.FieldError{Field: "name", Detail: "name is required: 1 to 200 bytes, no control characters"})
	}
	if req.EverySeconds < 0 || req.EverySeconds > (365*24*time.Hour).Seconds() {
		ve.Fields = append(ve.Fields, job.FieldError{Field: "every_seconds", Detail: "every_seconds must be from 1 to 31536000 (a year)"})
	}
	if len(ve.Fields) > 0 {
		return nil, invalidSchedule(ve)
	}
	every := time.Duration(req.EverySeconds * float64(time.Second))
	anchor := now
	if prev != nil && prev.Every == every && !prev.Anchor.IsZero() {
		anchor = prev.Anchor
	}
	spec, err := schedule.Parse(req.Cron, every, anchor, req.Timezone)
	if err != nil {
		return nil, invalidSchedule(renameField(err, "every", "every_seconds"))
	}
	policy := schedule.Policy{Missed: req.Missed, CatchUpMax: req.CatchUpMax, MaxLate: time.Duration(req.MaxLateSeconds * float64(time.Second))}
	if policy.Missed == "" {
		policy.Missed = store.MissedSkip
	}
	if err := policy.Validate(); err != nil {
		return nil, invalidSchedule(err)
	}
	policy = policy.WithDefaults() // stored as it applies, so views show it
	payload, err := payloadBytes(req.Job.Payload)
	if err != nil {
		return nil, invalidSchedule(renameField(err, "payload", "job.payload"))
	}
	req.Job.Payload = payload
	sc := &store.Schedule{
		Tenant: tenant, Region: req.Region, Name: req.Name, Cron: strings.TrimSpace(req.Cron), Every: every, TimeZone: spec.Location().String(),
		Missed: policy.Missed, CatchUpMax: policy.CatchUpMax, MaxLate: policy.MaxLate, Kind: req.Job.Kind, Paused: req.Paused,
		NextAt: spec.Next(now), Version: 1, CreatedAt: now, UpdatedAt: now,
	}
	if every != 0 {
		sc.Anchor = anchor
	}
	if prev != nil {
		sc.ID, sc.Version, sc.CreatedAt = prev.ID, prev.Version, prev.CreatedAt
		if prev.Cron == sc.Cron && prev.Every == sc.Every && prev.TimeZone == sc.TimeZone && (sc.Paused || !prev.Paused) {
			sc.NextAt = prev.NextAt // same ticks: keep the place (an unpause starts after now, as resume does)
		}
	} else {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		sc.ID = id.String()
	}
	// The template is checked as the job of a tick would be: reserved
	// kinds (422), job fields, and a cost its keys can never admit.
	j, err := req.Job.Job(sc, now, now, s.regions)
	if err != nil {
		return nil, invalidSchedule(err)
	}
	if err := store.CheckCosts(ctx, s.cfg.Regions[sc.Region], []*job.Job{j}, s.cfg.DefaultLimit); err != nil {
		return nil, invalidSchedule(renameField(err, "cost", "job.cost"))
	}
	if sc.Template, err = json.Marshal(req.Job); err != nil {
		return nil, err
	}
	return sc, nil
}

// renameField renames one field of a validation error.
func renameField(err error, from, to string) error {
	var ve *job.ValidationError
	var ae *apiError
	switch {
	case errors.As(err, &ve):
		out := &job.ValidationError{}
		for _, f := range ve.Fields {
			if f.Field == from {
				f.Field = to
			}
			out.Fields = append(out.Fields, f)
		}
		return out
	case errors.As(err, &ae) && len(ae.p.Errors) > 0:
		fields := make([]job.FieldError, len(ae.p.Errors))
		for i, f := range ae.p.Errors {
			if f.Field == from {
				f.Field = to
			}
			fields[i] = f
		}
		return &job.ValidationError{Fields: fields}
	}
	return err
}

func (s *Server) handleCreateSchedule(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req scheduleRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	sc, err := s.buildSchedule(r.Context(), p, &req, nil, s.cfg.Now())
	if err != nil {
		return err
	}
	if err := s.cfg.Regions[sc.Region].CreateSchedule(r.Context(), sc); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return problemf(http.StatusConflict, "conflict", "a schedule named %q already exists in this tenant; choose another name or PUT the existing one", sc.Name)
		}
		return err
	}
	w.Header().Set("Location", "/v1/schedules/"+sc.ID+"?region="+url.QueryEscape(sc.Region))
	return writeJSON(w, http.StatusCreated, viewSchedule(sc))
}

// findSchedule looks a schedule up by id in the request's regions
// (findIn); another tenant's is answered exactly like a missing one (404).
func (s *Server) findSchedule(ctx context.Context, r *http.Request, p auth.Principal) (*store.Schedule, store.Store, error) {
	return findIn(s, r, p, "schedule", func(st store.Store, id string) (*store.Schedule, error) { return st.GetSchedule(ctx, id) },
		func(sc *store.Schedule) bool { return p.Role == auth.RoleAdmin || sc.Tenant == p.Tenant })
}

func (s *Server) handleGetSchedule(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	sc, st, err := s.findSchedule(r.Context(), r, p)
	if err != nil {
		return err
	}
	v := viewSchedule(sc)
	ticks, err := st.ListScheduleTicks(r.Context(), sc.ID, 20)
	if err != nil {
		return err
	}
	for _, t := range ticks {
		v.RecentTicks = append(v.RecentTicks, tickView{Tick: t.Tick, JobID: t.JobID, ClaimedAt: t.ClaimedAt})
	}
	return writeJSON(w, http.StatusOK, v)
}

func (s *Server) handleListSchedules(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	q := r.URL.Query()
	lp := store.ScheduleListParams{After: q.Get("after")}
	var err error
	if lp.Tenant, err = listTenant(p, q.Get("tenant"), "schedules"); err != nil {
		return err
	}
	if len(lp.Tenant) > job.MaxNameLen || len(lp.After) > 64 {
		return badRequest("tenant is at most %d bytes and after at most 64", job.MaxNameLen)
	}
	if lp.Limit, err = readLimit(q); err != nil {
		return err
	}
	regions, err := s.searchRegions(r, p)
	if err != nil {
		return err
	}
	want := lp.Limit
	lp.Limit = want + 1
	var all []*store.Schedule
	for _, region := range regions {
		scs, err := s.cfg.Regions[region].ListSchedules(r.Context(), lp)
		if err != nil {
			return err
		}
		all = append(all, scs...)
	}
	sort.Slice(all, func(a, b int) bool { return all[a].ID < all[b].ID })
	out := scheduleList{Schedules: []scheduleView{}}
	if len(all) > want {
		all = all[:want]
		out.NextCursor = all[want-1].ID
	}
	for _, sc := range all {
		out.Schedules = append(out.Schedules, viewSchedule(sc))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) handlePutSchedule(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req scheduleRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	prev, st, err := s.findSchedule(r.Context(), r, p)
	if err != nil {
		return err
	}
	sc, err := s.buildSchedule(r.Context(), p, &req, prev, s.cfg.Now())
	if err != nil {
		return err
	}
	return s.updateSchedule(w, r, st, sc)
}

func (s *Server) updateSchedule(w http.ResponseWriter, r *http.Request, st store.Store, sc *store.Schedule) error {
	if err := st.UpdateSchedule(r.Context(), sc); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return problemf(http.StatusConflict, "conflict",
				"schedule %s changed while this request ran (a tick was claimed, or another edit), or its name is taken; GET it and retry", sc.ID)
		}
		return err
	}
	got, err := st.GetSchedule(r.Context(), sc.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, viewSchedule(got))
}

func (s *Server) handlePauseSchedule(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	sc, st, err := s.findSchedule(r.Context(), r, p)
	if err != nil {
		return err
	}
	sc.Paused, sc.UpdatedAt = true, s.cfg.Now()
	return s.updateSchedule(w, r, st, sc)
}

func (s *Server) handleResumeSchedule(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	sc, st, err := s.findSchedule(r.Context(), r, p)
	if err != nil {
		return err
	}
	if !sc.Paused {
		return writeJSON(w, http.StatusOK, viewSchedule(sc))
	}
	if err := schedule.Resume(sc, s.cfg.Now()); err != nil {
		return err
	}
	return s.updateSchedule(w, r, st, sc)
}

func (s *Server) handleDeleteSchedule(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	sc, st, err := s.findSchedule(r.Context(), r, p)
	if err != nil {
		return err
	}
	if err := st.DeleteSchedule(r.Context(), sc.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func viewSchedule(sc *store.Schedule) scheduleView {
	tmpl, _ := schedule.DecodeTemplate(sc.Template) // written by buildSchedule
	// A tick computed on create or edit is in the schedule's zone, one read
	// back from the store in UTC: answer in UTC always, so one instant has
	// one spelling whichever route answers.
	return scheduleView{
		ID: sc.ID, Name: sc.Name, Tenant: sc.Tenant, Region: sc.Region, Cron: sc.Cron, EverySeconds: sc.Every.Seconds(),
		Timezone: sc.TimeZone, Missed: sc.Missed, CatchUpMax: sc.CatchUpMax, MaxLateSeconds: sc.MaxLate.Seconds(), Paused: sc.Paused,
		Job: tmpl, NextTickAt: sc.NextAt.UTC(), LastTickAt: sc.LastTickAt.UTC(), LastJobID: sc.LastJobID, Produced: sc.Produced,
		Skipped: sc.Skipped, CreatedAt: sc.CreatedAt, UpdatedAt: sc.UpdatedAt,
	}
}

// scheduleOf returns the schedule tick that produced j, or nil. Only jobs
// whose idempotency key a schedule set are looked up; the ledger, not the
// key (which a producer could imitate), is what answers.
func scheduleOf(ctx context.Context, st store.Store, j *job.Job) (*jobSchedule, error) {
	if !strings.HasPrefix(j.IdempotencyKey, schedule.IdempotencyKeyPrefix) {
		return nil, nil
	}
	t, err := st.ScheduleTickOf(ctx, j.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &jobSchedule{ID: t.ScheduleID, Tick: t.Tick}, nil
}
