// Command commitanatomy summarises the anatomy of the SQLite writer's
// COMMITs that a cpulabels build of ratelane records in
// $RATELANE_WRITESTATS (the JSON lines with "Anatomy": true;
// internal/store/sqlite/anatomy_on.go): per phase of a batch-isolation
// run and class of transaction, the COMMITs' wall time and its parts —
// the writer thread's CPU time, its wait in the OS run queue, the time
// inside fsync and fdatasync (from a kernel trace, -ftrace, taken with
// ftrace.sh), and the rest (off a CPU, not runnable, not in a sync: Go's
// scheduler parking the thread until it has a P again, or another
// blocking system call) — for all of them and for the slowest 2 %, and
// what the writer committed in the 50 ms before each interactive one.
//
//	flock /tmp/bench.lock bench/commitanatomy/ftrace.sh /tmp/ft.txt \
//	    env RATELANE_WRITESTATS=/tmp/ws.jsonl ratelane-cpulabels bench batch-isolation --json --runs 2
//	go run ./bench/commitanatomy -writestats /tmp/ws.jsonl -ftrace /tmp/ft.txt [-own]
//
// A sync's time is its entry to its exit as the kernel traced them: it
// includes the thread's own CPU and run-queue wait inside the call, which
// the thread's clocks count too; the rest is what is left after all three
// and so may be slightly negative (docs/benchmarks.md, "Session 35
// (s35h1)").
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// rec is one anatomy record (anatomy_on.go's anatomyRec) and its join.
type rec struct {
	Anatomy            bool
	Phase, What, Class string
	Writes, Tid        int
	Unix, Mono0, Mono1 int64
	WallNs, CPUNs      int64
	RunQNs, Slices     int64
	Frames, Ckpt       int64
	Restart            bool

	syncNs int64 // inside fsync/fdatasync, from the trace
	syncs  int
	// st is the thread's time by scheduler state, out of and in a sync
	// (states), when the trace has its switches.
	st     [nStates][2]int64
	behind map[string]int64 // runnable ns by the task that had the CPU before it
	traced bool
}

func (r *rec) restNs() int64 { return r.WallNs - r.CPUNs - r.RunQNs - r.syncNs }

// span is one sync call of one thread, CLOCK_MONOTONIC ns.
type span struct{ t0, t1 int64 }

var (
	traceLine = regexp.MustCompile(`-(\d+)\s+(?:\(\s*(?:\d+|-+)\)\s+)?\[\d+\]\s+\S+\s+(\d+)\.(\d+): sys_(fsync|fdatasync)(\(| -> )`)
	stampLine = regexp.MustCompile(`-(\d+)\s+(?:\(\s*(\d+|-+)\)\s+)?\[\d+\]\s+\S+\s+(\d+)\.(\d+): sched_(switch|wakeup): (.*)$`)
	fieldRe   = regexp.MustCompile(`(\w+)=(\S+)`)
)

// A thread's state in the scheduler trace.
const (
	stUnknown = iota
	stRun     // on a CPU
	stRunQ    // runnable: woken, or preempted
	stSleepS  // asleep, interruptible (a futex: Go parking the thread)
	stSleepD  // asleep, uninterruptible (waiting for I/O)
	nStates
)

// ev is a scheduler event of one thread: at t it entered state st.
type ev struct {
	t  int64
	st int
	// who, for a switch onto a CPU, is the task it followed there: its
	// command and, when the trace records tgids (ftrace.sh does), its
	// process id.
	who string
}

// stamp parses ftrace's "sec.usec" into ns.
func stamp(sec, frac string) int64 {
	s, _ := strconv.ParseInt(sec, 10, 64)
	for len(frac) < 9 {
		frac += "0"
	}
	ns, _ := strconv.ParseInt(frac[:9], 10, 64)
	return s*1e9 + ns
}

// matches calls fn with the submatches of every line of path that re
// matches.
func matches(path string, re *regexp.Regexp, fn func(m []string)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			fn(m)
		}
	}
	return sc.Err()
}

// tgidOf is each traced task's process id, from the trace's tgid column.
var tgidOf = map[int]int{}

