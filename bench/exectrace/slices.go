package main

// slices (the -slices mode) reads a `ratelane bench batch-isolation
// --exec-trace` capture for run slices: how long goroutines run between
// scheduling points, by phase (baseline, sweep) and by what they ran (the
// innermost ratelane frames of the stack each slice ended at: where it
// blocked, entered a syscall or was preempted), and how long goroutines
// serving an interactive review's stage (the rl.stage spans, on the
// goroutine that logged them) waited runnable for a P, and which slices
// held the Ps meanwhile. Go's scheduler has no priorities and preempts a
// running goroutine only after 10 ms: a woken interactive goroutine waits
// for a P until one of the running ones blocks or yields, so long batch
// slices would show here as long runnable waits behind them
// (docs/benchmarks.md, "Session 32 (s32h6)"). A slice is a goroutine's
// time on a P, which includes any time the OS took its thread away: on a
// quiet machine it is CPU work between scheduling points, under load some
// long slices are the OS's. Keys come from stacks, not pprof labels,
// which an execution trace does not carry.

import (
	"cmp"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/exp/trace"
)

// slice is one run of a goroutine on a P, [s, e), keyed by the stack it
// ended at; end is how it ended (blocked, syscall, preempted/yield, exit).
type slice struct {
	g        trace.GoID
	s, e     trace.Time
	key, end string
}

// sliceKey is what a slice ran: the first n ratelane frames of the stack
// it ended at (past the runtime and standard library), with the outermost
// foreign package it was inside when there is none of ratelane's (SQLite,
// net/http), or "?" for no stack.
func sliceKey(s trace.Stack, n int) string {
	k := stackKey(s, n, func(fn string, _ int) bool { return !strings.HasPrefix(fn, "github.com/ratelane/") })
	var tag string
	for f := range s.Frames() {
		switch {
		case strings.HasPrefix(f.Func, "modernc.org/sqlite"):
			tag = "sqlite"
		case strings.HasPrefix(f.Func, "net/http") && tag == "":
			tag = "net/http"
		}
	}
	switch {
	case k == "" && tag == "":
		return "?"
	case k == "":
		return "(" + tag + ")"
	case tag != "":
		return k + " (" + tag + ")"
	}
	return k
}

// sliceStats prints one line of a set of durations (ns).
func sliceStats(label string, d []float64) {
	if len(d) == 0 {
		fmt.Printf("  %-28s none\n", label)
		return
	}
	sort.Float64s(d)
	var tot, over1, over2 float64
	n1 := 0
	for _, x := range d {
		tot += x
		if x >= 1e6 {
			over1 += x
			n1++
		}
		if x >= 2e6 {
			over2 += x
		}
	}
	q := func(p float64) float64 { return d[min(len(d)-1, int(p*float64(len(d))))] / 1e3 }
	fmt.Printf("  %-28s n=%7d total=%8.1fms p50=%6.0fµs p90=%6.0f p99=%6.0f p99.9=%6.0f max=%7.0f  ≥1ms: n=%d, %.1f%% of the time; ≥2ms: %.1f%%\n",
		label, len(d), tot/1e6, q(0.5), q(0.9), q(0.99), q(0.999), d[len(d)-1]/1e3, n1, 100*over1/tot, 100*over2/tot)
}

