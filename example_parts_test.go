package ratelane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/ratelane/ratelane"
)

// fetchArgs is the payload of one "fetch" part.
type fetchArgs struct {
	URL string `json:"url"`
}

// fetched is a fetch part's result.
type fetched struct {
	URL   string `json:"url"`
	Bytes int    `json:"bytes"`
}

// crawlReport is the "crawl" parent's result, aggregated from its parts.
type crawlReport struct {
	Fetched int      `json:"fetched"`
	Bytes   int      `json:"bytes"`
	Failed  []string `json:"failed"`
}

// Fan out N HTTP fetches as parts of one parent and aggregate them into
// one report. Each fetch is an ordinary job paced by its own limit key
// (a 429 would pause the key, not a worker); the parent "crawl" is
// advanced by the engine once every part is final, with the outcome its
// Aggregator computes, exactly once across nodes and crashes, and its
// Publisher delivers the report once.
func ExampleClient_InsertParts() {
	ctx := context.Background()
	dir := tempDir()
	defer os.RemoveAll(dir)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gone" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, strings.Repeat("x", 100*len(r.URL.Path))) // 100 bytes a path character
	}))
	defer site.Close()

	cfg := ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}, Logger: quiet(),
		Limits: []ratelane.Limit{{Name: "site:example", Rate: 50, Burst: 5}}}
	// A part fetches one page; a non-2xx answer becomes the right outcome
	// (429 rate limited, 5xx transient, 404 permanent).
	cfg.Handle("fetch", ratelane.OutcomeFunc(func(ctx context.Context, j *ratelane.Job) ratelane.Outcome {
		var a fetchArgs
		if err := json.Unmarshal(j.Payload, &a); err != nil {
			return ratelane.Outcome{Class: ratelane.ClassPermanent, Err: "payload"}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ratelane.Outcome{Class: ratelane.ClassTransient, Err: "fetch failed"}
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		o := ratelane.ResponseOutcome(resp.StatusCode, resp.Header, time.Now())
		if o.Class == ratelane.ClassSuccess {
			o.Result, _ = json.Marshal(fetched{URL: a.URL, Bytes: len(body)})
		}
		return o
	}))
	// The parent: its Aggregator computes the report from the final parts
	// (it may run more than once, so it only computes); its Publisher acts.
	reports := make(chan crawlReport, 1)
	cfg.HandleParts("crawl", ratelane.Parts{
		Aggregator: ratelane.AggregateFunc(func(_ context.Context, _ *ratelane.Job, parts []*ratelane.Job) ratelane.Outcome {
			r := crawlReport{Failed: []string{}}
			for _, p := range parts {
				var a fetchArgs
				_ = json.Unmarshal(p.Payload, &a)
				if p.State == ratelane.StateTerminal {
					r.Failed = append(r.Failed, strings.TrimPrefix(a.URL, site.URL)+" ("+string(p.Reason)+")")
					continue
				}
				var f fetched
				_ = json.Unmarshal(p.Result, &f)
				r.Fetched++
				r.Bytes += f.Bytes
			}
			b, _ := json.Marshal(r)
			return ratelane.Outcome{Class: ratelane.ClassSuccess, Result: b}
		}),
		Publisher: publishFunc(func(_ context.Context, j *ratelane.Job) error {
			var r crawlReport
			if err := json.Unmarshal(j.Result, &r); err != nil {
				return err
			}
			select { // at least once: a repeat after a crash is dropped here
			case reports <- r:
			default:
			}
			return nil
		}),
	})
	client, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		panic(err)
	}
	client.Start(ctx)
	defer client.Stop(ctx)

	var parts []ratelane.InsertParams
	for _, path := range []string{"/a", "/bb", "/gone", "/ccc"} {
		parts = append(parts, ratelane.InsertParams{Kind: "fetch", LimitKeys: []string{"site:example"},
			Args: fetchArgs{URL: site.URL + path}})
	}
	res, err := client.InsertParts(ctx, ratelane.InsertParams{Kind: "crawl", Region: "us", IdempotencyKey: "crawl-2026-12-01"}, parts)
	if err != nil {
		panic(err)
	}
	fmt.Println("parent", res.Parent.Job.State, "with", len(res.Parts), "parts")
	r := <-reports
	fmt.Printf("fetched %d pages, %d bytes; failed %v\n", r.Fetched, r.Bytes, r.Failed)
	// Output:
	// parent accepted with 4 parts
	// fetched 3 pages, 900 bytes; failed [/gone (permanent_error)]
}

// publishFunc adapts a function to ratelane.Publisher.
type publishFunc func(ctx context.Context, j *ratelane.Job) error

func (f publishFunc) Publish(ctx context.Context, j *ratelane.Job) error { return f(ctx, j) }
