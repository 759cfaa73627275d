package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

func init() {
	register("dlq", "list, redrive and delete dead letters through the HTTP API", func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return dispatch(ctx, "dlq", []subcommand{
			{"ls", "list dead letters (terminal jobs)", runDLQList},
			{"redrive", "return a dead letter to waiting with fresh budgets", runDLQRedrive},
			{"rm", "delete a dead letter", runDLQDelete},
		}, args, stdout, stderr)
	})
}

func runDLQList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dlq ls", "[flags]", "List dead letters: jobs that ended terminal, with their reason.", stderr)
	cf := addClientFlags(fs)
	var kind, region, reason, after string
	var limit int
	fs.StringVar(&kind, "kind", "", "only dead letters of this kind")
	fs.StringVar(&region, "region", "", "region to list (server default if empty)")
	fs.StringVar(&reason, "reason", "", "only this terminal reason")
	fs.IntVar(&limit, "limit", 0, "page size (server default if 0)")
	fs.StringVar(&after, "after", "", "cursor: list the page after this one")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, rest); err != nil {
		return err
	}
	c, err := cf.client(stderr)
	if err != nil {
		return err
	}
	q := listQuery(map[string]string{"kind": kind, "region": region, "reason": reason, "after": after}, limit)
	resp, err := c.do(ctx, http.MethodGet, "/v1/dead-letters", q, nil, nil)
	if err != nil {
		return err
	}
	if cf.json {
		return printJSON(stdout, resp.body)
	}
	items, next, err := decodeList(resp.body, "dead_letters", "jobs")
	if err != nil {
		return err
	}
	jobs, err := decodeJobs(items)
	if err != nil {
		return err
	}
	rows := make([][]string, len(jobs))
	for i, j := range jobs {
		rows[i] = []string{j.ID, j.Kind, j.Region, cell(j.Tenant), cell(j.Reason), strconv.Itoa(j.Attempt), when(j.FinishedAt)}
	}
	if err := table(stdout, []string{"ID", "KIND", "REGION", "TENANT", "REASON", "ATTEMPT", "FINISHED"}, rows); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(stderr, "more: ratelane dlq ls --after %s\n", next)
	}
	return nil
}

// deadLetterAction runs POST .../redrive or DELETE on one dead letter.
func deadLetterAction(ctx context.Context, name, summary, method, suffix, done string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dlq "+name, "ID [flags]", summary, stderr)
	cf := addClientFlags(fs)
	region := fs.String("region", "", "the job's region (server default if empty)")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, rest, "ID"); err != nil {
		return err
	}
	c, err := cf.client(stderr)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, method, "/v1/dead-letters/"+url.PathEscape(rest[0])+suffix, regionQuery(*region), nil, nil)
	if err != nil {
		return err
	}
	if cf.json {
		return printJSON(stdout, resp.body)
	}
	var j jobView
	if len(resp.body) > 0 {
		_ = decodeOne(resp.body, &j, "job") // informative only
	}
	fmt.Fprintf(stdout, "%s %s%s\n", done, rest[0], stateNote(j))
	return nil
}

func runDLQRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return deadLetterAction(ctx, "redrive", "Return a dead letter to waiting with fresh budgets; the redrive is recorded in its history.",
		http.MethodPost, "/redrive", "redriven", args, stdout, stderr)
}

func runDLQDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return deadLetterAction(ctx, "rm", "Delete a dead letter for good.", http.MethodDelete, "", "deleted", args, stdout, stderr)
}
