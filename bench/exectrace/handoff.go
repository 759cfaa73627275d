package main

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

// The -handoff mode: what an interactive review's worker goroutine (the
// goroutine of its part's run stage, engine.run's) does between its
// handler's return (the run stage's end) and its own end, just after it
// handed the outcome to the finisher (`e.results <-`; what follows, a
// slot given back and the wait group, takes no time): the hand-off the
// finish stage waits for. Until session 37 it read the part's parent and
// its parts there (fused.go); a send blocked on a busy finisher shows as
// a wait too. Per phase: the gap's distribution over every review, and
// over the slowest share (-tail), with its share of their latency and
// its split by the worker's state (splitReview's classes).

// handoff is the hand-off gap of a review (ns) and its split by the
// worker goroutine's state ("handoff | class"), from when the worker
// logged its run stage to the worker's end; ok is false when the review
// has no run stage or its worker's end is not in the trace.
func handoff(segs []seg, states map[trace.GoID][]gstate, assists map[trace.GoID][][2]trace.Time, root map[trace.GoID]string) (d float64, split map[string]float64, ok bool) {
	i := len(segs) - 1
	for i >= 0 && segs[i].stage != "run" {
		i--
	}
	if i < 0 || segs[i].g == 0 {
		return 0, nil, false
	}
	// From the run span's log, on the worker right after the handler's
	// return, rather than its end, a wall time mapped onto the trace's
	// clock: that drifts by microseconds, as long as the gap now is.
	g, from := segs[i].g, segs[i].logged
	if from == 0 {
		from = segs[i].e
	}
	sts := states[g]
	k := sort.Search(len(sts), func(k int) bool { return sts[k].at >= from })
	for ; k < len(sts) && sts[k].state != trace.GoNotExist; k++ {
	}
	if k == len(sts) {
		return 0, nil, false
	}
	to := sts[k].at
	split, _ = splitReview([]seg{{stage: "handoff", g: g, s: from, e: to}}, states, assists, root)
	return float64(to - from), split, true
}

// printHandoff prints the -handoff tables for the in-sweep reviews
// (sweep) and the baseline's (base).
func printHandoff(sweep, base []*review, share float64, states map[trace.GoID][]gstate, assists map[trace.GoID][][2]trace.Time, root map[trace.GoID]string) {
	for _, ph := range []struct {
		name string
		rs   []*review
	}{{"baseline", base}, {"sweep", sweep}} {
		gap, split := map[*review]float64{}, map[*review]map[string]float64{}
		var all []*review
		for _, r := range ph.rs {
			if d, s, ok := handoff(r.segs, states, assists, root); ok {
				gap[r], split[r] = d, s
				all = append(all, r)
			}
		}
		if len(all) < 2 {
			fmt.Printf("%s: %d reviews with a hand-off in the trace; too few\n", ph.name, len(all))
			continue
		}
		tail := slowest(all, share)
		fmt.Printf("%s: %d reviews (of %d); hand-off ms %s\n", ph.name, len(all), len(ph.rs), gapStats(all, gap))
		var tailGap, tailLat float64
		for _, r := range tail {
			tailGap += gap[r]
			tailLat += float64(r.e - r.s)
		}
		fmt.Printf("  slowest %d (latency mean %.2f ms): hand-off ms %s, %.1f%% of their latency\n",
			len(tail), tailLat/float64(len(tail))/1e6, gapStats(tail, gap), 100*tailGap/tailLat)
		get := func(r *review) map[string]float64 { return split[r] }
		ma, mt := meanSplit(all, get), meanSplit(tail, get)
		var ks []string
		for k := range ma {
			ks = append(ks, k)
		}
		sort.Slice(ks, func(i, j int) bool { return ma[ks[i]] > ma[ks[j]] || ma[ks[i]] == ma[ks[j]] && ks[i] < ks[j] })
		fmt.Printf("  by the worker's state (ms per review: all, slowest)\n")
		for _, k := range ks {
			if max(ma[k], mt[k]) >= 0.005 {
				fmt.Printf("    %-110s %7.3f %7.3f\n", strings.TrimPrefix(k, "handoff | "), ma[k], mt[k])
			}
		}
	}
}

// gapStats is "mean m, p50 …, p90 …, p99 …, max …" (ms) of gap over rs.
func gapStats(rs []*review, gap map[*review]float64) string {
	v := make([]float64, 0, len(rs))
	var tot float64
	for _, r := range rs {
		v = append(v, gap[r])
		tot += gap[r]
	}
	sort.Float64s(v)
	q := func(p float64) float64 { return v[min(len(v)-1, int(p*float64(len(v))))] / 1e6 }
	return fmt.Sprintf("mean %.3f, p50 %.3f, p90 %.3f, p99 %.3f, max %.3f", tot/float64(len(v))/1e6, q(0.5), q(0.9), q(0.99), v[len(v)-1]/1e6)
}
