package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

// TestRunPhases: run k of N starts k/N of a second into the upstream's
// second (0 / 333 / 667 ms for three), a single run at Options.Phase
// (DefaultPhase when unset), and PhaseFixed keeps Phase for every run.
func TestRunPhases(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	phases := func(o Options) []time.Duration {
		var out []time.Duration
		for k := range max(1, o.Runs) {
			out = append(out, o.PhaseOfRun(k))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		o    Options
		want []time.Duration
	}{
		{"single run, default", Options{}, []time.Duration{DefaultPhase}},
		{"single run, --phase 250ms", Options{Phase: ms(250), PhaseFixed: true}, []time.Duration{ms(250)}},
		{"three runs", Options{Runs: 3}, []time.Duration{0, ms(333), ms(667)}},
		{"four runs", Options{Runs: 4}, []time.Duration{0, ms(250), ms(500), ms(750)}},
		{"six runs", Options{Runs: 6}, []time.Duration{0, ms(167), ms(333), ms(500), ms(667), ms(833)}},
		{"three runs, --phase 900ms", Options{Runs: 3, Phase: ms(900), PhaseFixed: true}, []time.Duration{ms(900), ms(900), ms(900)}},
	} {
		if got := phases(tc.o); !slices.Equal(got, tc.want) {
			t.Errorf("%s: phases %v, want %v", tc.name, got, tc.want)
		}
	}
	for n := 1; n <= 12; n++ {
		for k := range n {
			if err := upstream.CheckPhase(RunPhase(k, n)); err != nil {
				t.Errorf("RunPhase(%d, %d): %v", k, n, err)
			}
		}
	}
}

// TestScoreUpstreamsPhase: the result records where in its second the
// run started, from the first mix's start.
func TestScoreUpstreamsPhase(t *testing.T) {
	t.Parallel()
	dest := UpstreamDestination{Name: "d", Declared: 10, Jobs: 10, Route: upstream.RouteConfig{Window: time.Second, Limit: 10}}
	plan := UpstreamsPlan{Mixes: []UpstreamsMix{{Name: "m", Destinations: []UpstreamDestination{dest}}}}
	start := time.Date(2026, 12, 4, 21, 0, 7, int(667*time.Millisecond), time.UTC)
	rep := upstream.Report{Routes: map[string]upstream.RouteReport{"d": {Attempts: 10, Accepted: 10, UniqueIDs: 10, LastAccepted: start}}}
	r, err := ScoreUpstreams(plan, []MixOutcome{{Start: start, Report: rep}})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := r.Get("start_phase_ms"); !ok || got != 667 {
		t.Errorf("start_phase_ms = %v (%v), want 667", got, ok)
	}
}
