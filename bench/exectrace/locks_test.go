package main

import (
	"math"
	"testing"

	"golang.org/x/exp/trace"
)

// TestLockSiteOf: the SQLite function past libc's entry and SQLite's
// mutex wrappers, two frames, innermost first; none without the entry.
func TestLockSiteOf(t *testing.T) {
	stack := []string{"runtime.gopark", "sync.(*Mutex).lockSlow", "sync.(*Mutex).Lock", libcLock,
		"modernc.org/sqlite/lib._pthreadMutexEnter", "modernc.org/sqlite/lib.Xsqlite3_mutex_enter",
		"modernc.org/sqlite/lib._unixShmLock", "modernc.org/sqlite/lib._sqlite3OsShmLock", "modernc.org/sqlite/lib._walLockShared"}
	if got, want := lockSiteOf(stack, libcLock), "_unixShmLock < _sqlite3OsShmLock"; got != want {
		t.Errorf("lockSiteOf = %q, want %q", got, want)
	}
	if got := lockSiteOf(stack, libcUnlock); got != "" {
		t.Errorf("lockSiteOf without the entry = %q, want empty", got)
	}
}

// TestIsSQLWait: database/sql's mutexes and its pool's wait for a
// connection count; a preemption or GC park in its frames and a Rows'
// watcher idle in its select do not, nor a mutex elsewhere.
func TestIsSQLWait(t *testing.T) {
	for _, c := range []struct {
		where, reason string
		want          bool
	}{
		{"database/sql.(*DB).addDep", "sync", true},
		{"database/sql.(*Rows).close", "sync", true},
		{"database/sql.(*DB).conn", "select", true},
		{"database/sql.driverArgsConnLocked", "preempted", false},
		{"database/sql.(*Rows).nextLocked", "GC assist wait", false},
		{"database/sql.(*Rows).awaitDone", "select", false},
		{"internal/engine.(*Engine).fetchLoop", "sync", false},
	} {
		if got := isSQLWait(c.where, c.reason); got != c.want {
			t.Errorf("isSQLWait(%q, %q) = %v, want %v", c.where, c.reason, got, c.want)
		}
	}
}

// TestLockShare lays two waits on SQLite-level mutexes on a review: the
// handler parked on one (held by the fetch loop) 2-5 ms, a direct wait;
// the finisher waiting 10-14 ms for the writer, which was itself parked on
// one 11-13 ms, an indirect wait of 2 ms. byState names the direct one as
// its own class, not a wait for the goroutine that held the lock.
func TestLockShare(t *testing.T) {
	const ms = trace.Time(1e6)
	const workerG, fetchG, writerG, finishG trace.GoID = 1, 2, 3, 4
	root := map[trace.GoID]string{workerG: "engine.worker", fetchG: "engine.fetchLoop",
		writerG: "internal/store/sqlite.(*Store).writer", finishG: "engine.finishLoop"}
	states := map[trace.GoID][]gstate{
		workerG: {{at: 0, state: trace.GoRunning}, {at: 2 * ms, state: trace.GoWaiting, reason: "sync", where: libcLock},
			{at: 5 * ms, state: trace.GoRunnable, waker: fetchG}, {at: 5 * ms, state: trace.GoRunning}},
		writerG: {{at: 0, state: trace.GoRunning}, {at: 11 * ms, state: trace.GoWaiting, reason: "sync", where: libcLock},
			{at: 13 * ms, state: trace.GoRunnable, waker: fetchG}, {at: 13 * ms, state: trace.GoRunning}},
		finishG: {{at: 0, state: trace.GoWaiting, reason: "select", where: "engine.finishLoop"},
			{at: 14 * ms, state: trace.GoRunnable, waker: writerG}, {at: 14 * ms, state: trace.GoRunning}},
	}
	segs := []seg{{stage: "run", g: workerG, s: 0, e: 10 * ms}, {stage: "finish", g: finishG, s: 10 * ms, e: 15 * ms}}
	split, wakers := splitReview(segs, states, nil, root)
	got := lockShare(split, wakers)
	want := map[string]float64{lockDirect: 3e6, lockIndirect: 2e6}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1 {
			t.Errorf("lockShare[%s] = %.0f ns, want %.0f", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("lockShare = %v, want only %v", got, want)
	}
	if v := byState(split)[stLock]; math.Abs(v-3e6) > 1 {
		t.Errorf("byState[%s] = %.0f ns, want 3 ms; split %v", stLock, v, split)
	}
}
