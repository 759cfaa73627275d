package main

// This file holds the server-side review verbs over /v1/reviews (the
// inline, serverless review is the review command). A review whose parts
// all failed, or that ended terminal, exits 1 so a CI gate does not pass a
// diff nobody reviewed.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/review/pipeline"
)

func init() {
	registerVerbs("reviews", "submit diffs for review on the server and read their findings", func() []subcommand {
		return []subcommand{
			{"create", "submit a unified diff for review", runReviewsCreate},
			{"ls", "list reviews, newest first", reviewsList().run},
			{"get", "show a review's state and progress (--wait for the result)", runReviewsGet},
			{"findings", "list a review's findings (and quarantined ones with --quarantined)", runReviewsFindings},
			{"sarif", "print a finished review's findings as SARIF 2.1.0", reviewsSARIF().run},
			{"providers", "list each region's review providers: kind, model, limit keys (never a key)", reviewsProviders().run},
		}
	})
}

// reviewView is a review as GET /v1/reviews/{id} shows it.
type reviewView struct {
	ID       string            `json:"id"`
	Region   string            `json:"region"`
	Tenant   string            `json:"tenant"`
	State    string            `json:"state"`
	Reason   string            `json:"reason"`
	Repo     string            `json:"repo"`
	Change   string            `json:"change"`
	Depth    string            `json:"depth"`
	Provider string            `json:"provider"`
	Parts    pipeline.Progress `json:"parts"`
	Result   *pipeline.Result  `json:"result"`
	Findings *int              `json:"findings"` // the list's count; GET has Result instead
	Created  string            `json:"created_at"`
}

// finished says whether the review will change no more.
func (r reviewView) finished() bool { return r.State != "accepted" && r.State != "" }

// outcome is the review's exit status: an error when it ended terminal or
// no part succeeded.
func (r reviewView) outcome() error {
	switch {
	case r.State == "terminal":
		return fmt.Errorf("review %s ended terminal (%s); nothing was reviewed", r.ID, cell(r.Reason))
	case r.Result != nil && r.Result.Parts.Total > 0 && r.Result.Parts.Failed == r.Result.Parts.Total:
		return fmt.Errorf("review %s: all %d parts failed; nothing was reviewed", r.ID, r.Result.Parts.Total)
	case r.Result != nil && r.Result.Partial:
		return fmt.Errorf("review %s: %d of %d parts failed; the findings are partial", r.ID, r.Result.Parts.Failed, r.Result.Parts.Total)
	}
	return nil
}

func runReviewsCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reviews create", "--diff FILE|- --region R [flags]", "Submit a unified diff (git diff, diff -u; at most 8 MiB) for review on the server.", stderr)
	cf := addClientFlags(fs)
	var diff, publish, idem string
	var wait time.Duration
	b := map[string]string{}
	fields := []struct{ name, doc string }{
		{"region", "the region the diff, its jobs and findings live in (required unless the server has one region)"},
		{"repo", "the repository, e.g. acme/app"}, {"change", "the pull request number or ref"},
		{"base-sha", "the diff's base commit"}, {"head-sha", "the diff's head commit"},
		{"depth", "auto (default), full or fast"}, {"lane", "interactive (default) or batch"},
		{"provider", "a provider profile of the region (default the region's default)"},
		{"tenant", "admin keys only: the tenant to review for"},
	}
	vals := make([]*string, len(fields))
	for i, f := range fields {
		vals[i] = fs.String(f.name, "", f.doc)
	}
	fs.StringVar(&diff, "diff", "", "the unified diff: a file, or - for standard input (required)")
	fs.StringVar(&publish, "publish", "", "where findings go: none, rdjsonl:FILE, webhook:SUBSCRIBER or github[:owner/repo#N]")
	fs.StringVar(&idem, "idempotency-key", "", "a retry with the same key returns the first review")
	fs.DurationVar(&wait, "wait", 0, "wait up to this long for the review to finish, then print it (0: do not wait)")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if diff == "" && len(rest) == 1 {
		diff, rest = rest[0], nil
	}
	if err := wantArgs(fs, rest); err != nil {
		return err
	}
	if diff == "" {
		return usageError{"--diff FILE or - is required"}
	}
	for i, f := range fields {
		if *vals[i] != "" {
			b[strings.ReplaceAll(f.name, "-", "_")] = *vals[i]
		}
	}
	text, err := readDiff(diff)
	if err != nil {
		return usageError{"--diff: " + err.Error()}
	}
	body := map[string]any{"diff": string(text)}
	for k, v := range b {
		body[k] = v
	}
	if publish != "" {
		kind, target, _ := strings.Cut(publish, ":")
		p := map[string]string{"kind": kind}
		if target != "" {
			p["target"] = target
		}
		body["publish"] = p
	}
	if idem != "" {
		body["idempotency_key"] = idem
	}
	c, err := cf.client(stderr)
	if err != nil {
		return err
	}
	if body["region"] == nil {
		// The server's only region, when it has one: the API needs a region.
		if rs, err := c.regions(ctx); err == nil && len(rs) == 1 {
			body["region"] = rs[0]
		}
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/reviews", nil, body, nil)
	if err != nil {
		return err
	}
	var rv reviewView
	if err := json.Unmarshal(resp.body, &rv); err != nil {
		return fmt.Errorf("unexpected response: %w", err)
	}
	if wait > 0 {
		return showReview(ctx, c, cf, rv.ID, rv.Region, wait, stdout, stderr)
	}
	if cf.json {
		return cf.print(stdout, resp.body)
	}
	fmt.Fprintf(stdout, "submitted review %s (region %s, depth %s, %d parts)\n", rv.ID, rv.Region, cell(rv.Depth), rv.Parts.Total)
	fmt.Fprintf(stdout, "follow it: ratelane reviews get %s --region %s --wait 2m\n", rv.ID, rv.Region)
	return nil
}

