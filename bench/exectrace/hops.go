package main

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

// hops counts, per baseline interactive review, what the capture's
// baseline phase did between goroutines (the reviews' own work and every
// loop that runs beside it alike; the baseline has no batch lane): the
// goroutines created, by their root function and their creator's, and the
// wake-ups of a waiting goroutine, by the waker's root function and the
// woken one's ("(none)" for a wake-up by no goroutine: a timer, the
// netpoller), and the voluntary yields (runtime.Gosched) by the yielding
// goroutine's root function. A count per review, not a latency: it does
// not depend on the machine's load (docs/benchmarks.md, "Session 39
// (s39h2)").
func hops(path string, top int) {
	root := map[trace.GoID]string{}
	var mk marks
	reviews := 0
	created := map[string]int{}
	woken := map[string]int{}
	yields := map[string]int{}
	var pending []func() // keys whose roots are known only later
	eachEvent(path, func(ev trace.Event) {
		t := ev.Time()
		if ev.Kind() == trace.EventLog {
			l := ev.Log()
			if mk.read(l, t) {
				return
			}
			if l.Category == "rl.review" && strings.HasPrefix(l.Message, "baseline ") {
				reviews++
			}
			return
		}
		if mk.sweepAt != 0 && t >= mk.sweepAt {
			return
		}
		st, g, ok := goTransition(ev)
		if !ok {
			return
		}
		from, to := st.Goroutine()
		if from == trace.GoNotExist || root[g] == "" {
			noteRoot(root, g, st.Stack)
		}
		by := ev.Goroutine()
		if by != trace.NoGoroutine && root[by] == "" {
			noteRoot(root, by, ev.Stack())
		}
		switch {
		case from == trace.GoNotExist && to == trace.GoRunnable:
			pending = append(pending, func() { created[root[g]+" ⇐ "+root[by]]++ })
		case from == trace.GoWaiting && to == trace.GoRunnable:
			pending = append(pending, func() {
				w := "(none)"
				if by != trace.NoGoroutine && by != g {
					w = root[by]
				}
				woken[w+" → "+root[g]]++
			})
		case from == trace.GoRunning && to == trace.GoRunnable:
			r := st.Reason
			pending = append(pending, func() { yields[root[g]+" ("+r+")"]++ })
		}
	})
	for _, f := range pending {
		f()
	}
	if reviews == 0 {
		fmt.Println("no baseline review in the capture")
		return
	}
	print := func(title string, m map[string]int) {
		ks := make([]string, 0, len(m))
		tot := 0
		for k, n := range m {
			ks = append(ks, k)
			tot += n
		}
		sort.Slice(ks, func(i, j int) bool { return m[ks[i]] > m[ks[j]] || m[ks[i]] == m[ks[j]] && ks[i] < ks[j] })
		fmt.Printf("%s: %.2f per baseline review (%d in all)\n", title, float64(tot)/float64(reviews), tot)
		for _, k := range ks[:min(top, len(ks))] {
			fmt.Printf("  %6.2f  %s\n", float64(m[k])/float64(reviews), k)
		}
	}
	fmt.Printf("baseline phase: %d interactive reviews\n", reviews)
	print("goroutines created (new ⇐ creator)", created)
	print("wake-ups of a waiting goroutine (waker → woken)", woken)
	print("yields (runtime.Gosched) by the yielding goroutine", yields)
}
