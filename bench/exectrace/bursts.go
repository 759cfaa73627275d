package main

// bursts (the -bursts mode) reads a `ratelane bench batch-isolation
// --exec-trace` capture and says what the goroutines waiting for a CPU are
// at the moments many are: every 1 ms of trace time it counts the runnable
// goroutines (a histogram), and when more than thr are, tallies each one by
// where it became runnable (created, and by which stack; or woken from which
// wait), by the stack of the goroutine that woke it, and by its root
// function. It also lists wake runs: one goroutine waking several at one
// stack within 200 µs (a channel close, a commit answering its writes),
// with the most woken in one run. Load-independent enough to compare trees:
// what a burst is made of, not how long it lasted (docs/benchmarks.md,
// "Session 31 (s31h4)").

import (
	"fmt"
	"sort"

	"golang.org/x/exp/trace"
)

// burstKey is a wait site or waker: the first n frames of s outside the
// runtime, sync, internal/ and syscall packages.
func burstKey(s trace.Stack, n int) string {
	return stackKey(s, n, func(fn string, _ int) bool {
		return hasAnyPrefix(fn, "runtime.", "sync.", "internal/", "syscall.")
	})
}

// info is a runnable goroutine's tally keys.
type info struct{ where, waker, root string }

// bursts prints the -bursts reading of the capture at path: thr is the
// burst threshold, depth the frames of a wait site or waker stack.
func bursts(path string, thr, depth int) {
	waitWhere := map[trace.GoID]string{}
	root := map[trace.GoID]string{}
	runnable := map[trace.GoID]info{}
	whereTally := map[string]int{}
	wakerTally := map[string]int{}
	rootTally := map[string]int{}
	// per waking event: how many goroutines one goroutine woke at the same stack within 50us
	var lastWaker trace.GoID
	var lastWakeT trace.Time
	var lastWakeKey string
	herd := 0
	herdTally := map[string][]int{}
	flush := func() {
		if herd > 0 {
			herdTally[lastWakeKey] = append(herdTally[lastWakeKey], herd)
		}
		herd = 0
	}
	samples := 0
	var lastSample trace.Time
	hist := map[int]int{}
	eachEvent(path, func(ev trace.Event) {
		st, g, ok := goTransition(ev)
		if !ok {
			return
		}
		from, to := st.Goroutine()
		noteRoot(root, g, st.Stack)
		t := ev.Time()
		if to == trace.GoWaiting {
			w := burstKey(st.Stack, depth)
			if w == "" {
				w = burstKey(ev.Stack(), depth)
			}
			waitWhere[g] = st.Reason + " @ " + w
		}
		if to == trace.GoRunnable {
			wk := ""
			if from == trace.GoWaiting {
				wk = burstKey(ev.Stack(), depth)
				wg := ev.Goroutine()
				if wg != lastWaker || wk != lastWakeKey || t-lastWakeT > 200000 {
					flush()
					lastWaker, lastWakeKey = wg, wk
				}
				lastWakeT = t
				herd++
			}
			where := waitWhere[g]
			if from == trace.GoNotExist || from == trace.GoUndetermined {
				where = "created by " + burstKey(ev.Stack(), 7)
			}
			if from == trace.GoRunning {
				where = "preempted/yield"
			}
			runnable[g] = info{where, wk, root[g]}
		} else {
			delete(runnable, g)
		}
		// sample once per 1ms of trace time
		if t-lastSample >= 1000000 {
			lastSample = t
			hist[len(runnable)/5*5]++
			if len(runnable) > thr {
				samples++
				for _, in := range runnable {
					whereTally[in.where]++
					wakerTally[in.waker]++
					rootTally[in.root]++
				}
			}
		}
	})
	flush()
	pr := func(name string, m map[string]int) {
		type kv struct {
			k string
			v int
		}
		var kvs []kv
		tot := 0
		for k, v := range m {
			kvs = append(kvs, kv{k, v})
			tot += v
		}
		// Ties break on the key, so that the top-15 cut is the same on every
		// read of one trace (map order would otherwise pick among ties).
		sort.Slice(kvs, func(i, j int) bool { return kvs[i].v > kvs[j].v || kvs[i].v == kvs[j].v && kvs[i].k < kvs[j].k })
		fmt.Printf("== %s (samples %d, goroutine-samples %d)\n", name, samples, tot)
		for i, e := range kvs {
			if i == 15 {
				break
			}
			fmt.Printf("%6d %5.1f%% %s\n", e.v, 100*float64(e.v)/float64(tot), e.k)
		}
	}
	var hk []int
	for k := range hist {
		hk = append(hk, k)
	}
	sort.Ints(hk)
	fmt.Println("runnable histogram (1ms samples):")
	for _, k := range hk {
		fmt.Printf("  %3d-%3d: %d\n", k, k+4, hist[k])
	}
	pr("wait site before runnable", whereTally)
	pr("waker stack", wakerTally)
	pr("root", rootTally)
	type hk2 struct {
		k          string
		n, tot, mx int
	}
	var hs []hk2
	for k, v := range herdTally {
		s, mx := 0, 0
		for _, x := range v {
			s += x
			mx = max(mx, x)
		}
		hs = append(hs, hk2{k, len(v), s, mx})
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].tot > hs[j].tot || hs[i].tot == hs[j].tot && hs[i].k < hs[j].k })
	fmt.Println("== wake runs by one goroutine at one stack (within 200us): runs, woken total, max per run")
	for i, h := range hs {
		if i == 20 {
			break
		}
		fmt.Printf("%6d %7d %4d %s\n", h.n, h.tot, h.mx, h.k)
	}
}