// getReview fetches a review, polling up to wait until it is finished.
func getReview(ctx context.Context, c *client, id, region string, wait time.Duration) (reviewView, []byte, error) {
	deadline := time.Now().Add(wait)
	for {
		resp, err := c.do(ctx, http.MethodGet, "/v1/reviews/"+esc(id), regionQuery(region), nil, nil)
		if err != nil {
			return reviewView{}, nil, err
		}
		var rv reviewView
		if err := json.Unmarshal(resp.body, &rv); err != nil {
			return rv, nil, fmt.Errorf("unexpected response: %w", err)
		}
		if rv.finished() || wait <= 0 {
			return rv, resp.body, nil
		}
		if time.Now().After(deadline) {
			return rv, resp.body, fmt.Errorf("review %s is still %s after %s (%d of %d parts done)", id, rv.State, wait,
				rv.Parts.Succeeded+rv.Parts.Failed, rv.Parts.Total)
		}
		select {
		case <-ctx.Done():
			return rv, nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func showReview(ctx context.Context, c *client, cf *clientFlags, id, region string, wait time.Duration, stdout, stderr io.Writer) error {
	rv, body, err := getReview(ctx, c, id, region, wait)
	if body == nil {
		return err
	}
	if cf.json {
		if perr := cf.print(stdout, body); perr != nil {
			return perr
		}
	} else {
		rows := [][]string{{"id:", rv.ID}, {"region:", rv.Region}, {"tenant:", rv.Tenant}, {"state:", rv.State}, {"reason:", cell(rv.Reason)},
			{"repo:", cell(rv.Repo)}, {"change:", cell(rv.Change)}, {"depth:", cell(rv.Depth)}, {"provider:", cell(rv.Provider)},
			{"parts:", fmt.Sprintf("%d total, %d succeeded, %d failed, %d pending", rv.Parts.Total, rv.Parts.Succeeded, rv.Parts.Failed, rv.Parts.Pending)}}
		if r := rv.Result; r != nil {
			rows = append(rows, []string{"findings:", strconv.Itoa(len(r.Findings))}, []string{"quarantined:", strconv.Itoa(len(r.Quarantined))})
		}
		if terr := table(stdout, nil, rows); terr != nil {
			return terr
		}
	}
	if err != nil {
		return err
	}
	return rv.outcome()
}

func reviewFlags(fs *flag.FlagSet) (region *string, wait *time.Duration) {
	region = fs.String("region", "", "the review's region (default every region the key may use)")
	wait = fs.Duration("wait", 0, "wait up to this long for the review to finish (0: do not wait)")
	return region, wait
}

func runReviewsGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reviews get", "ID [flags]", "Show a review: state, depth, parts progress and finding counts. Exits 1 when it ended terminal or its parts all failed.", stderr)
	cf := addClientFlags(fs)
	region, wait := reviewFlags(fs)
	rest, c, err := cf.parse(fs, args, stderr, "ID")
	if err != nil {
		return err
	}
	return showReview(ctx, c, cf, rest[0], *region, *wait, stdout, stderr)
}

func runReviewsFindings(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("reviews findings", "ID [flags]", "List a finished review's findings; --quarantined lists the findings dropped by validation, with reasons.", stderr)
	cf := addClientFlags(fs)
	region, wait := reviewFlags(fs)
	quarantined := fs.Bool("quarantined", false, "list quarantined findings and their reasons instead")
	rest, c, err := cf.parse(fs, args, stderr, "ID")
	if err != nil {
		return err
	}
	rv, _, err := getReview(ctx, c, rest[0], *region, *wait)
	if err != nil {
		return err
	}
	if rv.Result == nil {
		if !rv.finished() {
			return fmt.Errorf("review %s is still %s (%d of %d parts done); try --wait 2m", rv.ID, rv.State, rv.Parts.Succeeded+rv.Parts.Failed, rv.Parts.Total)
		}
		return errors.Join(fmt.Errorf("review %s has no findings", rv.ID), rv.outcome())
	}
	if cf.json {
		v := any(rv.Result.Findings)
		if *quarantined {
			v = rv.Result.Quarantined
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := cf.print(stdout, b); err != nil {
			return err
		}
		return rv.outcome()
	}
	var rows [][]string
	if *quarantined {
		for _, q := range rv.Result.Quarantined {
			rows = append(rows, []string{q.Finding.Path, strconv.Itoa(q.Finding.Line), string(q.Reason), q.Finding.Message})
		}
		err = table(stdout, []string{"PATH", "LINE", "REASON", "MESSAGE"}, rows)
	} else {
		for _, f := range rv.Result.Findings {
			rows = append(rows, []string{f.Path, strconv.Itoa(f.Line), string(f.Severity), string(f.Category), f.Message})
		}
		err = table(stdout, []string{"PATH", "LINE", "SEVERITY", "CATEGORY", "MESSAGE"}, rows)
	}
	if err != nil {
		return err
	}
	return rv.outcome()
}

// reviewsSARIF prints the SARIF document as the server sends it, whatever
// -o says: SARIF is already the machine format.
func reviewsSARIF() apiCall {
	return regionCall("reviews sarif", "ID", "Print a finished review's findings as SARIF 2.1.0 (the server answers 409 until the review is validated).",
		"the review's region (default every region the key may use)", http.MethodGet,
		func(id string) string { return "/v1/reviews/" + esc(id) + "/sarif" },
		func(w io.Writer, _ []string, body []byte) error { return printJSON(w, body) })
}

// readDiff reads the diff to submit: a file, or standard input for "-".
func readDiff(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(stdinReader)
	}
	return os.ReadFile(path)
}

func reviewsList() apiCall {
	return listCall("reviews ls", "List reviews, newest first, with their parts done and findings counts (reviews get ID has the findings).",
		"/v1/reviews", []listFilter{
			{"state", "only reviews in this state (accepted, validated, published, terminal)"},
			{"region", "region to list (every region the key may use if empty)"},
			{"lane", "only reviews of this lane class"},
			{"tenant", "only reviews of this tenant (admin keys)"},
		}, listTable[reviewView]{keys: []string{"reviews"}, noun: "review",
			header: []string{"ID", "REGION", "STATE", "REASON", "REPO", "CHANGE", "DEPTH", "PROVIDER", "PARTS", "FINDINGS", "CREATED"},
			row: func(r reviewView) []string {
				findings := "-"
				if r.Findings != nil {
					findings = strconv.Itoa(*r.Findings)
				}
				return []string{r.ID, r.Region, r.State, cell(r.Reason), cell(r.Repo), cell(r.Change), cell(r.Depth), cell(r.Provider),
					fmt.Sprintf("%d/%d", r.Parts.Succeeded+r.Parts.Failed, r.Parts.Total), findings, when(r.Created)}
			}})
}

// providerView is a provider profile as GET /v1/reviews/providers shows it.
type providerView struct {
	Name        string  `json:"name"`
	Kind        string  `json:"kind"`
	Model       string  `json:"model"`
	Region      string  `json:"region"`
	Default     bool    `json:"default"`
	RequestsKey string  `json:"requests_key"`
	TokensKey   string  `json:"tokens_key"`
	RPM         float64 `json:"rpm"`
	TPM         float64 `json:"tpm"`
}

func reviewsProviders() apiCall {
	var region string
	return apiCall{name: "reviews providers", usage: "[--region R]", summary: "List the review providers of each region: name, kind, model, limit keys and declared limits.",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&region, "region", "", "region to list (every region the key may use if empty)")
		},
		request: func([]string) (string, string, url.Values, any, error) {
			return http.MethodGet, "/v1/reviews/providers", listQuery(map[string]string{"region": region}, 0), nil, nil
		},
		page: listTable[providerView]{keys: []string{"providers"}, noun: "provider",
			header: []string{"REGION", "NAME", "KIND", "MODEL", "DEFAULT", "REQUESTS KEY", "RPM", "TOKENS KEY", "TPM"},
			row: func(p providerView) []string {
				def := ""
				if p.Default {
					def = "yes"
				}
				return []string{p.Region, p.Name, p.Kind, cell(p.Model), cell(def), p.RequestsKey, perMinute(p.RPM), cell(p.TokensKey), perMinute(p.TPM)}
			}}.page}
}

// perMinute prints a declared per-minute limit, - when none is declared.
func perMinute(v float64) string {
	if v <= 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
