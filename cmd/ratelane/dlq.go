package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

func init() {
	registerVerbs("dlq", "list, show, redrive, delete and purge dead letters through the HTTP API", func() []subcommand {
		return []subcommand{
			{"ls", "list dead letters (terminal jobs)", dlqList().run},
			{"get", "show one dead letter", dlqGet().run},
			{"redrive", "return a dead letter to waiting with fresh budgets", deadLetterAction("redrive", "Return a dead letter to waiting with fresh budgets; the redrive is recorded in its history.",
				http.MethodPost, "/redrive", "redriven").run},
			{"rm", "delete a dead letter", deadLetterAction("rm", "Delete a dead letter for good.", http.MethodDelete, "", "deleted").run},
			{"purge", "delete every dead letter matching filters (needs --yes)", runDLQPurge},
		}
	})
}

func dlqList() apiCall {
	return listCall("dlq ls", "List dead letters: jobs that ended terminal, with their reason.", "/v1/dead-letters", []listFilter{
		{"kind", "only dead letters of this kind"},
		{"region", "region to list (server default if empty)"},
		{"reason", "only this terminal reason"},
	}, listTable[jobView]{keys: []string{"dead_letters", "jobs"}, noun: "job",
		header: []string{"ID", "KIND", "REGION", "TENANT", "REASON", "ATTEMPT", "FINISHED"},
		row: func(j jobView) []string {
			return []string{j.ID, j.Kind, j.Region, cell(j.Tenant), cell(j.Reason), strconv.Itoa(j.Attempt), when(j.FinishedAt)}
		}})
}

// deadLetterAction is POST .../redrive or DELETE on one dead letter; done
// names what happened in the line printed.
func deadLetterAction(name, summary, method, suffix, done string) apiCall {
	return regionCall("dlq "+name, "ID", summary, "the job's region (server default if empty)", method,
		func(id string) string { return "/v1/dead-letters/" + esc(id) + suffix },
		func(w io.Writer, pos []string, body []byte) error {
			var j jobView
			if len(body) > 0 {
				_ = decodeOne(body, &j, "job") // informative only
			}
			_, err := fmt.Fprintf(w, "%s %s%s\n", done, pos[0], stateNote(j))
			return err
		})
}

// dlqGet shows a dead letter through GET /v1/jobs/{id}, refusing a job
// that is not terminal (it is not a dead letter, and redrive would fail).
func dlqGet() apiCall {
	return regionCall("dlq get", "ID", "Show one dead letter: its reason, attempts and last error.",
		"the job's region (default every region the key may use)", http.MethodGet, jobPath(""),
		func(w io.Writer, pos []string, body []byte) error {
			var j jobView
			if err := decodeOne(body, &j, "job"); err != nil {
				return err
			}
			if j.State != "terminal" {
				return fmt.Errorf("job %s is not a dead letter (state %s); see ratelane jobs get %s", pos[0], j.State, pos[0])
			}
			return printJob(w, j)
		})
}

func runDLQPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dlq purge", "--yes [flags]", "Delete every dead letter matching the filters (all of them without filters), page by page.", stderr)
	cf := addClientFlags(fs)
	var kind, region, reason string
	yes := fs.Bool("yes", false, "really delete (without it, purge only counts what it would delete)")
	fs.StringVar(&kind, "kind", "", "only dead letters of this kind")
	fs.StringVar(&region, "region", "", "only this region (default every region the key may use)")
	fs.StringVar(&reason, "reason", "", "only this terminal reason")
	_, c, err := cf.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	var n int
	var ids []string
	after := ""
	for {
		q := listQuery(map[string]string{"kind": kind, "region": region, "reason": reason, "after": after}, 500)
		resp, err := c.do(ctx, http.MethodGet, "/v1/dead-letters", q, nil, nil)
		if err != nil {
			return err
		}
		items, next, err := decodeList(resp.body, "dead_letters", "jobs")
		if err != nil {
			return err
		}
		jobs, err := decodeJobs(items)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if *yes {
				if _, err := c.do(ctx, http.MethodDelete, "/v1/dead-letters/"+url.PathEscape(j.ID), regionQuery(j.Region), nil, nil); err != nil {
					return fmt.Errorf("purged %d, then: %w", n, err)
				}
			}
			n++
			ids = append(ids, j.ID)
		}
		if next == "" || len(jobs) == 0 {
			break
		}
		after = next
	}
	if cf.json {
		b, _ := json.Marshal(map[string]any{"purged": *yes, "count": n, "ids": ids})
		return cf.print(stdout, b)
	}
	if !*yes {
		fmt.Fprintf(stdout, "would purge %d dead letters; run again with --yes to delete them\n", n)
		return nil
	}
	fmt.Fprintf(stdout, "purged %d dead letters\n", n)
	return nil
}
