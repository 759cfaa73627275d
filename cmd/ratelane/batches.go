package main

// This file holds the batch lane verbs over /v1/batches: a sweep of many
// diffs sent to a provider's batch API, its progress and its items.

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"path/filepath"
	"strconv"
)

func init() {
	registerVerbs("batches", "send sweeps of diffs to a provider's batch API and follow them item by item", func() []subcommand {
		return []subcommand{
			{"create", "send diffs (files or -) as one batch of reviews", batchesCreate().run},
			{"ls", "list batches, newest first", batchesList().run},
			{"get", "show a batch's progress, provider batches and items", batchesGet().run},
			{"cancel", "cancel a batch (what already finished is still published)", regionCall("batches cancel", "ID",
				"Cancel a batch: pending items end canceled and running provider batches are cancelled (POST /v1/batches/{id}/cancel).",
				"the batch's region (default: every region the key may use is searched)", http.MethodPost,
				func(id string) string { return "/v1/batches/" + esc(id) + "/cancel" }, showBatch("cancelling")).run},
		}
	})
}

// batchView is the part of a batch the text output shows.
type batchView struct {
	ID       string `json:"id"`
	Region   string `json:"region"`
	Tenant   string `json:"tenant"`
	Provider string `json:"provider"`
	State    string `json:"state"`
	Deadline string `json:"deadline"`
	Counts   struct {
		Total, Pending, Submitted, Succeeded, Failed, Canceled int
	} `json:"counts"`
	Summary struct {
		Reviews     int `json:"reviews"`
		Extractions int `json:"extractions"`
		Items       int `json:"items"`
	} `json:"summary"`
	Chunks []struct {
		Key     string `json:"key"`
		State   string `json:"state"`
		BatchID string `json:"provider_batch_id"`
		Items   int    `json:"items"`
	} `json:"chunks"`
	Items []struct {
		CustomID string `json:"custom_id"`
		Review   string `json:"review_id"`
		State    string `json:"state"`
		Attempts int    `json:"attempts"`
		Reason   string `json:"reason"`
	} `json:"items"`
	NextItems string `json:"next_items"`
	Created   string `json:"created_at"`
}

func (b batchView) progress() string {
	c := b.Counts
	return fmt.Sprintf("%d items: %d pending, %d submitted, %d succeeded, %d failed, %d canceled",
		c.Total, c.Pending, c.Submitted, c.Succeeded, c.Failed, c.Canceled)
}

func showBatch(done string) func(io.Writer, []string, []byte) error {
	return func(w io.Writer, _ []string, body []byte) error {
		var b batchView
		if err := json.Unmarshal(body, &b); err != nil {
			return fmt.Errorf("unexpected response: %w", err)
		}
		what := fmt.Sprintf("%d reviews", b.Summary.Reviews)
		if b.Summary.Extractions > 0 {
			what = fmt.Sprintf("%d extractions", b.Summary.Extractions)
		}
		_, err := fmt.Fprintf(w, "%s batch %s (region %s, provider %s, %s): %s, %s\n", done, b.ID, b.Region, b.Provider, b.State,
			what, b.progress())
		return err
	}
}

func batchesCreate() apiCall {
	var region, provider, tenant, deadline, repo, onOverload string
	var maxAttempts int
	var diffs stringList
	var extractions string
	return apiCall{name: "batches create", usage: "(--diff FILE [--diff FILE...] | --extractions FILE) --region R [flags]",
		summary: "Send unified diffs (files, or - for standard input), one review each, or a file of extraction items, to the batch lane (POST /v1/batches).",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&extractions, "extractions", "", "an extraction manifest `FILE` (or -): JSON Lines or a JSON array of {id, input, instruction or template, schema}, instead of --diff")
			fs.Var(&diffs, "diff", "a unified diff `FILE` (or - for standard input), one review; repeat for a sweep (required)")
			fs.StringVar(&region, "region", "", "the region the diffs, jobs and findings live in (required)")
			fs.StringVar(&provider, "provider", "", "an openai, openai-compatible or anthropic profile of the region (default the region's default)")
			fs.StringVar(&tenant, "tenant", "", "admin keys only: the tenant to review for")
			fs.StringVar(&deadline, "deadline", "", "RFC 3339 time by which every item must be final (default 48h from now)")
			fs.StringVar(&repo, "repo", "", "the repository of every review, e.g. acme/app")
			fs.IntVar(&maxAttempts, "max-attempts", 0, "provider batches one item may go out in (server default 3)")
			fs.StringVar(&onOverload, "on-overload", "", "when the batch is predicted to finish past its deadline: reject (server default), degrade (depth fast) or queue")
		},
		request: func([]string) (string, string, url.Values, any, error) {
			if region == "" {
				return "", "", nil, nil, usageError{"--region is required"}
			}
			b := map[string]any{"region": region}
			switch {
			case extractions != "" && len(diffs) > 0:
				return "", "", nil, nil, usageError{"--diff and --extractions are exclusive: a batch carries reviews or extractions"}
			case extractions != "":
				xs, err := readExtractions(extractions)
				if err != nil {
					return "", "", nil, nil, usageError{extractions + ": " + err.Error()}
				}
				b["extractions"] = xs
			case len(diffs) == 0:
				return "", "", nil, nil, usageError{"--diff FILE is required (repeat it for a sweep; - reads standard input), or --extractions FILE"}
			}
			var reviews []map[string]any
			for _, p := range diffs {
				text, err := readDiff(p)
				if err != nil {
					return "", "", nil, nil, usageError{p + ": " + err.Error()}
				}
				rv := map[string]any{"diff": string(text), "change": filepath.Base(p)}
				if repo != "" {
					rv["repo"] = repo
				}
				reviews = append(reviews, rv)
			}
			if len(reviews) > 0 {
				b["reviews"] = reviews
			}
			for k, v := range map[string]string{"provider": provider, "tenant": tenant, "deadline": deadline, "on_overload": onOverload} {
				if v != "" {
					b[k] = v
				}
			}
			if maxAttempts != 0 {
				b["max_attempts"] = maxAttempts
			}
			return http.MethodPost, "/v1/batches", nil, b, nil
		}, show: showBatch("created")}
}

