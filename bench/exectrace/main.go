// Command exectrace reads a `ratelane bench batch-isolation --exec-trace`
// capture and attributes the slowest in-sweep interactive reviews' extra
// latency (against the in-sweep median band, or every baseline review) to
// what the goroutines serving them were doing: each stage of a review (the
// engine's spans, logged on the goroutine that ended them) split by that
// goroutine's state (running, runnable, waiting by reason and call site,
// in a syscall, not yet created); for its waits, what the goroutine that
// ended the wait was doing meanwhile; for its runnable time, which
// goroutines (by their root function) held the Ps; its overlap with
// stop-the-world pauses and its own GC assists; and the SQLite commit
// fsyncs of each phase. It is a module of its own so that the parser
// (golang.org/x/exp/trace) stays out of ratelane's dependencies.
//
// With -bursts it reads the same capture for the moments many goroutines
// wait for a CPU instead (bursts.go); with -slices, for how long
// goroutines run between scheduling points and what held the Ps while
// interactive ones waited (slices.go).
//
// With -roles it splits the slowest in-sweep reviews' wall time, and the
// slowest baseline reviews' at the same share, by the role of the
// goroutine serving each stretch and its state (roles.go); the roles'
// waits on a SQLite-level mutex (modernc libc's pthread mutex) are a class
// of their own. With -locks it lists every such wait per phase, by who
// waited at which SQLite function and who held the lock (locks.go).
//
// Usage: go run . [-tail 0.02] [-vs median|baseline] [-syscalls] FILE
//
//	go run . -bursts [-thr 20] [-depth 3] FILE
//	go run . -slices [-depth 3] [-top 15] [-wait-min 500us] FILE
//	go run . -roles [-tail 0.02] FILE
//	go run . -locks [-top 15] FILE
//	go run . -hops [-top 15] FILE
//
// With -hops it counts, per baseline interactive review, the goroutines
// created, the wake-ups between goroutines and the yields (hops.go).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

type gstate struct {
	at     trace.Time
	state  trace.GoState
	reason string
	where  string // top non-runtime frame of a waiting transition
	waker  trace.GoID
}

type span struct {
	stage  string
	id     string
	parent string
	s, e   trace.Time
	g      trace.GoID
	// logged is when g logged the span (a trace time, exact, where s
	// and e are wall times mapped onto the trace's clock at one sync
	// point, which drift from it by microseconds over a run).
	logged trace.Time
}

type review struct {
	phase       string
	id          string
	s, sub, e   trace.Time
	g           trace.GoID
	segs        []seg
	cats        map[string]float64 // ns by category
	runnableWho map[string]float64
	stageNs     map[string]float64
	stw, assist float64
	wakers      map[string]float64
}

type seg struct {
	stage  string
	g      trace.GoID
	s, e   trace.Time
	logged trace.Time // the span's (zero for a gap between spans)
}

type run struct {
	g    trace.GoID
	s, e trace.Time
}

