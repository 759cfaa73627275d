package ratelane_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/rltype"
)

// partnerCall is an OutcomeHandler written outside the module: it calls an
// upstream and lets ResponseOutcome classify the answer (429 and
// retry-after-ms here), so it parses no rate-limit header itself.
type partnerCall struct {
	url      string
	attempts chan rltype.Class
}

var _ ratelane.OutcomeHandler = partnerCall{} // it is one, outside the module

func (p partnerCall) HandleOutcome(ctx context.Context, j *ratelane.Job) ratelane.Outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, nil)
	if err != nil {
		return ratelane.Outcome{Class: ratelane.ClassPermanent, Err: "build request"}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ratelane.Outcome{Class: rltype.ClassTransient, Err: "call partner"}
	}
	resp.Body.Close()
	o := ratelane.ResponseOutcome(resp.StatusCode, resp.Header, time.Now())
	if o.Class == rltype.ClassSuccess {
		o.Result = []byte(`{"ok":true}`)
	}
	p.attempts <- o.Class
	return o
}

// An OutcomeHandler returns an Outcome built from the upstream's answer:
// the 429's retry-after-ms pauses the key and reschedules the job, and the
// second attempt succeeds.
func ExampleResponseOutcome() {
	var calls atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("retry-after-ms", "100")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("x-ratelimit-remaining-requests", "99")
		w.Header().Set("x-ratelimit-limit-requests", "100")
	}))
	defer upstream.Close()

	ctx := context.Background()
	dir := tempDir()
	defer os.RemoveAll(dir)
	h := partnerCall{url: upstream.URL, attempts: make(chan rltype.Class, 2)}
	cfg := ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}, Logger: quiet()}
	cfg.Handle("partner", ratelane.OutcomeFunc(h.HandleOutcome))
	client, _ := ratelane.NewClient(ctx, cfg)
	client.Start(ctx)
	res, _ := client.Insert(ctx, ratelane.InsertParams{Kind: "partner", Region: "us", LimitKeys: []string{"partner:api"}})
	fmt.Println(<-h.attempts, <-h.attempts)
	client.Stop(ctx)

	client2, _ := ratelane.NewClient(ctx, ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}, Logger: quiet()})
	defer client2.Close()
	j, _ := client2.Job(ctx, "us", res.Job.ID)
	first := j.History[0]
	fmt.Println(j.State, first.Status, first.Why, first.Delay)
	// Output:
	// rate_limited success
	// published 429 retry-after-ms 100ms
}