// slices prints the -slices reading of the capture at path: depth is the
// ratelane frames of a slice's key, top how many keys each table lists,
// waitMin the shortest runnable wait (ns) whose P holders are tallied.
func slices(path string, depth, top int, waitMin float64) {
	var (
		all        []slice
		running    = map[trace.GoID]trace.Time{}
		root       = map[trace.GoID]string{}
		runnableAt = map[trace.GoID]trace.Time{}
		waits      []slice // runnable [s, e) of g; key unused
		mk         marks
		spans      []slice // interactive stage spans: g, [s, e)
		spanWall   [][2]int64
	)
	eachEvent(path, func(ev trace.Event) {
		t := ev.Time()
		if ev.Kind() == trace.EventLog {
			l := ev.Log()
			if mk.read(l, t) {
				return
			}
			if l.Category == "rl.stage" {
				if m := strings.Fields(l.Message); len(m) == 6 && m[0] == "interactive" {
					s, _ := strconv.ParseInt(m[4], 10, 64)
					e, _ := strconv.ParseInt(m[5], 10, 64)
					spans = append(spans, slice{g: ev.Goroutine(), key: m[1]})
					spanWall = append(spanWall, [2]int64{s, e})
				}
			}
			return
		}
		st, g, ok := goTransition(ev)
		if !ok {
			return
		}
		from, to := st.Goroutine()
		noteRoot(root, g, st.Stack)
		if from == trace.GoRunning {
			if s, ok := running[g]; ok {
				stk := st.Stack
				if stk == trace.NoStack {
					stk = ev.Stack()
				}
				end := to.String()
				if to == trace.GoRunnable {
					end = "preempted/yield"
				}
				k := sliceKey(stk, depth)
				if k == "?" {
					// No stack (the runtime's own goroutines: GC workers):
					// the goroutine's root function, or its id.
					k = "? root " + cmp.Or(root[g], "g"+strconv.FormatUint(uint64(g), 10))
				}
				all = append(all, slice{g, s, t, k, end})
				delete(running, g)
			}
		}
		if to == trace.GoRunning {
			running[g] = t
			if s, ok := runnableAt[g]; ok {
				waits = append(waits, slice{g: g, s: s, e: t})
			}
		}
		if to == trace.GoRunnable {
			runnableAt[g] = t
		} else {
			delete(runnableAt, g)
		}
	})
	phase := mk.phase
	// Slices by phase, then the sweep's by key.
	fmt.Println("running slices by phase (a slice: a goroutine's run between scheduling points):")
	byPhase := map[string][]float64{}
	for _, sl := range all {
		byPhase[phase(sl.s)] = append(byPhase[phase(sl.s)], float64(sl.e-sl.s))
	}
	for _, ph := range []string{"baseline", "sweep"} {
		sliceStats(ph, byPhase[ph])
	}
	for _, ph := range []string{"baseline", "sweep"} {
		type agg struct {
			d    []float64
			long float64
			ends map[string]int
		}
		byKey := map[string]*agg{}
		for _, sl := range all {
			if phase(sl.s) != ph {
				continue
			}
			a := byKey[sl.key]
			if a == nil {
				a = &agg{ends: map[string]int{}}
				byKey[sl.key] = a
			}
			d := float64(sl.e - sl.s)
			a.d = append(a.d, d)
			if d >= 1e6 {
				a.long += d
				a.ends[sl.end]++
			}
		}
		var ks []string
		for k := range byKey {
			ks = append(ks, k)
		}
		sort.Slice(ks, func(i, j int) bool {
			return byKey[ks[i]].long > byKey[ks[j]].long || byKey[ks[i]].long == byKey[ks[j]].long && ks[i] < ks[j]
		})
		fmt.Printf("\n%s: slices by what they ran (the stack they ended at), most time in slices ≥ 1 ms first:\n", ph)
		for i, k := range ks {
			if i == top {
				break
			}
			a := byKey[k]
			fmt.Printf("  %s\n", k)
			sliceStats("", a.d)
			if len(a.ends) > 0 {
				fmt.Printf("  %-28s ended: %v\n", "", a.ends)
			}
		}
	}
	// Interactive serving goroutines' runnable waits, and who held the Ps.
	for i, w := range spanWall {
		spans[i].s, spans[i].e = mk.toT(w[0]), mk.toT(w[1])
	}
	spansOf := map[trace.GoID][]slice{}
	for _, sp := range spans {
		spansOf[sp.g] = append(spansOf[sp.g], sp)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].s < all[j].s })
	var longest trace.Time
	for _, sl := range all {
		longest = max(longest, sl.e-sl.s)
	}
	waitBy := map[string][]float64{}
	held := map[string]map[string]float64{}
	heldLen := map[string][]float64{}
	for _, w := range waits {
		stage := ""
		for _, sp := range spansOf[w.g] {
			if w.s >= sp.s && w.s < sp.e {
				stage = sp.key
				break
			}
		}
		if stage == "" {
			continue
		}
		ph := phase(w.s)
		d := float64(w.e - w.s)
		waitBy[ph] = append(waitBy[ph], d)
		if d < waitMin {
			continue
		}
		if held[ph] == nil {
			held[ph] = map[string]float64{}
		}
		// The slices that held a P during the wait: those that began
		// before it ended and ended after it began (none is longer than
		// the longest, which bounds the look back).
		i := sort.Search(len(all), func(i int) bool { return all[i].s >= w.s-longest })
		for ; i < len(all) && all[i].s < w.e; i++ {
			sl := all[i]
			if sl.e <= w.s || sl.g == w.g {
				continue
			}
			held[ph][sl.key] += float64(min(sl.e, w.e) - max(sl.s, w.s))
			heldLen[ph] = append(heldLen[ph], float64(sl.e-sl.s))
		}
	}
	fmt.Printf("\nrunnable waits of goroutines serving an interactive stage (%d spans), by phase:\n", len(spans))
	for _, ph := range []string{"baseline", "sweep"} {
		sliceStats(ph, waitBy[ph])
	}
	for _, ph := range []string{"baseline", "sweep"} {
		h := held[ph]
		var ks []string
		tot := 0.0
		for k, v := range h {
			ks = append(ks, k)
			tot += v
		}
		sort.Slice(ks, func(i, j int) bool { return h[ks[i]] > h[ks[j]] || h[ks[i]] == h[ks[j]] && ks[i] < ks[j] })
		fmt.Printf("\n%s: who held the Ps during those waits ≥ %.0f µs (ms of overlap, %.1f in all; the holders' whole slice lengths below)\n", ph, waitMin/1e3, tot/1e6)
		for i, k := range ks {
			if i == top {
				break
			}
			fmt.Printf("  %8.2f %5.1f%%  %s\n", h[k]/1e6, 100*h[k]/tot, k)
		}
		sliceStats("holders' slices", heldLen[ph])
	}
}