func batchesList() apiCall {
	return listCall("batches ls", "List batches, newest first, with their item counts.", "/v1/batches", []listFilter{
		{"state", "only batches in this state (running, canceling, done)"},
		{"region", "region to list (every region the key may use if empty)"},
		{"tenant", "only batches of this tenant (admin keys)"},
	}, listTable[batchView]{keys: []string{"batches"}, noun: "batch",
		header: []string{"ID", "REGION", "STATE", "PROVIDER", "REVIEWS", "ITEMS", "SUCCEEDED", "FAILED", "PENDING", "CREATED"},
		row: func(b batchView) []string {
			c := b.Counts
			return []string{b.ID, b.Region, b.State, b.Provider, strconv.Itoa(b.Summary.Reviews), strconv.Itoa(c.Total),
				strconv.Itoa(c.Succeeded), strconv.Itoa(c.Failed + c.Canceled), strconv.Itoa(c.Pending + c.Submitted), when(b.Created)}
		}})
}

func batchesGet() apiCall {
	var region, itemsState, itemsAfter string
	var itemsLimit int
	return apiCall{name: "batches get", usage: "ID [flags]", summary: "Show a batch: progress, provider batches and a page of items (GET /v1/batches/{id}).",
		args: []string{"ID"},
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&region, "region", "", "the batch's region (default: every region the key may use is searched)")
			fs.StringVar(&itemsState, "items-state", "", "only items in this state (pending, submitted, succeeded, failed, canceled)")
			fs.StringVar(&itemsAfter, "items-after", "", "cursor: the page of items after this custom_id")
			fs.IntVar(&itemsLimit, "items-limit", 0, "items per page (server default 100)")
		},
		request: func(pos []string) (string, string, url.Values, any, error) {
			q := regionQuery(region)
			for k, v := range map[string]string{"items_state": itemsState, "items_after": itemsAfter} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if itemsLimit > 0 {
				q.Set("items_limit", strconv.Itoa(itemsLimit))
			}
			return http.MethodGet, "/v1/batches/" + esc(pos[0]), q, nil, nil
		},
		show: func(w io.Writer, pos []string, body []byte) error {
			var b batchView
			if err := json.Unmarshal(body, &b); err != nil {
				return fmt.Errorf("unexpected response: %w", err)
			}
			fmt.Fprintf(w, "batch %s (region %s, tenant %s, provider %s): %s, deadline %s\n%d reviews, %s\n\n", b.ID, b.Region, b.Tenant,
				b.Provider, b.State, when(b.Deadline), b.Summary.Reviews, b.progress())
			rows := make([][]string, len(b.Chunks))
			for i, c := range b.Chunks {
				rows[i] = []string{c.Key, c.State, cell(c.BatchID), strconv.Itoa(c.Items)}
			}
			if err := table(w, []string{"CHUNK", "STATE", "PROVIDER BATCH", "ITEMS"}, rows); err != nil {
				return err
			}
			fmt.Fprintln(w)
			rows = make([][]string, len(b.Items))
			for i, it := range b.Items {
				rows[i] = []string{it.CustomID, it.Review, it.State, strconv.Itoa(it.Attempts), cell(it.Reason)}
			}
			if err := table(w, []string{"ITEM", "REVIEW", "STATE", "ATTEMPTS", "REASON"}, rows); err != nil {
				return err
			}
			if b.NextItems != "" {
				fmt.Fprintf(w, "more items: ratelane batches get %s --items-after %s\n", pos[0], b.NextItems)
			}
			return nil
		}}
}

// readExtractions reads an extraction manifest file (or - for standard
// input): a JSON array of items, or JSON Lines with one item per line. The
// items are passed to the API as they are; it validates them.
func readExtractions(p string) ([]json.RawMessage, error) {
	text, err := readDiff(p)
	if err != nil {
		return nil, err
	}
	text = bytes.TrimSpace(text)
	var xs []json.RawMessage
	if bytes.HasPrefix(text, []byte("[")) {
		if err := json.Unmarshal(text, &xs); err != nil {
			return nil, fmt.Errorf("not a JSON array of extraction items: %v", err)
		}
	} else {
		for i, line := range bytes.Split(text, []byte("\n")) {
			if line = bytes.TrimSpace(line); len(line) == 0 {
				continue
			}
			if !json.Valid(line) {
				return nil, fmt.Errorf("line %d is not a JSON object", i+1)
			}
			xs = append(xs, json.RawMessage(line))
		}
	}
	if len(xs) == 0 {
		return nil, errors.New("no extraction items")
	}
	return xs, nil
}
