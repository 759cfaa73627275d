package bench

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// TestScoreUpstreams scores hand-made simulator reports against the exact
// ideal: a 10-per-second sliding window delivers 20 deliveries by 1 s at
// best (10 at once, 10 a window later), 25 attempts by 2 s.
func TestScoreUpstreams(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	dest := UpstreamDestination{Name: "d", Declared: 10, Jobs: 20,
		Route: upstream.RouteConfig{Window: time.Second, Limit: 10}}
	plan := UpstreamsPlan{Mixes: []UpstreamsMix{{Name: "m", Destinations: []UpstreamDestination{dest}}}}
	report := func(last time.Duration, transient, unique, limited int64) upstream.Report {
		return upstream.Report{Routes: map[string]upstream.RouteReport{"d": {
			Attempts: unique + transient + limited, Accepted: unique, UniqueIDs: unique, RateLimited: limited,
			Transient: transient, LastAccepted: start.Add(last)}}}
	}
	for _, tc := range []struct {
		name                  string
		rep                   upstream.Report
		lost                  int
		ratio, share, goodput float64
	}{
		{"ideal", report(time.Second, 0, 20, 0), 0, 1, 0, 1},
		{"twice the ideal, a 429 in five", report(2*time.Second, 0, 20, 5), 0, 2, 0.2, 0.5},
		// Five faults cost five of the window's admissions: 25 by 2 s.
		{"faults count as attempts", report(2*time.Second, 5, 20, 0), 0, 1, 0, 1},
		// Two never delivered: goodput scaled by 18/20.
		{"lost", report(time.Second, 0, 18, 0), 2, 1, 0, 0.9},
	} {
		r, err := ScoreUpstreams(plan, []MixOutcome{{Start: start, Report: tc.rep, Lost: tc.lost}})
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]float64{
			"makespan_ratio": tc.ratio, "makespan_ratio_m": tc.ratio, "rate_limited_share_m": tc.share,
			"goodput_m_d": tc.goodput, "goodput_min": tc.goodput, "lost": float64(tc.lost), "lost_m": float64(tc.lost),
		} {
			if got, ok := r.Get(name); !ok || math.Abs(got-want) > 1e-9 {
				t.Errorf("%s: %s = %v (%v), want %v", tc.name, name, got, ok, want)
			}
		}
	}
}

// TestUpstreamsPlan checks the plan's invariants: every route valid,
// every mix's ideal near its nominal length, names unique.
func TestUpstreamsPlan(t *testing.T) {
	t.Parallel()
	for _, smoke := range []bool{true, false} {
		seen := map[string]bool{}
		for _, m := range Upstreams(smoke).Mixes {
			if seen[m.Name] {
				t.Errorf("mix %s twice", m.Name)
			}
			seen[m.Name] = true
			for _, d := range m.Destinations {
				ts, err := upstream.IdealSchedule(d.Route, d.Jobs, time.Unix(0, 0))
				if err != nil {
					t.Fatalf("%s/%s: %v", m.Name, d.Name, err)
				}
				nominal := 10.0
				if smoke {
					nominal = 3
				}
				if ideal := ts[len(ts)-1].Sub(ts[0]).Seconds(); ideal < nominal-2 || ideal > nominal {
					t.Errorf("%s/%s: ideal %.2fs, want about %vs of work", m.Name, d.Name, ideal, nominal)
				}
				if d.Declared < 1 {
					t.Errorf("%s/%s: declared %d", m.Name, d.Name, d.Declared)
				}
			}
		}
	}
}

// TestStartLags checks the start-lag figure against a hand-made log: a
// sliding window of 2 per second, starts at 0, 10 ms, 1.05 s and 1.21 s.
func TestStartLags(t *testing.T) {
	start := time.Unix(100, 0)
	ms := func(n int) time.Time { return start.Add(time.Duration(n) * time.Millisecond) }
	rc := upstream.RouteConfig{Window: time.Second, Limit: 2}
	got := startLags(rc, start, []time.Time{ms(0), ms(10), ms(1050), ms(1210)})
	want := []time.Duration{0, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("startLags = %v, want %v", got, want)
	}
	if p := quantileMS(got, 0.5); p != 10 {
		t.Errorf("p50 = %v ms, want 10", p)
	}
	if p := quantileMS(got, 0.99); p != 200 {
		t.Errorf("p99 = %v ms, want 200", p)
	}
	rc.Changes = []upstream.LimitChange{{After: time.Second, Limit: 4}}
	if l := startLags(rc, start, []time.Time{ms(0)}); l != nil {
		t.Errorf("a window that changes mid-run: %v, want nil (no fixed slot to measure from)", l)
	}
}