// readSched returns each traced thread's state changes, in time order.
func readSched(path string) (map[int][]ev, error) {
	out := map[int][]ev{}
	err := matches(path, stampLine, func(m []string) {
		t := stamp(m[3], m[4])
		if tid, err := strconv.Atoi(m[1]); err == nil {
			if g, err := strconv.Atoi(m[2]); err == nil {
				tgidOf[tid] = g
			}
		}
		kv := map[string]string{}
		for _, f := range fieldRe.FindAllStringSubmatch(m[6], -1) {
			if _, dup := kv[f[1]]; !dup {
				kv[f[1]] = f[2]
			}
		}
		if m[5] == "wakeup" {
			pid, _ := strconv.Atoi(kv["pid"])
			out[pid] = append(out[pid], ev{t: t, st: stRunQ})
			return
		}
		prev, _ := strconv.Atoi(kv["prev_pid"])
		next, _ := strconv.Atoi(kv["next_pid"])
		st := stSleepS
		switch ps := kv["prev_state"]; {
		case strings.HasPrefix(ps, "R"):
			st = stRunQ
		case strings.HasPrefix(ps, "D"):
			st = stSleepD
		}
		out[prev] = append(out[prev], ev{t: t, st: st})
		out[next] = append(out[next], ev{t, stRun, kv["prev_comm"] + "/" + m[2]})
	})
	for _, e := range out {
		sort.SliceStable(e, func(i, j int) bool { return e[i].t < e[j].t })
	}
	return out, err
}

// states integrates r's thread's states over r's span, split by whether
// the thread was inside a sync: [state][0 out, 1 in].
func states(r *rec, sched map[int][]ev, syncs map[int][]span) (d [nStates][2]int64, behind map[string]int64) {
	behind = map[string]int64{}
	es := sched[r.Tid]
	ss := syncs[r.Tid]
	i := sort.Search(len(es), func(i int) bool { return es[i].t > r.Mono0 })
	st := stUnknown
	if i > 0 {
		st = es[i-1].st
	}
	add := func(a, b int64, st int) {
		if b <= a {
			return
		}
		in := int64(0)
		j := sort.Search(len(ss), func(j int) bool { return ss[j].t1 > a })
		for ; j < len(ss) && ss[j].t0 < b; j++ {
			in += max(0, min(b, ss[j].t1)-max(a, ss[j].t0))
		}
		d[st][0] += b - a - in
		d[st][1] += in
	}
	at := r.Mono0
	for ; i < len(es) && es[i].t < r.Mono1; i++ {
		add(at, es[i].t, st)
		if st == stRunQ && es[i].st == stRun {
			behind[es[i].who] += es[i].t - at
		}
		at, st = es[i].t, es[i].st
	}
	add(at, r.Mono1, st)
	return d, behind
}

// readTrace returns each thread's sync calls from an ftrace text dump.
func readTrace(path string) (map[int][]span, error) {
	open := map[int]int64{}
	out := map[int][]span{}
	err := matches(path, traceLine, func(m []string) {
		tid, _ := strconv.Atoi(m[1])
		t := stamp(m[2], m[3])
		if m[5] == "(" {
			open[tid] = t
		} else if t0, ok := open[tid]; ok {
			out[tid] = append(out[tid], span{t0, t})
			delete(open, tid)
		}
	})
	for _, s := range out {
		sort.Slice(s, func(i, j int) bool { return s[i].t0 < s[j].t0 })
	}
	return out, err
}

// join adds to each record the time its thread spent in syncs within it.
func join(recs []*rec, tr map[int][]span) {
	for _, r := range recs {
		ss := tr[r.Tid]
		i := sort.Search(len(ss), func(i int) bool { return ss[i].t1 > r.Mono0 })
		for ; i < len(ss) && ss[i].t0 < r.Mono1; i++ {
			lo, hi := max(ss[i].t0, r.Mono0), min(ss[i].t1, r.Mono1)
			if hi > lo {
				r.syncNs += hi - lo
				r.syncs++
			}
		}
	}
}

func ms(ns float64) string { return strconv.FormatFloat(ns/1e6, 'f', 2, 64) }

func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func mean(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	if len(v) == 0 {
		return 0
	}
	return t / float64(len(v))
}

// parts are the columns: a name and a record's value.
var parts = []struct {
	name string
	f    func(r *rec) float64
}{
	{"cpu", func(r *rec) float64 { return float64(r.CPUNs) }},
	{"runq", func(r *rec) float64 { return float64(r.RunQNs) }},
	{"sync", func(r *rec) float64 { return float64(r.syncNs) }},
	{"rest", func(r *rec) float64 { return float64(r.restNs()) }},
}

