package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// BenchmarkReadyParents10k is one page of the parts sweep's read with
// 10,000 batch-lane reviews waiting on their batch items (10 batches of
// 1,000 pending items) and 200 interactive parents whose parts finished
// in the last seconds: "full" walks every waiting parent (a full walk,
// and every pass before session 28), "since" reads the parents of the
// parts finished since then (the passes between two full walks), and
// "since-none" the same with no part finished since (most passes under a
// sweep of batch reviews).
func BenchmarkReadyParents10k(b *testing.B) {
	s := OpenTest(b, Config{})
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	for range 10 {
		var parents []*job.Job
		bt, items := storetest.NewBatch("acme", 1000)
		for i := range items {
			p := storetest.NewJob("acme", job.LaneBatch, "k")
			p.Kind, p.State = "review", job.StateAccepted
			parents = append(parents, p)
			items[i].JobID = p.ID
		}
		if _, err := s.Insert(ctx, parents, storetest.Unpaced); err != nil {
			b.Fatal(err)
		}
		if err := s.CreateBatch(ctx, bt, items); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 200 {
		p := storetest.NewJob("acme", job.LaneInteractive, "k")
		p.Kind, p.State = "review", job.StateAccepted
		c := storetest.NewJob("acme", job.LaneInteractive, "k")
		c.Kind, c.ParentID = "review.part", p.ID
		if _, err := s.Insert(ctx, []*job.Job{p, c}, storetest.Unpaced); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Cancel(ctx, c.ID, t0.Add(time.Duration(i)*10*time.Millisecond)); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name  string
		since time.Time
		want  int
	}{{"full", time.Time{}, 200}, {"since", t0, 200}, {"since-none", t0.Add(time.Hour), 0}} {
		b.Run(c.name, func(b *testing.B) {
			p := store.ReadyParentsParams{Kind: "review", Limit: 500, FinishedSince: c.since}
			for b.Loop() {
				js, err := s.ReadyParents(ctx, p)
				if err != nil || len(js) != c.want {
					b.Fatalf("ReadyParents = %d parents, %v; want %d", len(js), err, c.want)
				}
			}
		})
	}
}