func main() {
	tailShare := flag.Float64("tail", 0.02, "the slowest share of the in-sweep reviews taken as the tail (at least 2)")
	vs := flag.String("vs", "median", "what the tail is compared with: median (the in-sweep reviews from the 45th to the 55th percentile) or baseline (every baseline review)")
	syscalls := flag.Bool("syscalls", false, "also list the syscalls by call site, longest in total first")
	burstMode := flag.Bool("bursts", false, "instead: what the goroutines waiting for a CPU are at the moments many are (bursts.go)")
	thr := flag.Int("thr", 20, "with -bursts: the burst threshold, runnable goroutines in a 1 ms sample")
	depth := flag.Int("depth", 3, "with -bursts: the frames of a wait site or waker stack; with -slices: the ratelane frames of a slice's key")
	sliceMode := flag.Bool("slices", false, "instead: how long goroutines run between scheduling points, by what they ran, and what held the Ps while interactive ones waited for one (slices.go)")
	top := flag.Int("top", 15, "with -slices and -locks: the keys each table lists")
	waitMin := flag.Duration("wait-min", 500*time.Microsecond, "with -slices: the shortest runnable wait whose P holders are tallied")
	lockMode := flag.Bool("locks", false, "instead: every park on a SQLite-level mutex (modernc libc's pthread mutex) per phase, by waiter and SQLite function, and by holder (locks.go)")
	roleMode := flag.Bool("roles", false, "instead: the slowest in-sweep reviews' wall time and the slowest baseline reviews' at the same -tail share, split by the role of the goroutine serving each stretch and its state (roles.go)")
	hopMode := flag.Bool("hops", false, "instead: per baseline interactive review, the goroutines created, the wake-ups of waiting goroutines (waker → woken) and the yields, by root function (hops.go)")
	handoffMode := flag.Bool("handoff", false, "instead: the hand-off gap of each review's worker goroutine, from its handler's return to its outcome handed to the finisher, by phase and by the worker's state (handoff.go)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: exectrace [-tail 0.02] [-vs median|baseline] [-syscalls] FILE")
		fmt.Fprintln(os.Stderr, "       exectrace -bursts [-thr 20] [-depth 3] FILE")
		fmt.Fprintln(os.Stderr, "       exectrace -slices [-depth 3] [-top 15] [-wait-min 500us] FILE")
		fmt.Fprintln(os.Stderr, "       exectrace -roles [-tail 0.02] FILE")
		fmt.Fprintln(os.Stderr, "       exectrace -handoff [-tail 0.02] FILE")
		fmt.Fprintln(os.Stderr, "       exectrace -locks [-top 15] FILE")
		fmt.Fprintln(os.Stderr, "       exectrace -hops [-top 15] FILE")
		os.Exit(2)
	}
	if *burstMode {
		bursts(flag.Arg(0), *thr, *depth)
		return
	}
	if *hopMode {
		hops(flag.Arg(0), *top)
		return
	}
	if *lockMode {
		printLocks(flag.Arg(0), *top)
		return
	}
	if *sliceMode {
		slices(flag.Arg(0), *depth, *top, float64(*waitMin))
		return
	}
	states := map[trace.GoID][]gstate{}
	root := map[trace.GoID]string{}
	running := map[trace.GoID]trace.Time{}
	var runs []run
	var stw [][2]trace.Time
	stwOpen := map[string]trace.Time{}
	assists := map[trace.GoID][][2]trace.Time{}
	assistOpen := map[trace.GoID]trace.Time{}
	var mk marks
	var spansRaw [][]string
	var spanG []trace.GoID
	var spanT []trace.Time
	var revRaw [][]string
	var revG []trace.GoID
	var first, last trace.Time
	type sysCall struct {
		at  trace.Time
		key string
	}
	sysOpen := map[trace.GoID]sysCall{}
	sysAgg := map[string][4]float64{}
	var fsyncs [][2]float64 // start, duration (ns)
	// pwait is, per fsync (the index in fsyncs), the time from the
	// syscall's return to its goroutine running again when it returned
	// without a P (Syscall -> Runnable): Go's P-wait after the sync.
	pwait := map[int]float64{}
	pwaitOpen := map[trace.GoID][2]float64{} // fsync index, exit time
	eachEvent(flag.Arg(0), func(ev trace.Event) {
		t := ev.Time()
		if first == 0 {
			first = t
		}
		last = t
		switch ev.Kind() {
		case trace.EventStateTransition:
			st, g, ok := goTransition(ev)
			if !ok {
				return
			}
			from, to := st.Goroutine()
			if root[g] == "" {
				root[g] = rootOf(st.Stack)
				if root[g] == "" && ev.Goroutine() == g {
					root[g] = rootOf(ev.Stack())
				}
			}
			w := ""
			if to == trace.GoWaiting || to == trace.GoSyscall {
				w = topFrame(st.Stack)
				if w == "" {
					w = topFrame(ev.Stack())
				}
			}
			if to == trace.GoSyscall {
				sysOpen[g] = sysCall{t, syscallKey(ev.Stack())}
			}
			if from == trace.GoSyscall {
				if c, ok := sysOpen[g]; ok {
					d := float64(t - c.at)
					if strings.HasPrefix(c.key, "modernc.org/sqlite/lib._full_fsync") {
						fsyncs = append(fsyncs, [2]float64{float64(c.at), d})
						if to == trace.GoRunnable {
							pwaitOpen[g] = [2]float64{float64(len(fsyncs) - 1), float64(t)}
						}
					}
					a := sysAgg[c.key]
					a[0]++
					a[1] += d
					a[2] = max(a[2], d)
					if d > 10e6 {
						a[3]++
					}
					sysAgg[c.key] = a
					delete(sysOpen, g)
				}
			}
			var wk trace.GoID
			if from == trace.GoWaiting && to == trace.GoRunnable {
				wk = ev.Goroutine()
			}
			states[g] = append(states[g], gstate{at: t, state: to, reason: st.Reason, where: w, waker: wk})
			if from == trace.GoRunning {
				if s, ok := running[g]; ok {
					runs = append(runs, run{g, s, t})
					delete(running, g)
				}
			}
			if to == trace.GoRunning {
				running[g] = t
				if o, ok := pwaitOpen[g]; ok {
					pwait[int(o[0])] = float64(t) - o[1]
					delete(pwaitOpen, g)
				}
			}
		case trace.EventRangeBegin, trace.EventRangeEnd, trace.EventRangeActive:
			r := ev.Range()
			if strings.HasPrefix(r.Name, "stop-the-world") {
				if ev.Kind() == trace.EventRangeEnd {
					if s, ok := stwOpen[r.Name]; ok {
						stw = append(stw, [2]trace.Time{s, t})
						delete(stwOpen, r.Name)
					}
				} else {
					stwOpen[r.Name] = t
				}
			}
			if r.Name == "GC mark assist" {
				g := ev.Goroutine()
				if ev.Kind() == trace.EventRangeEnd {
					if s, ok := assistOpen[g]; ok {
						assists[g] = append(assists[g], [2]trace.Time{s, t})
						delete(assistOpen, g)
					}
				} else {
					assistOpen[g] = t
				}
			}
		case trace.EventLog:
			l := ev.Log()
			if mk.read(l, t) {
				return
			}
			switch l.Category {
			case "rl.stage":
				spansRaw = append(spansRaw, strings.Fields(l.Message))
				spanG = append(spanG, ev.Goroutine())
				spanT = append(spanT, t)
			case "rl.review":
				revRaw = append(revRaw, strings.Fields(l.Message))
				revG = append(revG, ev.Goroutine())
			}
		}
	})
	if *syscalls {
		var ks []string
		for k := range sysAgg {
			ks = append(ks, k)
		}
		sort.Slice(ks, func(i, j int) bool {
			return sysAgg[ks[i]][1] > sysAgg[ks[j]][1] || sysAgg[ks[i]][1] == sysAgg[ks[j]][1] && ks[i] < ks[j]
		})
		for _, k := range ks[:min(12, len(ks))] {
			a := sysAgg[k]
			fmt.Printf("n=%6.0f total=%8.1fms max=%7.1fms over10ms=%3.0f  %s\n", a[0], a[1]/1e6, a[2]/1e6, a[3], k)
		}
	}
	// The fsyncs by phase, once the phase mark is known (without one, a
	// capture of the sweep alone, they are the whole trace's).
	byPhase := map[string][]float64{}
	pwBy := map[string][]float64{} // P-wait per fsync, 0 for one that kept or got a P at once
	for i, fs := range fsyncs {
		ph := "baseline"
		switch {
		case mk.sweepAt == 0:
			ph = "trace"
		case trace.Time(fs[0]) >= mk.sweepAt:
			ph = "sweep"
		}
		byPhase[ph] = append(byPhase[ph], fs[1])
		pwBy[ph] = append(pwBy[ph], pwait[i])
	}
	for _, ph := range []string{"trace", "baseline", "sweep"} {
		v := byPhase[ph]
		sort.Float64s(v)
		if len(v) == 0 {
			continue
		}
		tot := 0.0
		for _, x := range v {
			tot += x
		}
		span := float64(last - first) // "trace": the whole capture
		switch {
		case mk.sweepAt != 0 && ph == "baseline":
			span = float64(mk.sweepAt - first)
		case mk.sweepAt != 0:
			span = float64(last - mk.sweepAt)
		}
		q := func(p float64) float64 { return v[min(len(v)-1, int(p*float64(len(v))))] / 1e6 }
		fmt.Printf("fsync (SQLite WAL/checkpoint) %s: %d in %.1f s (%.0f/s), busy %.1f%%, p50 %.2f ms, p90 %.2f, p99 %.2f, max %.1f\n",
			ph, len(v), span/1e9, float64(len(v))/(span/1e9), 100*tot/span, q(0.5), q(0.9), q(0.99), v[len(v)-1]/1e6)
		w := pwBy[ph]
		sort.Float64s(w)
		n, wt := 0, 0.0
		for _, x := range w {
			if x > 0 {
				n++
			}
			wt += x
		}
		qw := func(p float64) float64 { return w[min(len(w)-1, int(p*float64(len(w))))] / 1e6 }
		fmt.Printf("  after it, Go's P-wait (syscall return without a P -> running) %s: %d of %d fsyncs (%.1f%%), mean %.3f ms per fsync, p90 %.2f, p99 %.2f, max %.1f; %.1f%% of the fsyncs' time\n",
			ph, n, len(w), 100*float64(n)/float64(len(w)), wt/float64(len(w))/1e6, qw(0.9), qw(0.99), w[len(w)-1]/1e6, 100*wt/tot)
	}
	for g, s := range running {
		runs = append(runs, run{g, s, last})
	}
	toT := func(s string) trace.Time {
		w, _ := strconv.ParseInt(s, 10, 64)
		return mk.toT(w)
	}
	byReview := map[string][]span{}
	for i, m := range spansRaw {
		if len(m) != 6 {
			continue
		}
		sp := span{stage: m[1], id: m[2], parent: m[3], s: toT(m[4]), e: toT(m[5]), g: spanG[i], logged: spanT[i]}
		id := sp.id
		if sp.parent != "-" {
			id = sp.parent
		}
		byReview[id] = append(byReview[id], sp)
	}
	var revs []*review
	for i, m := range revRaw {
		if len(m) != 5 {
			continue
		}
		r := &review{phase: m[0], id: m[1], s: toT(m[2]), sub: toT(m[3]), e: toT(m[4]), g: revG[i]}
		if r.s < first || r.e > last {
			continue
		}
		sps := byReview[r.id]
		if !throughAggregate(sps) {
			continue
		}
		sort.Slice(sps, func(a, b int) bool { return sps[a].s < sps[b].s })
		cur := r.s
		for _, sp := range sps {
			g := sp.g
			if sp.s > cur {
				gg := g
				name := "gap>" + sp.stage
				if cur == r.s {
					gg, name = r.g, "submit"
				}
				r.segs = append(r.segs, seg{stage: name, g: gg, s: cur, e: sp.s})
				cur = sp.s
			}
			if sp.e > cur {
				r.segs = append(r.segs, seg{stage: sp.stage, g: g, s: cur, e: sp.e, logged: sp.logged})
				cur = sp.e
			}
		}
		if r.e > cur {
			r.segs = append(r.segs, seg{stage: "notice", g: r.g, s: cur, e: r.e})
		}
		revs = append(revs, r)
	}
	sort.Slice(runs, func(a, b int) bool { return runs[a].s < runs[b].s })
	// who ran in [s,e): ns by root function, excluding g
	whoRan := func(s, e trace.Time, except trace.GoID, into map[string]float64) {
		for _, rn := range runs {
			if rn.s >= e {
				break
			}
			if rn.e <= s || rn.g == except {
				continue
			}
			o := min(rn.e, e) - max(rn.s, s)
			if o > 0 {
				into[root[rn.g]] += float64(o)
			}
		}
	}
	for _, r := range revs {
		r.cats, r.runnableWho, r.stageNs, r.wakers = map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]float64{}
		for _, sg := range r.segs {
			r.stageNs[sg.stage] += float64(sg.e - sg.s)
			if sg.g == 0 {
				// queued: the fetch loop's lease; split by whether the Ps were busy
				r.cats["queued(store wait for a lease)"] += float64(sg.e - sg.s)
				continue
			}
			sts := states[sg.g]
			// state at sg.s: last transition at or before
			i := sort.Search(len(sts), func(i int) bool { return sts[i].at > sg.s }) - 1
			t := sg.s
			for {
				var cur gstate
				if i >= 0 {
					cur = sts[i]
				} else {
					cur = gstate{state: trace.GoNotExist, reason: "before first event"}
				}
				next := sg.e
				if i+1 < len(sts) && sts[i+1].at < sg.e {
					next = sts[i+1].at
				}
				d := float64(next - t)
				if d > 0 {
					var k string
					switch cur.state {
					case trace.GoRunning:
						k = "running"
					case trace.GoRunnable:
						k = "runnable"
						whoRan(t, next, sg.g, r.runnableWho)
					case trace.GoWaiting:
						k = "waiting: " + cur.reason + " @ " + cur.where
						if i+1 < len(sts) && sts[i+1].waker != trace.NoGoroutine && sts[i+1].waker != 0 {
							wk := sts[i+1].waker
							for st, v := range stateOf(states[wk], t, next) {
								r.wakers[sg.stage+" | waiting, woken by "+root[wk]+" which was "+st] += v
							}
						}
					case trace.GoSyscall:
						k = "syscall @ " + cur.where
					case trace.GoNotExist:
						k = "not yet created"
					default:
						k = cur.state.String()
					}
					r.cats[sg.stage+" | "+k] += d
				}
				if next >= sg.e {
					break
				}
				t = next
				i++
			}
			for _, a := range assists[sg.g] {
				if o := min(a[1], sg.e) - max(a[0], sg.s); o > 0 {
					r.assist += float64(o)
				}
			}
		}
		for _, w := range stw {
			if o := min(w[1], r.e) - max(w[0], r.s); o > 0 {
				r.stw += float64(o)
			}
		}
	}
	var base []*review
	{
		var sw []*review
		for _, r := range revs {
			if r.phase == "baseline" {
				base = append(base, r)
			} else {
				sw = append(sw, r)
			}
		}
		revs = sw
	}
	if *roleMode {
		printRoles(revs, base, *tailShare, states, assists, root)
		return
	}
	if *handoffMode {
		printHandoff(revs, base, *tailShare, states, assists, root)
		return
	}
	sort.Slice(revs, func(a, b int) bool { return revs[a].e-revs[a].s > revs[b].e-revs[b].s })
	sort.Slice(base, func(a, b int) bool { return base[a].e-base[a].s > base[b].e-base[b].s })
	n := len(revs)
	fmt.Printf("trace %.1f s, %d in-sweep reviews inside it, %d STW ranges\n", float64(last-first)/1e9, n, len(stw))
	if n < 20 {
		return
	}
	ntail := max(2, int(*tailShare*float64(n)))
	tail := revs[:ntail]
	mid := revs[n*45/100 : n*55/100]
	if *vs == "baseline" && len(base) >= 20 {
		mid = base
		fmt.Printf("comparing with every baseline review (%d)\n", len(base))
	}
	lat := func(rs []*review) float64 {
		s := 0.0
		for _, r := range rs {
			s += float64(r.e - r.s)
		}
		return s / float64(len(rs)) / 1e6
	}
	fmt.Printf("tail: %d reviews, mean %.2f ms (least %.2f); median band: %d reviews, mean %.2f ms\n", len(tail), lat(tail),
		float64(tail[len(tail)-1].e-tail[len(tail)-1].s)/1e6, len(mid), lat(mid))
	mean := func(rs []*review, get func(*review) map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for _, r := range rs {
			for k, v := range get(r) {
				out[k] += v / float64(len(rs)) / 1e6
			}
		}
		return out
	}
	show := func(title string, get func(*review) map[string]float64) {
		a, b := mean(tail, get), mean(mid, get)
		keys := map[string]bool{}
		for k := range a {
			keys[k] = true
		}
		for k := range b {
			keys[k] = true
		}
		var ks []string
		for k := range keys {
			ks = append(ks, k)
		}
		sort.Slice(ks, func(i, j int) bool { return a[ks[i]]-b[ks[i]] > a[ks[j]]-b[ks[j]] })
		extra := lat(tail) - lat(mid)
		fmt.Printf("\n%s (ms: tail mean, median-band mean, tail-minus-median, share of the tail's extra %.2f ms)\n", title, extra)
		for _, k := range ks {
			if a[k] < 0.05 && b[k] < 0.05 {
				continue
			}
			fmt.Printf("  %-90s %7.2f %7.2f %7.2f %6.1f%%\n", k, a[k], b[k], a[k]-b[k], 100*(a[k]-b[k])/extra)
		}
	}
	show("by stage", func(r *review) map[string]float64 { return r.stageNs })
	show("by stage | state of the serving goroutine", func(r *review) map[string]float64 { return r.cats })
	show("waits: what the goroutine that ended them was doing meanwhile", func(r *review) map[string]float64 { return r.wakers })
	show("while runnable: who held the Ps (ns of CPU by goroutine root function)", func(r *review) map[string]float64 { return r.runnableWho })
	show("STW overlap / own GC assist", func(r *review) map[string]float64 {
		return map[string]float64{"stw": r.stw, "assist": r.assist}
	})
	fmt.Println("\nslowest reviews:")
	for _, r := range revs[:min(10, n)] {
		fmt.Printf("  %s %.2f ms:", r.id, float64(r.e-r.s)/1e6)
		for _, sg := range r.segs {
			if d := float64(sg.e-sg.s) / 1e6; d >= 0.5 {
				fmt.Printf(" %s=%.1f", sg.stage, d)
			}
		}
		fmt.Println()
	}
}

