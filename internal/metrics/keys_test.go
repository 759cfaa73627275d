package metrics

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
)

// TestKeyMetricsTopN reads per-key metrics from a real SQLite store with
// more keys than TopKeys: the busiest keys get their own series, the rest
// one _other series with their sum, and a key paused by a 429 reports the
// seconds left.
func TestKeyMetricsTopN(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "us.db"), Region: "us", Synchronous: sqlite.SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Key k00 has 30 waiting jobs, k01 29, ... k29 1.
	const keys = 30
	var jobs []*job.Job
	for k := range keys {
		for n := range keys - k {
			j := &job.Job{Kind: "send", Region: "us", LimitKeys: []string{fmt.Sprintf("subscriber:k%02d", k)}}
			j.Prepare(fmt.Sprintf("01J%05d%05d", k, n), t0, 0, false)
			jobs = append(jobs, j)
		}
	}
	if _, err := st.Insert(ctx, jobs, admission.Config{}); err != nil {
		t.Fatal(err)
	}
	// One job of k00 is leased and answered 429: k00 pauses for 30 s.
	leased, err := st.Lease(ctx, store.LeaseParams{Now: t0, Max: 1, LeaseFor: time.Minute, Kinds: []string{"send"}})
	if err != nil || len(leased) != 1 {
		t.Fatalf("lease: %v %v", leased, err)
	}
	j := leased[0]
	errs, err := st.Finish(ctx, []store.Transition{{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateRetryScheduled,
		EligibleAt: t0.Add(30 * time.Second), Attempts: job.Attempts{Congestion: 1},
		Record: job.AttemptRecord{At: t0, Attempt: 1, Outcome: job.ClassRateLimited, Status: 429},
		Keys:   store.KeyEffect{Now: t0, RateLimited: true, PauseUntil: t0.Add(30 * time.Second)}}})
	if err != nil || errs[0] != nil {
		t.Fatalf("finish: %v %v", errs, err)
	}

	m, reg := newMetrics(t)
	m.keys.now = func() time.Time { return t0.Add(10 * time.Second) }
	m.AddRegion("us", st)

	waiting := series(t, reg, "ratelane_limit_key_waiting_cost")
	if len(waiting) != TopKeys+1 {
		t.Fatalf("%d waiting-cost series, want %d:\n%s", len(waiting), TopKeys+1, strings.Join(waiting, "\n"))
	}
	// k20..k29 wait 10+9+...+1 = 55 jobs between them.
	for _, want := range []string{
		`ratelane_limit_key_waiting_cost{key="subscriber:k00",region="us"} 30`,
		`ratelane_limit_key_waiting_cost{key="subscriber:k19",region="us"} 11`,
		`ratelane_limit_key_waiting_cost{key="_other",region="us"} 55`,
	} {
		if !strings.Contains(strings.Join(waiting, "\n"), want) {
			t.Errorf("missing %s in:\n%s", want, strings.Join(waiting, "\n"))
		}
	}
	if strings.Contains(strings.Join(waiting, "\n"), "k20") {
		t.Error("a key outside the top has its own series")
	}
	paused := strings.Join(series(t, reg, "ratelane_limit_key_paused_seconds"), "\n")
	if !strings.Contains(paused, `ratelane_limit_key_paused_seconds{key="subscriber:k00",region="us"} 20`) ||
		!strings.Contains(paused, `ratelane_limit_key_paused_seconds{key="subscriber:k01",region="us"} 0`) {
		t.Errorf("paused seconds:\n%s", paused)
	}
}
