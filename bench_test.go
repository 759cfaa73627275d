package ratelane_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
)

// BenchmarkEndToEnd measures no-op jobs end to end (batched insert, lease,
// run, complete) on the embedded store and, when RATELANE_TEST_POSTGRES_URL
// is set, on PostgreSQL, with and without Region.PostgresAsyncLease; it
// reports jobs/s. See docs/benchmarks.md.
func BenchmarkEndToEnd(b *testing.B) {
	stores := map[string]func(b *testing.B) ratelane.Region{
		"sqlite": func(b *testing.B) ratelane.Region {
			return ratelane.Region{Name: "us", SQLitePath: b.TempDir() + "/us.db"}
		},
	}
	if url := os.Getenv("RATELANE_TEST_POSTGRES_URL"); url != "" {
		stores["postgres"] = func(b *testing.B) ratelane.Region {
			return ratelane.Region{Name: "us", PostgresURL: url, PostgresSchema: fmt.Sprintf("bench_%d", time.Now().UnixNano())}
		}
		stores["postgres-asynclease"] = func(b *testing.B) ratelane.Region {
			return ratelane.Region{Name: "us", PostgresURL: url, PostgresSchema: fmt.Sprintf("bench_%d", time.Now().UnixNano()),
				PostgresAsyncLease: true}
		}
	}
	for name, region := range stores {
		for _, workers := range []int{1, 8, 64} {
			b.Run(name+"/workers="+strconv.Itoa(workers), func(b *testing.B) {
				benchEndToEnd(b, region(b), workers)
			})
		}
	}
}

func benchEndToEnd(b *testing.B, region ratelane.Region, workers int) {
	ctx := context.Background()
	done := make(chan struct{}, 1024)
	cfg := ratelane.Config{Regions: []ratelane.Region{region}, Workers: workers,
		Logger: quiet()}
	cfg.Handle("noop", ratelane.WorkFunc(func(context.Context, *ratelane.Job, struct{}) (any, error) {
		done <- struct{}{}
		return nil, nil
	}))
	c, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i += 1000 {
		var ps []ratelane.InsertParams
		for k := i; k < min(b.N, i+1000); k++ {
			ps = append(ps, ratelane.InsertParams{Kind: "noop", Region: "us", LimitKeys: []string{"k" + strconv.Itoa(k%16)}})
		}
		if _, err := c.InsertMany(ctx, ps); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for range b.N {
		<-done
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c.Stop(stopCtx)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
}