// marks are the capture's clock and phase marks (execTrace's rl.sync and
// rl.phase logs).
type marks struct {
	syncWall       int64      // the wall clock at the capture's start, Unix ns
	syncT, sweepAt trace.Time // the trace time of that start, and of the sweep's (0: none)
}

// read takes l (logged at t) when it is a mark, and says whether it was.
func (m *marks) read(l trace.Log, t trace.Time) bool {
	switch l.Category {
	case "rl.sync":
		m.syncWall, _ = strconv.ParseInt(l.Message, 10, 64)
		m.syncT = t
	case "rl.phase":
		m.sweepAt = t
	default:
		return false
	}
	return true
}

// toT is the trace time of wall, a Unix ns time logged by the bench.
func (m *marks) toT(wall int64) trace.Time { return m.syncT + trace.Time(wall-m.syncWall) }

// phase is "sweep" from the sweep's mark on, else "baseline".
func (m *marks) phase(t trace.Time) string {
	if m.sweepAt != 0 && t >= m.sweepAt {
		return "sweep"
	}
	return "baseline"
}

// eachEvent calls fn with every event of the trace in the file at path, in
// order; both readers panic on a file they cannot read, as a one-off tool.
func eachEvent(path string, fn func(trace.Event)) {
	f, err := os.Open(path)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	rd, err := trace.NewReader(f)
	if err != nil {
		panic(err)
	}
	for {
		ev, err := rd.ReadEvent()
		if err == io.EOF {
			return
		}
		if err != nil {
			panic(err)
		}
		fn(ev)
	}
}