// row prints one set of records: count, wall p50/p90/p99, and each part's
// mean and p99 (ms), slices, frames and the share that checkpointed.
func row(name string, rs []*rec) {
	if len(rs) == 0 {
		return
	}
	var wall, sl, fr, syncs []float64
	ck := 0
	for _, r := range rs {
		wall = append(wall, float64(r.WallNs))
		sl = append(sl, float64(r.Slices))
		fr = append(fr, float64(r.Frames))
		syncs = append(syncs, float64(r.syncs))
		if r.Ckpt > 0 {
			ck++
		}
	}
	fmt.Printf("| %s | %d | %s / %s / %s | %s |", name, len(rs), ms(pct(wall, .5)), ms(pct(wall, .9)), ms(pct(wall, .99)), ms(mean(wall)))
	for _, p := range parts {
		var v []float64
		for _, r := range rs {
			v = append(v, p.f(r))
		}
		fmt.Printf(" %s / %s |", ms(mean(v)), ms(pct(v, .99)))
	}
	fmt.Printf(" %.2f | %.2f | %.1f | %.1f %% |\n", mean(sl), mean(syncs), mean(fr), 100*float64(ck)/float64(len(rs)))
}

func header(first string) {
	fmt.Printf("| %s | n | wall p50 / p90 / p99 | wall mean |", first)
	for _, p := range parts {
		fmt.Printf(" %s mean / p99 |", p.name)
	}
	fmt.Println(" slices | syncs | frames | with checkpoint |")
	fmt.Print("| --- | --- | --- | --- |")
	for range parts {
		fmt.Print(" --- |")
	}
	fmt.Println(" --- | --- | --- | --- |")
}

// before describes what the writer did in the window before r: other
// records on its thread that ended within it.
type before struct{ batchCommits, frames, ckpts, syncMs, busyMs float64 }

func window(all []*rec, r *rec, w int64) before {
	var b before
	i := sort.Search(len(all), func(i int) bool { return all[i].Mono1 > r.Mono0-w })
	for ; i < len(all) && all[i].Mono0 < r.Mono0; i++ {
		o := all[i]
		if o == r || o.Tid != r.Tid {
			continue
		}
		if o.Class == "batch" {
			b.batchCommits++
		}
		b.frames += float64(o.Frames)
		if o.Ckpt > 0 {
			b.ckpts++
		}
		b.syncMs += float64(o.syncNs) / 1e6
		b.busyMs += float64(o.WallNs) / 1e6
	}
	return b
}

// set is a named set of commits.
type set struct {
	name string
	rs   []*rec
}

// sets are a phase's commits holding an interactive write: all, and the
// slow tail.
func sets(all, tail []*rec) []set { return []set{{"all", all}, {"slowest", tail}} }

