package main

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

// The -locks mode: every wait of a goroutine on a SQLite-level mutex. The
// default driver, modernc.org/sqlite, is SQLite transpiled to Go, and its
// C library (modernc.org/libc) implements pthread mutexes with sync.Mutex:
// a goroutine that finds one held parks in the runtime like on any Go
// mutex, and the trace records the park (reason "sync", the stack through
// libc's Xpthread_mutex_lock and the SQLite function that took it) and the
// unpark (on the goroutine that released it, with its stack through
// Xpthread_mutex_unlock). A wait shorter than sync.Mutex's spin never
// parks and is not seen: these are the waits that cost a scheduling round.

// The libc entry points of a SQLite mutex.
const (
	libcLock   = "modernc.org/libc.Xpthread_mutex_lock"
	libcUnlock = "modernc.org/libc.Xpthread_mutex_unlock"
)

// isLockWait reports whether a waiting transition's call site (topFrame)
// is a SQLite-level mutex.
func isLockWait(where string) bool { return where == libcLock }

// isSQLWait reports whether a park at where (topFrame) for reason is a
// wait in database/sql itself: on its own mutexes (a connection's, a
// Rows' close lock, the pool's) or for a free connection of a pool
// (DB.conn); not a preemption or GC park that happened in its frames, nor
// a Rows' watcher goroutine idle in its select.
func isSQLWait(where, reason string) bool {
	return strings.HasPrefix(where, "database/sql.") && (reason == "sync" || where == "database/sql.(*DB).conn")
}

// lockSite is the SQLite function that took (entry libcLock) or released
// (libcUnlock) the mutex in s: the two frames past entry that are not a
// mutex wrapper (sqlite3_mutex_enter, pthreadMutexEnter, ...), innermost
// first; "" when entry is not on s.
func lockSite(s trace.Stack, entry string) string {
	var fns []string
	for f := range s.Frames() {
		fns = append(fns, f.Func)
	}
	return lockSiteOf(fns, entry)
}

// lockSiteOf is lockSite over a stack's function names, innermost first.
func lockSiteOf(fns []string, entry string) string {
	seen := false
	var parts []string
	for _, fn := range fns {
		if !seen {
			seen = fn == entry
			continue
		}
		name := strings.TrimPrefix(fn, "modernc.org/sqlite/lib.")
		if strings.Contains(strings.ToLower(name), "mutex") {
			continue
		}
		parts = append(parts, short(name))
		if len(parts) == 2 {
			break
		}
	}
	return strings.Join(parts, " < ")
}

// poolSite prefixes the site of a wait in database/sql (its own mutexes
// or a pool's connection), which lockWaits reads beside the SQLite-level
// mutexes: store contention above SQLite.
const poolSite = "database/sql: "

// lockWait is one park on a SQLite-level mutex, or in database/sql.
type lockWait struct {
	phase        string
	d            float64 // ns
	waiter, site string  // the waiting goroutine's root function, and the SQLite function that took the lock
	holder, rel  string  // the releasing goroutine's root function, and the SQLite function that released it
}

// lockAgg sums waits under a key.
type lockAgg struct {
	n        int
	sum, max float64
}

// lockStats is the per-phase summary of waits: count, total, p50, p99 and
// the longest (ms), and the phase's waits per second over span (ns; 0: not
// given).
func lockStats(ws []lockWait, span float64) string {
	if len(ws) == 0 {
		return "none"
	}
	d := make([]float64, len(ws))
	tot := 0.0
	for i, w := range ws {
		d[i] = w.d
		tot += w.d
	}
	sort.Float64s(d)
	q := func(p float64) float64 { return d[min(len(d)-1, int(p*float64(len(d))))] / 1e6 }
	rate := ""
	if span > 0 {
		rate = fmt.Sprintf(" (%.1f/s, %.2f ms/s)", float64(len(ws))/(span/1e9), tot/1e6/(span/1e9))
	}
	return fmt.Sprintf("%d waits%s, total %.2f ms, p50 %.3f ms, p99 %.3f, max %.3f", len(ws), rate, tot/1e6, q(0.5), q(0.99), d[len(d)-1]/1e6)
}