// goTransition is ev's goroutine state transition and its goroutine; ok
// is false for any other event (a proc's, a thread's, or no transition).
func goTransition(ev trace.Event) (st trace.StateTransition, g trace.GoID, ok bool) {
	if ev.Kind() != trace.EventStateTransition {
		return st, 0, false
	}
	st = ev.StateTransition()
	if st.Resource.Kind != trace.ResourceGoroutine {
		return st, 0, false
	}
	return st, st.Resource.Goroutine(), true
}

// rootOf is the outermost frame of s (a goroutine's root function), "" for
// an empty stack.
func rootOf(s trace.Stack) string {
	var last string
	for f := range s.Frames() {
		last = f.Func
	}
	return short(last)
}

// noteRoot records g's root function from s (rootOf) when root has none.
func noteRoot(root map[trace.GoID]string, g trace.GoID, s trace.Stack) {
	if root[g] == "" {
		root[g] = rootOf(s)
	}
}

// stackKey joins, innermost first with " < ", the first n frames of s that
// skip does not pass over; skip is also told how many are kept so far.
func stackKey(s trace.Stack, n int, skip func(fn string, kept int) bool) string {
	var parts []string
	for f := range s.Frames() {
		if skip(f.Func, len(parts)) {
			continue
		}
		parts = append(parts, short(f.Func))
		if len(parts) == n {
			break
		}
	}
	return strings.Join(parts, " < ")
}

