package engine_test

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// BenchmarkInteractiveBookkeeping is what one interactive job costs the
// engine's in-flight bookkeeping beside its store writes and its handler
// (engine.InteractiveBookkeeping: its insert told to the queued tracking,
// the lease that sees it, its handler and its publication in flight and
// out), with no batch work, the pacer off and on (the default). Report
// with -benchmem: allocations per job are what a drain pays on every job
// (docs/benchmarks.md, "Session 26 (s26h1)").
func BenchmarkInteractiveBookkeeping(b *testing.B) {
	for _, tc := range []struct {
		name  string
		share float64
	}{{"pacer=off", -1}, {"pacer=default", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			e, err := engine.New(engine.Config{Store: newStore(b), Region: "us", BatchCPUShare: tc.share,
				Kinds: map[string]engine.Kind{"noop": noop(), "sweep": {Handler: noop().Handler, Computes: true}}})
			if err != nil {
				b.Fatal(err)
			}
			j := storetest.NewJob("acme", job.LaneInteractive, "k")
			j.EligibleAt = time.Now().Add(-time.Second)
			j.CreatedAt = j.EligibleAt
			res := []store.InsertResult{{Job: j}}
			b.ReportAllocs()
			for b.Loop() {
				engine.InteractiveBookkeeping(e, res)
			}
		})
	}
}
