package main

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

// The -roles mode: an interactive review's wall time, split by the role
// of the goroutine that served each stretch of it (roleOf) and by that
// goroutine's state there (stateClass), for the slowest in-sweep reviews
// against the slowest baseline reviews at the same percentile (like with
// like: a baseline's own tail has waits a median review has not). A
// review's segments tile its wall time, so each review's split sums to
// its latency.

// roleOf names the role serving a review's segment (its stage, as
// review.segs names them): who the review was waiting on in that stretch.
func roleOf(stage string) string {
	switch {
	case stage == "submit":
		return "submit (bench goroutine: Submit, the request path)"
	case stage == "queued":
		// Since session 31 an interactive review's insert leases its
		// part in its own write: the bench's Submit goroutine serves
		// most of these, the fetch loop the rest.
		return "queued (the lease: Submit's own insert or the fetch loop)"
	case stage == "start" || stage == "run":
		return "worker: handler (start, run: provider call, validation)"
	case stage == "finish":
		return "finish (outcome written)"
	case stage == "aggregate_wait" || stage == "aggregate":
		return "aggregation"
	case stage == "publish_wait" || stage == "publish":
		return "publication"
	case stage == "notice":
		return "notice (bench goroutine: sees it published)"
	case strings.HasPrefix(stage, "gap>"):
		return "hand-off before " + strings.TrimPrefix(stage, "gap>")
	}
	return stage
}

// The state classes of a serving goroutine (stateClass).
const (
	stRunning  = "running"
	stAssist   = "running: GC assist"
	stRunnable = "runnable (waiting for a P)"
	stSyscall  = "in a syscall"
	stNetwork  = "waiting: network (the simulator's answer)"
	stNotYet   = "not yet created"
)

// stateClass is the class of a goroutine's state st (with its waiting
// reason); waits other than the network's are named by the root function
// of the goroutine that ended them (wakerRoot; "" when no goroutine did:
// a timer, the netpoller or the runtime): whom the goroutine waited for.
func stateClass(st gstate, wakerRoot string) string {
	switch st.state {
	case trace.GoRunning:
		return stRunning
	case trace.GoRunnable:
		return stRunnable
	case trace.GoSyscall:
		return stSyscall
	case trace.GoNotExist, trace.GoUndetermined:
		return stNotYet
	case trace.GoWaiting:
		if st.reason == "network" {
			return stNetwork
		}
		if wakerRoot == "" {
			wakerRoot = "no goroutine (a timer, the netpoller, the runtime)"
		}
		if isLockWait(st.where) {
			return stLockPrefix + wakerRoot
		}
		return "waiting: " + st.reason + ", for " + wakerRoot
	}
	return st.state.String()
}

// splitReview is ns of a review's wall time by "role | state class" (and
// of its waits for a goroutine by "role | whom | what that one was doing
// meanwhile", wakers, stateOf's states): each
// segment's stretch laid on the states of the goroutine that served it
// (states, each goroutine's transitions in time order), its running time
// less the GC assists inside it (assists, each goroutine's assist
// ranges), its waits named by whom they waited for (root, each
// goroutine's root function). A segment without a goroutine (g 0) is
// "unknown goroutine".
func splitReview(segs []seg, states map[trace.GoID][]gstate, assists map[trace.GoID][][2]trace.Time, root map[trace.GoID]string) (out, wakers map[string]float64) {
	out, wakers = map[string]float64{}, map[string]float64{}
	for _, sg := range segs {
		role := roleOf(sg.stage)
		if sg.g == 0 {
			out[role+" | unknown goroutine"] += float64(sg.e - sg.s)
			continue
		}
		sts := states[sg.g]
		i := sort.Search(len(sts), func(i int) bool { return sts[i].at > sg.s }) - 1
		for t := sg.s; t < sg.e; i++ {
			cur := gstate{state: trace.GoNotExist}
			if i >= 0 {
				cur = sts[i]
			}
			next := sg.e
			if i+1 < len(sts) && sts[i+1].at < sg.e {
				next = sts[i+1].at
			}
			waker := ""
			if i+1 < len(sts) && cur.state == trace.GoWaiting {
				if wk := sts[i+1].waker; wk != trace.NoGoroutine && wk != 0 {
					waker = root[wk]
					if waker == "" {
						waker = "a goroutine of unknown root"
					}
					for st, v := range stateOf(states[wk], t, next) {
						wakers[role+" | "+waker+" | "+st] += v
					}
				}
			}
			cls := stateClass(cur, waker)
			d := float64(next - t)
			if cls == stRunning {
				for _, a := range assists[sg.g] {
					if o := min(a[1], next) - max(a[0], t); o > 0 {
						out[role+" | "+stAssist] += float64(o)
						d -= float64(o)
					}
				}
			}
			out[role+" | "+cls] += d
			t = next
		}
	}
	return out, wakers
}