// hasAnyPrefix reports whether fn starts with one of prefixes.
func hasAnyPrefix(fn string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// topFrame is a waiting or syscall transition's call site: its innermost
// frame outside the runtime, sync and internal packages and time.Sleep.
func topFrame(s trace.Stack) string {
	return stackKey(s, 1, func(fn string, _ int) bool {
		return hasAnyPrefix(fn, "runtime.", "sync.", "internal/", "time.Sleep")
	})
}

// syscallKey is a syscall's call site, five frames outside the runtime and
// syscall packages, and past modernc.org/libc's wrappers at the top (so an
// fsync reads as SQLite's _full_fsync).
func syscallKey(s trace.Stack) string {
	return stackKey(s, 5, func(fn string, kept int) bool {
		return hasAnyPrefix(fn, "runtime.", "syscall.") || kept == 0 && strings.HasPrefix(fn, "modernc.org/libc.")
	})
}

func short(fn string) string {
	fn = strings.TrimPrefix(fn, "github.com/ratelane/ratelane/")
	return fn
}

// stateOf is ns by state (with the waiting reason) of a goroutine over [s,e).
func stateOf(sts []gstate, s, e trace.Time) map[string]float64 {
	out := map[string]float64{}
	i := sort.Search(len(sts), func(i int) bool { return sts[i].at > s }) - 1
	t := s
	for t < e {
		st := "unknown"
		if i >= 0 {
			st = sts[i].state.String()
			if sts[i].state == trace.GoWaiting {
				st += " (" + sts[i].reason + " @ " + sts[i].where + ")"
			}
			if sts[i].state == trace.GoSyscall {
				st += " @ " + sts[i].where
			}
		}
		next := e
		if i+1 < len(sts) && sts[i+1].at < e {
			next = sts[i+1].at
		}
		out[st] += float64(next - t)
		t = next
		i++
	}
	return out
}

// throughAggregate reports whether a review's spans hold every stage up to
// its parent's aggregation: its part's queued, start, run and finish, and
// the parent's aggregate_wait and aggregate. The publication's two stages
// are not required: since session 29 a review published nowhere is
// published by its aggregation's own write and has neither (requiring all
// eight, as before, dropped every such review from the reading).
func throughAggregate(sps []span) bool {
	need := map[string]bool{"queued": true, "start": true, "run": true, "finish": true, "aggregate_wait": true, "aggregate": true}
	for _, sp := range sps {
		delete(need, sp.stage)
	}
	return len(need) == 0
}