// lockTable sums ws by key, longest total first, at most top rows.
func lockTable(ws []lockWait, key func(lockWait) string, top int) []string {
	agg := map[string]*lockAgg{}
	for _, w := range ws {
		k := key(w)
		if agg[k] == nil {
			agg[k] = &lockAgg{}
		}
		a := agg[k]
		a.n++
		a.sum += w.d
		a.max = max(a.max, w.d)
	}
	var ks []string
	for k := range agg {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		return agg[ks[i]].sum > agg[ks[j]].sum || agg[ks[i]].sum == agg[ks[j]].sum && ks[i] < ks[j]
	})
	var out []string
	for _, k := range ks[:min(top, len(ks))] {
		a := agg[k]
		out = append(out, fmt.Sprintf("n=%6d total=%8.2fms max=%7.3fms  %s", a.n, a.sum/1e6, a.max/1e6, k))
	}
	return out
}

// lockWaits reads every park on a SQLite-level mutex in the trace at path,
// with its phase (by the capture's sweep mark), and the phases' lengths.
func lockWaits(path string) (ws []lockWait, spans map[string]float64) {
	type open struct {
		at     trace.Time
		site   string
		waiter trace.GoID
	}
	var (
		mk          marks
		first, last trace.Time
	)
	root := map[trace.GoID]string{}
	opened := map[trace.GoID]open{}
	eachEvent(path, func(ev trace.Event) {
		t := ev.Time()
		if first == 0 {
			first = t
		}
		last = t
		if ev.Kind() == trace.EventLog {
			mk.read(ev.Log(), t)
			return
		}
		st, g, ok := goTransition(ev)
		if !ok {
			return
		}
		noteRoot(root, g, st.Stack)
		if ev.Goroutine() == g {
			noteRoot(root, g, ev.Stack())
		}
		from, to := st.Goroutine()
		if to == trace.GoWaiting {
			s := st.Stack
			if topFrame(s) == "" {
				s = ev.Stack()
			}
			switch w := topFrame(s); {
			case isLockWait(w):
				opened[g] = open{at: t, site: lockSite(s, libcLock), waiter: g}
			case isSQLWait(w, st.Reason):
				opened[g] = open{at: t, site: poolSite + w + " (" + st.Reason + ")", waiter: g}
			}
			return
		}
		if from != trace.GoWaiting {
			return
		}
		o, ok := opened[g]
		if !ok {
			return
		}
		delete(opened, g)
		w := lockWait{phase: mk.phase(o.at), d: float64(t - o.at), waiter: root[g], site: o.site, holder: "no goroutine", rel: "?"}
		if wk := ev.Goroutine(); wk != trace.NoGoroutine && wk != g {
			noteRoot(root, wk, ev.Stack())
			w.holder, w.rel = root[wk], lockSite(ev.Stack(), libcUnlock)
		}
		ws = append(ws, w)
	})
	spans = map[string]float64{"baseline": float64(last - first)}
	if mk.sweepAt != 0 {
		spans["baseline"], spans["sweep"] = float64(mk.sweepAt-first), float64(last-mk.sweepAt)
	}
	return ws, spans
}

// printLocks prints the -locks tables: per phase, the waits' count, total
// and quantiles, then by who waited at which SQLite function, and by who
// held the lock and where it released it.
func printLocks(path string, top int) {
	ws, spans := lockWaits(path)
	for _, ph := range []string{"baseline", "sweep"} {
		var in, pool []lockWait
		for _, w := range ws {
			switch {
			case w.phase != ph:
			case strings.HasPrefix(w.site, poolSite):
				pool = append(pool, w)
			default:
				in = append(in, w)
			}
		}
		if spans[ph] == 0 {
			continue
		}
		fmt.Printf("\n%s (%.1f s): waits in database/sql (its mutexes, a pool's connection): %s\n", ph, spans[ph]/1e9, lockStats(pool, spans[ph]))
		for _, l := range lockTable(pool, func(w lockWait) string { return w.waiter + " | " + w.site + " | ended by " + w.holder }, top) {
			fmt.Println("   ", l)
		}
		fmt.Printf("%s: SQLite-level mutex waits (parked on modernc libc's pthread mutex): %s\n", ph, lockStats(in, spans[ph]))
		fmt.Println("  by waiter (root function) | SQLite function that took the lock")
		for _, l := range lockTable(in, func(w lockWait) string { return w.waiter + " | " + w.site }, top) {
			fmt.Println("   ", l)
		}
		fmt.Println("  by holder (root function of the goroutine that released it) | SQLite function that released it")
		for _, l := range lockTable(in, func(w lockWait) string { return w.holder + " | " + w.rel }, top) {
			fmt.Println("   ", l)
		}
	}
}
