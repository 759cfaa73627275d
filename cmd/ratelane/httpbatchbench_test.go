package main

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// BenchmarkHTTPBatch measures POST /v1/jobs/batch as `ratelane bench
// http-batch` sends it — 1,000 jobs a request, each with its own
// idempotency key in the body, on 16 keys, from 4 keep-alive clients —
// over a real SQLite store (synchronous=FULL). One op is one batch
// request; jobs/s is the rate of jobs. It exists so that the batch intake
// can be compared across trees in-process (allocations per op, callgrind
// instructions per job as (2x − 1x) / 1,000), which the bench command's
// fixed-size run cannot separate from its start-up.
//
//	go test -run '^$' -bench HTTPBatch -benchtime 20x -benchmem ./cmd/ratelane
func BenchmarkHTTPBatch(b *testing.B) {
	const clients, size = 4, 1000
	api := newBenchAPI(b, clients, "FULL")
	// A 1,000-job request under valgrind (the instruction counts) takes
	// longer than newBenchAPI's 30-second client timeout.
	api.http.Timeout = 10 * time.Minute
	clientLoop(b, clients, size, "jobs/s", func(n int64) (time.Duration, error) {
		var body bytes.Buffer
		body.WriteString(`{"jobs":[`)
		for k := n * size; k < (n+1)*size; k++ {
			if k > n*size {
				body.WriteByte(',')
			}
			fmt.Fprintf(&body, `{"kind":"bench.batch","region":"eu","limit_keys":["bench:%d"],"payload":{"n":%d},"idempotency_key":"bench-%d"}`, k%16, k, k)
		}
		body.WriteString(`]}`)
		var out struct {
			Created int `json:"created"`
			Failed  int `json:"failed"`
		}
		t0 := time.Now()
		status, err := api.post("/v1/jobs/batch", body.Bytes(), nil, &out)
		took := time.Since(t0)
		if err == nil && (status/100 != 2 || out.Failed > 0 || out.Created != size) {
			err = fmt.Errorf("batch %d: status %d, created %d, failed %d", n, status, out.Created, out.Failed)
		}
		return took, err
	})
}
