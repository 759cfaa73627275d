package main

// This file is `ratelane enqueue --file`: jobs read from NDJSON (one
// POST /v1/jobs body per line) and sent with POST /v1/jobs/batch, up to
// 1000 jobs (and well under the 8 MiB body bound) a request.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
)

// Bounds of one batch request the CLI sends (the server's are 1000 jobs
// and 8 MiB).
const (
	fileBatchJobs  = 1000
	fileBatchBytes = 6 << 20
	// fileLineBytes bounds one line: a job's 256 KiB payload and its fields.
	fileLineBytes = 320 << 10
)

// batchResult is the part of an item's answer the CLI prints.
type batchResult struct {
	Index    int    `json:"index"`
	Status   int    `json:"status"`
	ID       string `json:"id"`
	State    string `json:"state"`
	Replayed bool   `json:"replayed"`
	Error    *struct {
		Detail string `json:"detail"`
	} `json:"error"`
}

// fileLine is one job read from the file, with its line number.
type fileLine struct {
	line int
	body json.RawMessage
}

// runEnqueueFile enqueues every job of the NDJSON file name ("-" for
// stdin). A line without "region" gets region (the --region flag, or the
// server's only region). It prints one line per job, in file order: the
// line number, then the job id and state, or the reason it was refused;
// it fails (exit 1) when any job was refused.
func runEnqueueFile(ctx context.Context, c *client, name, region string, asJSON bool, stdout io.Writer) error {
	in := io.Reader(os.Stdin)
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("read jobs: %w", err)
		}
		defer f.Close()
		in = f
	}
	lines, err := readJobLines(in, name)
	if err != nil {
		return err
	}
	if len(lines) == 0 {
		return usageError{fmt.Sprintf("--file %s holds no jobs (one JSON object per line)", name)}
	}
	if region == "" && needsRegion(lines) {
		if region, err = onlyRegion(ctx, c); err != nil {
			return err
		}
	}
	if region != "" {
		for i := range lines {
			if lines[i].body, err = withRegion(lines[i].body, region); err != nil {
				return usageError{fmt.Sprintf("%s:%d: %v", name, lines[i].line, err)}
			}
		}
	}
	failed := 0
	for len(lines) > 0 {
		n, size := 0, 0
		for n < len(lines) && n < fileBatchJobs && (n == 0 || size+len(lines[n].body) < fileBatchBytes) {
			size += len(lines[n].body) + 1
			n++
		}
		f, err := sendBatch(ctx, c, lines[:n], name, asJSON, stdout)
		if err != nil {
			return err
		}
		failed += f
		lines = lines[n:]
	}
	if failed > 0 {
		return fmt.Errorf("%d jobs of %s were refused (see above); the others were enqueued", failed, name)
	}
	return nil
}

// readJobLines reads non-empty lines, each one JSON object.
func readJobLines(in io.Reader, name string) ([]fileLine, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), fileLineBytes)
	var out []fileLine
	for n := 1; sc.Scan(); n++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(b, &probe); err != nil {
			return nil, usageError{fmt.Sprintf("%s:%d: not a JSON object (one job per line, as the body of POST /v1/jobs): %v", name, n, err)}
		}
		out = append(out, fileLine{line: n, body: append(json.RawMessage(nil), b...)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w (a line may hold at most %d bytes)", name, err, fileLineBytes)
	}
	return out, nil
}

func needsRegion(lines []fileLine) bool {
	for _, l := range lines {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(l.body, &m)
		if _, ok := m["region"]; !ok {
			return true
		}
	}
	return false
}

// withRegion sets "region" on a job object that has none.
func withRegion(body json.RawMessage, region string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	if _, ok := m["region"]; ok {
		return body, nil
	}
	m["region"], _ = json.Marshal(region)
	return json.Marshal(m)
}

// sendBatch sends one batch and prints its items; it returns how many
// were refused.
func sendBatch(ctx context.Context, c *client, lines []fileLine, name string, asJSON bool, stdout io.Writer) (int, error) {
	jobs := make([]json.RawMessage, len(lines))
	for i, l := range lines {
		jobs[i] = l.body
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/jobs/batch", nil, map[string]any{"jobs": jobs}, nil)
	if err != nil {
		return 0, err
	}
	var out struct {
		Results []batchResult `json:"results"`
		Failed  int           `json:"failed"`
	}
	if err := json.Unmarshal(resp.body, &out); err != nil || len(out.Results) != len(lines) {
		return 0, fmt.Errorf("POST /v1/jobs/batch: the answer does not hold one result per job (%v)", err)
	}
	if asJSON {
		_, err := fmt.Fprintf(stdout, "%s\n", bytes.TrimSpace(resp.body))
		return out.Failed, err
	}
	for i, r := range out.Results {
		where := name + ":" + strconv.Itoa(lines[i].line)
		switch {
		case r.Error != nil:
			fmt.Fprintf(stdout, "%s\trefused %d: %s\n", where, r.Status, r.Error.Detail)
		case r.Replayed:
			fmt.Fprintf(stdout, "%s\t%s %s (replayed: its idempotency key created it before)\n", where, r.ID, r.State)
		default:
			fmt.Fprintf(stdout, "%s\t%s %s\n", where, r.ID, r.State)
		}
	}
	return out.Failed, nil
}