// The classes byState folds the waits for a goroutine into.
const (
	stLockPrefix = "waiting: on a SQLite-level mutex, held by "
	stLock       = "waiting: on a SQLite-level mutex (modernc libc's pthread mutex)"
	stWriter     = "waiting: for the SQLite writer (a commit)"
	stTimer      = "waiting: woken by no goroutine (a timer, the netpoller, the runtime)"
	stHTTP       = "waiting: for the provider's HTTP answer (net/http's connection loops)"
	stOther      = "waiting: for another goroutine (chan, select, mutex)"
)

// byState folds a split's "role | state" keys into state classes alone,
// the waits for a goroutine into three: for the SQLite writer (what
// sessions 31-35 measured; this split is about the rest), for no
// goroutine, for any other.
func byState(split map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range split {
		_, st, _ := strings.Cut(k, " | ")
		if strings.HasPrefix(st, "waiting: ") && st != stNetwork {
			switch {
			case strings.HasPrefix(st, stLockPrefix):
				st = stLock
			case strings.HasSuffix(st, "store/sqlite.(*Store).writer"):
				st = stWriter
			case strings.Contains(st, ", for net/http.(*persistConn)."):
				// The provider call: the handler waits on its
				// connection's read or write loop, which waits on
				// the socket (the simulator's answer).
				st = stHTTP
			case strings.Contains(st, ", for no goroutine"):
				st = stTimer
			default:
				st = stOther
			}
		}
		out[st] += v
	}
	return out
}

// The classes of lockShare.
const (
	lockDirect   = "the serving goroutine parked on a SQLite-level mutex"
	lockIndirect = "waiting for a goroutine that was itself parked on a SQLite-level mutex"
)

// lockShare is the part of a review's split (splitReview's out and
// wakers) spent on SQLite-level mutexes: directly (the goroutine serving
// the review parked on one) and indirectly (it waited for a goroutine that
// was parked on one meanwhile, as the handler behind the fetch loop in
// session 36's r4).
func lockShare(split, wakers map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range split {
		if _, st, _ := strings.Cut(k, " | "); strings.HasPrefix(st, stLockPrefix) {
			out[lockDirect] += v
		}
	}
	for k, v := range wakers {
		if strings.HasSuffix(k, "@ "+libcLock+")") {
			out[lockIndirect] += v
		}
	}
	return out
}

// byRole folds a split's keys into roles alone.
func byRole(split map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range split {
		role, _, _ := strings.Cut(k, " | ")
		out[role] += v
	}
	return out
}

// slowest is the slowest share of rs (at least 2, at most all), slowest
// first.
func slowest(rs []*review, share float64) []*review {
	s := append([]*review(nil), rs...)
	sort.Slice(s, func(a, b int) bool { return s[a].e-s[a].s > s[b].e-s[b].s })
	return s[:min(len(s), max(2, int(share*float64(len(s)))))]
}

// meanSplit is the mean split (ms) over rs.
func meanSplit(rs []*review, get func(*review) map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, r := range rs {
		for k, v := range get(r) {
			out[k] += v / float64(len(rs)) / 1e6
		}
	}
	return out
}

