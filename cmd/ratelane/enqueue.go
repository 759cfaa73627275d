package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func init() {
	register("enqueue", "enqueue a job through the HTTP API", helpOK(runEnqueue))
}

// enqueueRequest is the body of POST /v1/jobs. Only the fields set on the
// command line are sent, so the server's defaults apply to the rest.
type enqueueRequest struct {
	Kind         string          `json:"kind"`
	Region       string          `json:"region,omitempty"`
	Lane         string          `json:"lane,omitempty"`
	LimitKeys    []string        `json:"limit_keys,omitempty"`
	Payload      json.RawMessage `json:"payload,omitempty"`
	DelaySeconds *float64        `json:"delay_seconds,omitempty"`
	Priority     *int            `json:"priority,omitempty"`
	OnOverload   string          `json:"on_overload,omitempty"`
}

func runEnqueue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("enqueue", "--kind KIND --key LIMIT_KEY [flags] | --file JOBS.ndjson",
		"Enqueue one job. The payload is JSON, inline or @file (@- reads stdin). With --file, enqueue every job of an NDJSON file\n"+
			"(one POST /v1/jobs body per line) with POST /v1/jobs/batch, 1000 a request; each line is reported by its number.", stderr)
	cf := addClientFlags(fs)
	var (
		req      enqueueRequest
		keys     stringList
		payload  string
		idem     string
		delay    time.Duration
		priority int
	)
	fs.StringVar(&req.Kind, "kind", "", "job kind (required)")
	fs.StringVar(&req.Region, "region", "", "region the job and its payload live in (default: the server's region, when it serves only one)")
	fs.StringVar(&req.Lane, "lane", "", "lane class: interactive or batch (server default if empty)")
	fs.Var(&keys, "key", "limit key the job is admitted on; repeat for up to 4 keys")
	fs.StringVar(&payload, "payload", "", "JSON payload, or @file, or @- for stdin")
	fs.StringVar(&idem, "idempotency-key", "", "idempotency key: a retried enqueue with the same key returns the first job")
	fs.DurationVar(&delay, "delay", 0, "run no earlier than this from now, e.g. 10s")
	fs.IntVar(&priority, "priority", 0, "priority from -100 to 100; higher runs first")
	fs.StringVar(&req.OnOverload, "on-overload", "", "reject, degrade or queue when the lane's latency budget would be breached")
	var file string
	fs.StringVar(&file, "file", "", "enqueue the jobs of this NDJSON file (- for stdin) in batches; lines without region get --region")
	_, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if file != "" {
		var other []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "file" && f.Name != "region" && f.Name != "server" && f.Name != "api-key" && f.Name != "json" && f.Name != "o" {
				other = append(other, "--"+f.Name)
			}
		})
		if len(other) > 0 {
			return usageError{fmt.Sprintf("--file takes each job's fields from its line; drop %s", strings.Join(other, ", "))}
		}
		c, err := cf.client(stderr)
		if err != nil {
			return err
		}
		return runEnqueueFile(ctx, c, file, req.Region, cf.json, stdout)
	}
	if req.Kind == "" {
		return usageError{"--kind is required"}
	}
	req.LimitKeys = keys
	if req.Payload, err = readPayload(payload); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["delay"] {
		if delay < 0 {
			return usageError{"--delay must not be negative"}
		}
		s := delay.Seconds()
		req.DelaySeconds = &s
	}
	if set["priority"] {
		req.Priority = &priority
	}
	c, err := cf.client(stderr)
	if err != nil {
		return err
	}
	if req.Region == "" {
		if req.Region, err = onlyRegion(ctx, c); err != nil {
			return err
		}
	}
	h := http.Header{}
	if idem != "" {
		h.Set("Idempotency-Key", idem)
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/jobs", nil, req, h)
	if err != nil {
		return err
	}
	if cf.json {
		return cf.print(stdout, resp.body)
	}
	var j jobView
	if err := decodeOne(resp.body, &j, "job"); err != nil {
		return err
	}
	note := ""
	if strings.EqualFold(resp.header.Get("Idempotent-Replayed"), "true") {
		note = " (replayed: an earlier request with this idempotency key created it)"
	}
	fmt.Fprintf(stdout, "%s\t%s %s in %s, %s lane%s\n", j.ID, j.Kind, j.State, j.Region, j.Lane, note)
	if j.Unserved != nil {
		// Accepted, but it will wait until a worker for the kind runs:
		// say so now rather than let the job sit silently.
		fmt.Fprintf(stderr, "warning: %s\n", j.Unserved.Detail)
	}
	return nil
}

// onlyRegion returns the server's region when it serves exactly one (read
// from the discovery document, GET /v1), and a usage error naming them when
// it serves several. When the document cannot be read it returns "", and
// the server's own answer about the missing region is what the user sees.
func onlyRegion(ctx context.Context, c *client) (string, error) {
	regions, err := c.regions(ctx)
	switch {
	case err != nil || len(regions) == 0:
		return "", nil
	case len(regions) == 1:
		return regions[0], nil
	}
	return "", usageError{fmt.Sprintf("--region is required: the server serves %s", strings.Join(regions, ", "))}
}

// readPayload returns the payload flag's JSON, reading it from a file for
// @file and from stdin for @-. Invalid JSON is a usage error, caught before
// anything is sent.
func readPayload(v string) (json.RawMessage, error) {
	if v == "" {
		return nil, nil
	}
	data := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if name == "-" {
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("read payload: %w", err)
		}
	}
	if !json.Valid(data) {
		return nil, usageError{"--payload is not valid JSON"}
	}
	return json.RawMessage(data), nil
}
