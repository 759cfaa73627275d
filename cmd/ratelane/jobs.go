package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

func init() {
	registerVerbs("jobs", "list, show and cancel jobs through the HTTP API", func() []subcommand {
		return []subcommand{
			{"ls", "list jobs (filters, cursor pagination)", runJobsList},
			{"get", "show one job", jobsGet().run},
			{"cancel", "cancel a job that has not finished", jobsCancel().run},
		}
	})
}

// jobView is the part of the API's job representation the CLI shows. It is
// decoded loosely: fields it does not know are ignored, so the CLI keeps
// working as the API grows.
type jobView struct {
	ID         string          `json:"id"`
	Kind       string          `json:"kind"`
	Tenant     string          `json:"tenant"`
	Region     string          `json:"region"`
	Lane       string          `json:"lane"`
	LimitKeys  []string        `json:"limit_keys"`
	Priority   int             `json:"priority"`
	State      string          `json:"state"`
	Reason     string          `json:"reason"`
	Depth      string          `json:"depth"`
	Attempt    int             `json:"attempt"`
	Attempts   json.RawMessage `json:"attempts"`
	Payload    json.RawMessage `json:"payload"`
	Result     json.RawMessage `json:"result"`
	EligibleAt string          `json:"eligible_at"`
	Deadline   string          `json:"deadline"`
	CreatedAt  string          `json:"created_at"`
	UpdatedAt  string          `json:"updated_at"`
	FinishedAt string          `json:"finished_at"`
	// History is the job's attempt history, oldest first.
	History []historyView `json:"history"`
	// WaitingFor is the server's account of what a waiting job waits for.
	WaitingFor *struct {
		Summary          string `json:"summary"`
		PredictedStartAt string `json:"predicted_start_at"`
	} `json:"waiting_for"`
	// Unserved is set in create responses when nothing handles the kind.
	Unserved *struct {
		Detail string `json:"detail"`
	} `json:"unserved"`
}

func decodeJobs(items []json.RawMessage) ([]jobView, error) {
	jobs := make([]jobView, len(items))
	for i, raw := range items {
		if err := json.Unmarshal(raw, &jobs[i]); err != nil {
			return nil, fmt.Errorf("unexpected job in response: %w", err)
		}
	}
	return jobs, nil
}

func runJobsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("jobs ls", "[flags]", "List jobs, newest first.", stderr)
	cf := addClientFlags(fs)
	var state, kind, region, lane, tenant string
	var pg pager
	fs.StringVar(&state, "state", "", "only jobs in this state (waiting, running, terminal, ...)")
	fs.StringVar(&kind, "kind", "", "only jobs of this kind")
	fs.StringVar(&region, "region", "", "region to list (server default if empty)")
	fs.StringVar(&lane, "lane", "", "only jobs of this lane class")
	fs.StringVar(&tenant, "tenant", "", "only jobs of this tenant (admin keys)")
	pg.flags(fs)
	wf := addWatchFlags(fs)
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := pg.check(); err != nil {
		return err
	}
	c, err := cf.client(stderr)
	if err != nil {
		return err
	}
	return wf.loop(ctx, "jobs ls", stdout, func() error {
		q := pg.query(map[string]string{"state": state, "kind": kind, "region": region, "lane": lane, "tenant": tenant})
		resp, err := c.do(ctx, http.MethodGet, "/v1/jobs", q, nil, nil)
		if err != nil {
			return err
		}
		if cf.json {
			return cf.print(stdout, resp.body)
		}
		return listTable[jobView]{keys: []string{"jobs"}, noun: "job", more: "jobs ls", again: nextPageArgs(fs, rest),
			header: []string{"ID", "KIND", "REGION", "LANE", "STATE", "REASON", "ATTEMPT", "LIMIT KEYS", "CREATED"},
			row: func(j jobView) []string {
				return []string{j.ID, j.Kind, j.Region, j.Lane, j.State, cell(j.Reason), strconv.Itoa(j.Attempt),
					cell(strings.Join(j.LimitKeys, ",")), when(j.CreatedAt)}
			}}.print(stdout, stderr, resp.body)
	})
}

// jobPath returns the path of a job's URL with suffix, for regionCall.
func jobPath(suffix string) func(id string) string {
	return func(id string) string { return "/v1/jobs/" + esc(id) + suffix }
}

func jobsGet() apiCall {
	return regionCall("jobs get", "ID", "Show one job: state, attempts, result.", "the job's region (server default if empty)",
		http.MethodGet, jobPath(""), showJob)
}

// showJob prints a job answer with printJob.
func showJob(w io.Writer, _ []string, body []byte) error {
	var j jobView
	if err := decodeOne(body, &j, "job"); err != nil {
		return err
	}
	return printJob(w, j)
}