// printRoles prints the -roles tables: the slowest share of the in-sweep
// reviews (sweep) against the slowest share of the baseline's (base), and
// both phases' every review, by role | state, by state alone and by role
// alone; then which goroutines (root functions) served each role.
func printRoles(sweep, base []*review, share float64, states map[trace.GoID][]gstate, assists map[trace.GoID][][2]trace.Time, root map[trace.GoID]string) {
	split, wakers := map[*review]map[string]float64{}, map[*review]map[string]float64{}
	served := map[string]map[string]int{}
	for _, r := range append(append([]*review(nil), sweep...), base...) {
		split[r], wakers[r] = splitReview(r.segs, states, assists, root)
		for _, sg := range r.segs {
			role := roleOf(sg.stage)
			if served[role] == nil {
				served[role] = map[string]int{}
			}
			served[role][root[sg.g]]++
		}
	}
	if len(sweep) < 2 || len(base) < 2 {
		fmt.Printf("-roles: %d in-sweep and %d baseline reviews in the trace; too few\n", len(sweep), len(base))
		return
	}
	st, bt := slowest(sweep, share), slowest(base, share)
	lat := func(rs []*review) float64 {
		s := 0.0
		for _, r := range rs {
			s += float64(r.e - r.s)
		}
		return s / float64(len(rs)) / 1e6
	}
	fmt.Printf("roles: in-sweep tail %d of %d reviews, mean %.2f ms (least %.2f); baseline tail %d of %d, mean %.2f ms (least %.2f); all: in-sweep %.2f, baseline %.2f\n",
		len(st), len(sweep), lat(st), float64(st[len(st)-1].e-st[len(st)-1].s)/1e6, len(bt), len(base), lat(bt), float64(bt[len(bt)-1].e-bt[len(bt)-1].s)/1e6,
		lat(sweep), lat(base))
	extra := lat(st) - lat(bt)
	for _, tab := range []struct {
		title string
		get   func(*review) map[string]float64
		// always are the rows printed however small, in this order
		// (nil: every row of at least 0.05 ms, largest extra first).
		always []string
	}{
		{"by state", func(r *review) map[string]float64 { return byState(split[r]) }, nil},
		{"by role", func(r *review) map[string]float64 { return byRole(split[r]) }, nil},
		{"by role | state", func(r *review) map[string]float64 { return split[r] }, nil},
		{"waits for a goroutine: by role | whom | what that goroutine was doing meanwhile", func(r *review) map[string]float64 { return wakers[r] }, nil},
		{"SQLite-level mutexes, directly and behind another goroutine", func(r *review) map[string]float64 { return lockShare(split[r], wakers[r]) }, []string{lockDirect, lockIndirect}},
	} {
		get := tab.get
		cols := []map[string]float64{meanSplit(st, get), meanSplit(bt, get), meanSplit(sweep, get), meanSplit(base, get)}
		keys := map[string]bool{}
		for _, c := range cols {
			for k := range c {
				keys[k] = true
			}
		}
		var ks []string
		for k := range keys {
			ks = append(ks, k)
		}
		sort.Slice(ks, func(i, j int) bool {
			di, dj := cols[0][ks[i]]-cols[1][ks[i]], cols[0][ks[j]]-cols[1][ks[j]]
			return di > dj || di == dj && ks[i] < ks[j]
		})
		fmt.Printf("\n%s (ms per review: in-sweep tail, baseline tail, tail extra, share of the extra %.2f ms; in-sweep all, baseline all)\n", tab.title, extra)
		prec := 2
		if tab.always != nil {
			ks, prec = tab.always, 3
		}
		for _, k := range ks {
			if tab.always == nil && max(cols[0][k], cols[1][k], cols[2][k], cols[3][k]) < 0.05 {
				continue
			}
			d := cols[0][k] - cols[1][k]
			fmt.Printf("  %-100s %7.*f %7.*f %7.*f %6.1f%% %7.*f %7.*f\n", k, prec, cols[0][k], prec, cols[1][k], prec, d, 100*d/extra, prec, cols[2][k], prec, cols[3][k])
		}
	}
	fmt.Println("\nthe goroutines serving each role (root function: segments)")
	var roles []string
	for r := range served {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	for _, r := range roles {
		var parts []string
		for g, n := range served[r] {
			if g == "" {
				g = "?"
			}
			parts = append(parts, fmt.Sprintf("%s: %d", g, n))
		}
		sort.Strings(parts)
		fmt.Printf("  %s — %s\n", r, strings.Join(parts, ", "))
	}
}
