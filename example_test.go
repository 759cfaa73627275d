package ratelane_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/ratelane/ratelane"
)

type email struct {
	To string `json:"to"`
}

func tempDir() string {
	dir, _ := os.MkdirTemp("", "ratelane-example")
	return dir
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Insert a job and run it with a typed handler; Stop drains gracefully.
func Example() {
	ctx := context.Background()
	dir := tempDir()
	defer os.RemoveAll(dir)
	done := make(chan string, 1)

	cfg := ratelane.Config{DataDir: dir, Logger: quiet()}
	cfg.Limits = []ratelane.Limit{{Name: "smtp", Rate: 10, Burst: 5}}
	cfg.Handle("email", ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, args email) (any, error) {
		done <- args.To
		return map[string]string{"sent_to": args.To}, nil
	}))
	client, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		panic(err)
	}
	client.Start(ctx)
	res, _ := client.Insert(ctx, ratelane.InsertParams{
		Kind: "email", Region: "eu", LimitKeys: []string{"smtp"}, Args: email{To: "ada@example.com"},
	})
	fmt.Println("sent to", <-done)
	client.Stop(ctx)
	fmt.Println("inserted in region", res.Job.Region)
	// Output:
	// sent to ada@example.com
	// inserted in region eu
}

// A handler that meets a 429 returns RateLimited with the server's delay:
// the limit key pauses for every worker and the job is rescheduled, its
// lease released at once. Nobody sleeps.
func ExampleRateLimited() {
	ctx := context.Background()
	dir := tempDir()
	defer os.RemoveAll(dir)
	attempts := make(chan int, 2)
	cfg := ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}, Logger: quiet()}
	cfg.Handle("call", ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, _ struct{}) (any, error) {
		attempts <- j.Attempt
		if j.Attempt == 1 {
			return nil, ratelane.RateLimited(100 * time.Millisecond) // the upstream's Retry-After
		}
		return nil, nil
	}))
	client, _ := ratelane.NewClient(ctx, cfg)
	client.Start(ctx)
	res, _ := client.Insert(ctx, ratelane.InsertParams{Kind: "call", Region: "us", LimitKeys: []string{"partner:api"}})
	<-attempts
	<-attempts
	client.Stop(ctx)
	client2, _ := ratelane.NewClient(ctx, ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}, Logger: quiet()})
	defer client2.Close()
	j, _ := client2.Job(ctx, "us", res.Job.ID)
	fmt.Println(j.State, "after", j.Attempts.Congestion, "congestion attempt; first outcome:", j.History[0].Outcome)
	// Output: published after 1 congestion attempt; first outcome: rate_limited
}

// Inserting twice with one idempotency key returns the first job.
func ExampleClient_InsertMany() {
	ctx := context.Background()
	dir := tempDir()
	defer os.RemoveAll(dir)
	client, _ := ratelane.NewClient(ctx, ratelane.Config{DataDir: dir, Logger: quiet()})
	defer client.Close()
	p := ratelane.InsertParams{Kind: "deliver", Region: "us", LimitKeys: []string{"subscriber:store_17"},
		IdempotencyKey: "shipment-9:store_17:3"}
	res, _ := client.InsertMany(ctx, []ratelane.InsertParams{p, p})
	fmt.Println(res[0].Existing, res[1].Existing, res[0].Job.ID == res[1].Job.ID)
	// Output: false true true
}

// Limit keys are configured per region; live state comes with the config.
func ExampleClient_SetLimit() {
	ctx := context.Background()
	dir := tempDir()
	defer os.RemoveAll(dir)
	client, _ := ratelane.NewClient(ctx, ratelane.Config{DataDir: dir, Logger: quiet()})
	defer client.Close()
	st, _ := client.SetLimit(ctx, "eu", ratelane.Limit{Name: "openai:gpt-4o-mini", Rate: 8, Burst: 4, Concurrency: 16, Adaptive: true})
	fmt.Printf("rate %.0f/s burst %.0f, learned %.0f/s, in flight %d\n", st.Rate, st.Burst, st.LearnedRate, st.InFlight)
	_, err := client.SetLimit(ctx, "eu", ratelane.Limit{Name: "bad", Rate: -1})
	fmt.Println(err != nil)
	_, err = client.Job(ctx, "eu", "no-such-job")
	fmt.Println(errors.Is(err, ratelane.ErrNotFound))
	// Output:
	// rate 8/s burst 4, learned 8/s, in flight 0
	// true
	// true
}