func jobsCancel() apiCall {
	return regionCall("jobs cancel", "ID", "Cancel a job that has not finished; it ends terminal/cancelled.", "the job's region (server default if empty)",
		http.MethodPost, jobPath("/cancel"), func(w io.Writer, pos []string, body []byte) error {
			var j jobView
			_ = decodeOne(body, &j, "job") // the answer's body is informative only
			_, err := fmt.Fprintf(w, "cancelled %s%s\n", pos[0], stateNote(j))
			return err
		})
}

// printJob shows a job as aligned "field  value" lines. The payload is
// shown by size only: it may be large, and --json has it in full.
func printJob(w io.Writer, j jobView) error {
	rows := [][]string{
		{"id", j.ID}, {"kind", j.Kind}, {"tenant", cell(j.Tenant)}, {"region", j.Region}, {"lane", j.Lane},
		{"limit keys", cell(strings.Join(j.LimitKeys, ", "))}, {"priority", strconv.Itoa(j.Priority)},
		{"state", j.State}, {"reason", cell(j.Reason)}, {"depth", cell(j.Depth)},
		{"attempt", strconv.Itoa(j.Attempt)}, {"attempts", cell(compact(j.Attempts))},
		{"eligible at", when(j.EligibleAt)}, {"deadline", when(j.Deadline)},
		{"created at", when(j.CreatedAt)}, {"updated at", when(j.UpdatedAt)}, {"finished at", when(j.FinishedAt)},
		{"payload", fmt.Sprintf("%d bytes", len(j.Payload))}, {"result", cell(compact(j.Result))},
	}
	if w := j.WaitingFor; w != nil {
		start := "never, until something handles its kind"
		if w.PredictedStartAt != "" {
			start = when(w.PredictedStartAt)
		}
		rows = append(rows, []string{"waiting for", w.Summary}, []string{"predicted start", start})
	}
	tw := [][]string{}
	for _, r := range rows {
		tw = append(tw, []string{r[0] + ":", r[1]})
	}
	if err := table(w, nil, tw); err != nil {
		return err
	}
	return printHistory(w, j.History)
}

// historyView is one record of a job's attempt history as the API shows
// it (rltype.AttemptRecord), decoded loosely like jobView.
type historyView struct {
	At      string `json:"at"`
	Attempt int    `json:"attempt"`
	Outcome string `json:"outcome"`
	Status  int    `json:"status"`
	DelayNS int64  `json:"delay_ns"`
	Why     string `json:"why"`
	Error   string `json:"error"`
	// Count and FirstAt describe a record that stands for several
	// consecutive pending passes (a polled job's): how many, and when the
	// first of them ended.
	Count   int    `json:"count"`
	FirstAt string `json:"first_at"`
}

// historyDetail bounds a record's why and error text in the table: the
// server keeps them short, but one line per record keeps the table
// readable whatever they hold (--json has them whole).
const historyDetail = 120

// printHistory shows a job's attempt history as a table, one line per
// record, after the job's fields; nothing when it is empty. A folded
// record (consecutive pending passes) shows how many passes it stands for
// and the span they cover, so that a job polled for a day reads as one
// line, not as 1,440.
func printHistory(w io.Writer, hist []historyView) error {
	if len(hist) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "history:"); err != nil {
		return err
	}
	rows := make([][]string, 0, len(hist))
	for _, h := range hist {
		attempt, outcome, ended := strconv.Itoa(h.Attempt), h.Outcome, when(h.At)
		if h.Count > 1 {
			outcome = fmt.Sprintf("%s ×%d", h.Outcome, h.Count)
			ended = when(h.FirstAt) + " .. " + ended
		}
		status, delay := "-", "-"
		if h.Status != 0 {
			status = strconv.Itoa(h.Status)
		}
		if h.DelayNS > 0 {
			delay = time.Duration(h.DelayNS).String()
		}
		detail := strings.Join(slices.DeleteFunc([]string{h.Why, h.Error}, func(s string) bool { return s == "" }), ": ")
		if r := []rune(detail); len(r) > historyDetail {
			detail = string(r[:historyDetail]) + "..."
		}
		rows = append(rows, []string{"  " + attempt, ended, outcome, status, delay, cell(detail)})
	}
	return table(w, []string{"  ATTEMPT", "ENDED", "OUTCOME", "STATUS", "NEXT IN", "WHY / ERROR"}, rows)
}

// compact renders a small JSON value on one line.
func compact(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			s = string(b)
		}
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func stateNote(j jobView) string {
	if j.State == "" {
		return ""
	}
	if j.Reason != "" {
		return fmt.Sprintf(" (state %s, reason %s)", j.State, j.Reason)
	}
	return fmt.Sprintf(" (state %s)", j.State)
}
