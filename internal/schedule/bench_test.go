package schedule_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/schedule"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// BenchmarkSpecNext is one next-tick computation of a cron expression in a
// zone with daylight saving (the gap and repeat checks included).
func BenchmarkSpecNext(b *testing.B) {
	s, err := schedule.Parse("*/5 9-17 * * 1-5", 0, time.Time{}, "Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	t := t0
	b.ReportAllocs()
	for b.Loop() {
		t = s.Next(t)
	}
}

// BenchmarkProduceTick is one poll that enqueues one tick on a SQLite
// store (synchronous=FULL): the due-schedule read, the plan and the claim
// with its job insert in one durable write.
func BenchmarkProduceTick(b *testing.B) {
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(b.TempDir(), "us.db"), Region: "us"})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sc := storetest.NewSchedule("acme", "bench")
	sc.Cron, sc.Every, sc.Anchor = "", time.Second, t0
	sc.Template = json.RawMessage(`{"kind":"report.build","limit_keys":["reports"]}`)
	if err := st.CreateSchedule(context.Background(), sc); err != nil {
		b.Fatal(err)
	}
	n := newNodeB(b, st)
	b.ReportAllocs()
	now := t0
	for b.Loop() {
		res, err := n.RunOnce(context.Background(), now)
		if err != nil || res.Enqueued != 1 {
			b.Fatalf("poll: %+v, %v", res, err)
		}
		now = now.Add(time.Second)
	}
}

func newNodeB(b *testing.B, st store.Store) *schedule.Producer {
	jobs, err := engineJobs(st)
	if err != nil {
		b.Fatal(err)
	}
	p, err := schedule.New(schedule.Config{Store: st, Jobs: jobs})
	if err != nil {
		b.Fatal(err)
	}
	return p
}