func main() {
	ws := flag.String("writestats", "", "a cpulabels build's RATELANE_WRITESTATS file")
	ft := flag.String("ftrace", "", "ftrace.sh's trace of the same run (optional: without it sync is 0 and in rest)")
	slow := flag.Float64("slow", 0.02, "the slow tail's share of each set, by wall time")
	phs := flag.String("phases", "baseline,sweep,after", "the phases to show, comma-separated (a test's records have the phase \"\")")
	win := flag.Duration("before", 50e6, "the window before each interactive commit to describe")
	own := flag.Bool("own", false, "restrict the commits holding an interactive write to those with no batch-lane write (class \"interactive\": session 37's class d, the write's own COMMIT)")
	flag.Parse()
	f, err := os.Open(*ws)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var recs []*rec
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<26), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line[:min(len(line), 16)]), `"Anatomy"`) {
			continue
		}
		r := &rec{}
		if json.Unmarshal(line, r) == nil && r.Anatomy {
			recs = append(recs, r)
		}
	}
	if *ft != "" {
		tr, err := readTrace(*ft)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		join(recs, tr)
		sched, err := readSched(*ft)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, r := range recs {
			if len(sched[r.Tid]) > 0 {
				r.traced = true
				r.st, r.behind = states(r, sched, tr)
			}
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Mono0 < recs[j].Mono0 })
	phases := strings.Split(*phs, ",")
	fmt.Println("All in ms; rest = wall - cpu - runq - sync.")
	fmt.Println()
	header("phase, class")
	for _, ph := range phases {
		for _, cl := range []string{"interactive", "mixed", "batch", "gap-checkpoint"} {
			var rs []*rec
			for _, r := range recs {
				if r.Phase == ph && (r.Class == cl || r.What == cl) {
					rs = append(rs, r)
				}
			}
			row(ph+", "+cl, rs)
		}
	}
	fmt.Println()
	which := "interactive and mixed"
	if *own {
		which = "interactive only: -own"
	}
	fmt.Printf("Commits holding an interactive write (%s): all, and the slowest %.0f %% by wall.\n\n", which, *slow*100)
	header("phase, set")
	inter := map[string][]*rec{}
	for _, r := range recs {
		if r.What == "commit" && r.Class != "batch" && (!*own || r.Class == "interactive") {
			inter[r.Phase] = append(inter[r.Phase], r)
		}
	}
	tails := map[string][]*rec{}
	for _, ph := range phases {
		rs := append([]*rec(nil), inter[ph]...)
		sort.Slice(rs, func(i, j int) bool { return rs[i].WallNs < rs[j].WallNs })
		row(ph+", all", rs)
		tails[ph] = rs[len(rs)-int(float64(len(rs))**slow):]
		row(ph+", slowest", tails[ph])
	}
	if *ft != "" {
		fmt.Println()
		fmt.Println("The same commits by the writer thread's scheduler states (the trace's switches and wakeups; ms, means): on a CPU; runnable (woken or preempted, waiting for a CPU) outside and inside a sync; asleep inside a sync (the device, the journal); asleep outside a sync, interruptible (S: a futex, Go parking the thread until it gets a P) and uninterruptible (D: other I/O); not covered by the trace.")
		fmt.Println()
		fmt.Println("| phase, set | n traced | wall mean | on CPU | runnable out / in sync | asleep in sync | asleep S out of sync (mean / p99) | asleep D out of sync | unknown |")
		fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
		for _, ph := range phases {
			for _, set := range sets(inter[ph], tails[ph]) {
				var n, wall float64
				var sum [nStates][2]float64
				var sOut []float64
				for _, r := range set.rs {
					if !r.traced {
						continue
					}
					n++
					wall += float64(r.WallNs)
					for k := range nStates {
						sum[k][0] += float64(r.st[k][0])
						sum[k][1] += float64(r.st[k][1])
					}
					sOut = append(sOut, float64(r.st[stSleepS][0]))
				}
				if n == 0 {
					continue
				}
				m := func(v float64) string { return ms(v / n) }
				fmt.Printf("| %s, %s | %.0f | %s | %s | %s / %s | %s | %s / %s | %s | %s |\n", ph, set.name, n, m(wall),
					m(sum[stRun][0]+sum[stRun][1]), m(sum[stRunQ][0]), m(sum[stRunQ][1]), m(sum[stSleepS][1]+sum[stSleepD][1]),
					m(sum[stSleepS][0]), ms(pct(sOut, .99)), m(sum[stSleepD][0]), m(sum[stUnknown][0]+sum[stUnknown][1]))
			}
		}
	}
	if *ft != "" {
		fmt.Println()
		fmt.Println("Whose CPU the writer waited for: the runnable time of those commits by the task that ran on the CPU just before the writer got it (command/process id; the writer's process is marked *). Top 6 by time, ms per commit.")
		fmt.Println()
		for _, ph := range phases {
			for _, set := range sets(inter[ph], tails[ph]) {
				tot := map[string]int64{}
				n := 0
				for _, r := range set.rs {
					if !r.traced {
						continue
					}
					n++
					for k, v := range r.behind {
						tot[k] += v
					}
				}
				if n == 0 {
					continue
				}
				var ks []string
				for k := range tot {
					ks = append(ks, k)
				}
				sort.Slice(ks, func(i, j int) bool { return tot[ks[i]] > tot[ks[j]] })
				fmt.Printf("- %s, %s (%d):", ph, set.name, n)
				for i, k := range ks {
					if i == 6 {
						break
					}
					mark := ""
					if pid := k[strings.LastIndex(k, "/")+1:]; pid != "" && pid == strconv.Itoa(tgidOf[set.rs[0].Tid]) {
						mark = "*"
					}
					fmt.Printf(" %s%s %s;", k, mark, ms(float64(tot[k])/float64(n)))
				}
				fmt.Println()
			}
		}
	}
	fmt.Println()
	fmt.Printf("What the writer did in the %v before each commit holding an interactive write (means per commit).\n\n", *win)
	fmt.Println("| phase, set | n | batch commits | frames committed | checkpoints | ms in syncs | ms committing |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- |")
	for _, ph := range phases {
		for _, set := range sets(inter[ph], tails[ph]) {
			var t before
			for _, r := range set.rs {
				b := window(recs, r, int64(*win))
				t.batchCommits += b.batchCommits
				t.frames += b.frames
				t.ckpts += b.ckpts
				t.syncMs += b.syncMs
				t.busyMs += b.busyMs
			}
			n := float64(max(len(set.rs), 1))
			fmt.Printf("| %s, %s | %d | %.2f | %.1f | %.3f | %.2f | %.2f |\n", ph, set.name, len(set.rs), t.batchCommits/n, t.frames/n, t.ckpts/n, t.syncMs/n, t.busyMs/n)
		}
	}
}
