//go:build cpulabels

package sqlite

import (
	"encoding/binary"
	"encoding/json"
	"runtime"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/cpulabel"
	"github.com/ratelane/ratelane/internal/job"
)

// The anatomy of a COMMIT (cpulabels builds only): for every transaction's
// COMMIT and every gap checkpoint, the writer's wall time split by what its
// OS thread did meanwhile. The writer goroutine is locked to its thread
// (lockWriterThread), so the thread's clocks are the writer's: its CPU time
// (CLOCK_THREAD_CPUTIME_ID), its wait in the OS run queue (schedstat's
// run_delay) and its timeslices. What is neither is the thread off a CPU
// and not runnable: inside a blocking system call (fsync, fdatasync, a
// pwrite that waits), or parked by Go's scheduler waiting for a P after a
// system call returned. The time inside fsync and fdatasync is not
// measured in the process: modernc's SQLite calls them from its own libc,
// with no hook. The records carry the thread's id and CLOCK_MONOTONIC
// bounds, which bench/commitanatomy joins with a kernel trace of those
// system calls (its ftrace.sh) to split the rest (docs/benchmarks.md,
// "Session 35 (s35h1)").

// commitMark is the writer thread's clocks and the WAL's header just
// before a COMMIT or a checkpoint.
type commitMark struct {
	ts           *threadSched
	at           time.Time
	cpu, mono    int64
	wait, slices int64
	mx, bf       int64
	salt         uint64
	walOK        bool
}

// anatomyRec is one COMMIT's or checkpoint's anatomy, a JSON line of the
// RATELANE_WRITESTATS dump ("Anatomy": true).
type anatomyRec struct {
	Anatomy bool
	Phase   string
	// What is "commit" or "gap-checkpoint"; Class, for a commit, is
	// "interactive" (interactive writes only), "batch" or "mixed".
	What, Class string
	Writes      int
	Tid         int
	// Unix is the wall clock at the start (ns since 1970); Mono0 and
	// Mono1 are CLOCK_MONOTONIC at the start and end, ftrace's "mono".
	Unix, Mono0, Mono1 int64
	WallNs             int64
	CPUNs              int64 // the thread's CPU time, user and system
	RunQNs             int64 // runnable, waiting for a CPU (schedstat)
	Slices             int64 // times the thread was put on a CPU
	// Frames is what the WAL grew by; Ckpt, how many frames a checkpoint
	// inside it copied to the database file; Restart, whether the WAL
	// restarted from its beginning.
	Frames, Ckpt int64
	Restart      bool
}

var anatomy struct {
	mu      sync.Mutex
	threads map[*Store]*threadSched
	recs    []anatomyRec
}

// lockWriterThread locks the calling goroutine (the writer) to its OS
// thread, opens the thread's schedstat for s, and returns the undo.
func lockWriterThread(s *Store) func() {
	runtime.LockOSThread()
	ts := openThreadSched()
	anatomy.mu.Lock()
	if anatomy.threads == nil {
		anatomy.threads = map[*Store]*threadSched{}
	}
	anatomy.threads[s] = ts
	anatomy.mu.Unlock()
	return func() {
		anatomy.mu.Lock()
		delete(anatomy.threads, s)
		anatomy.mu.Unlock()
		ts.close()
		runtime.UnlockOSThread()
	}
}

// walHeader reads the wal-index header's frame count, backfill and salt.
func walHeader(s *Store) (mx, bf int64, salt uint64, ok bool) {
	if s.shm == nil {
		if _, ok := s.walBacklog(); !ok {
			return 0, 0, 0, false
		}
	}
	var b [100]byte
	if _, err := s.shm.ReadAt(b[:], 0); err != nil {
		return 0, 0, 0, false
	}
	e := binary.NativeEndian
	if e.Uint32(b[0:]) != walIndexVersion || b[12] != 1 {
		return 0, 0, 0, false
	}
	return int64(e.Uint32(b[16:])), int64(e.Uint32(b[96:])), e.Uint64(b[32:]), true
}

// anatomyBegin marks the start of a COMMIT or checkpoint: the WAL's header
// first, then the clocks, so that the reads are outside the span timed.
func anatomyBegin(s *Store) commitMark {
	var m commitMark
	m.mx, m.bf, m.salt, m.walOK = walHeader(s)
	anatomy.mu.Lock()
	m.ts = anatomy.threads[s]
	anatomy.mu.Unlock()
	m.wait, m.slices = m.ts.read()
	m.at = time.Now()
	m.cpu, m.mono = threadClocks()
	return m
}

// noteAnatomy records the COMMIT (what "commit", of batch) or checkpoint
// marked by m, ending now.
func noteAnatomy(s *Store, m commitMark, what string, batch []ran) {
	cpu, mono := threadClocks()
	wall := time.Since(m.at)
	wait, slices := m.ts.read()
	r := anatomyRec{Anatomy: true, Phase: cpulabel.Phase(), What: what, Writes: len(batch),
		Unix: m.at.UnixNano(), Mono0: m.mono, Mono1: mono, WallNs: int64(wall), CPUNs: cpu - m.cpu,
		RunQNs: wait - m.wait, Slices: slices - m.slices}
	r.Tid = gettid() // the thread it ended on: the writer's while locked
	if what == "commit" {
		inter, bat := 0, 0
		for _, w := range batch {
			if w.r.lane == job.LaneBatch {
				bat++
			} else {
				inter++
			}
		}
		switch {
		case bat == 0:
			r.Class = "interactive"
		case inter == 0:
			r.Class = "batch"
		default:
			r.Class = "mixed"
		}
	}
	if mx, bf, salt, ok := walHeader(s); ok && m.walOK {
		r.Frames, r.Ckpt = mx-m.mx, bf-m.bf
		if salt != m.salt {
			r.Restart = true
			r.Frames, r.Ckpt = mx, bf
		}
		r.Frames, r.Ckpt = max(r.Frames, 0), max(r.Ckpt, 0)
	}
	anatomy.mu.Lock()
	anatomy.recs = append(anatomy.recs, r)
	anatomy.mu.Unlock()
}

// dumpAnatomy appends the records to enc and forgets them.
func dumpAnatomy(enc *json.Encoder) {
	anatomy.mu.Lock()
	defer anatomy.mu.Unlock()
	for i := range anatomy.recs {
		enc.Encode(&anatomy.recs[i])
	}
	anatomy.recs = nil
}
