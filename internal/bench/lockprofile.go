package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
)

// lockProfileRate is the block profile's rate while a --lock-profile
// records: every wait of at least 1 µs, and shorter ones sampled in
// proportion (runtime.SetBlockProfileRate).
const lockProfileRate = 1000

// lockProfile is the batch-isolation workload's --lock-profile recorder:
// Go's block profile (where goroutines waited: channels, selects, Go
// mutexes, by the waiter's stack) and mutex profile (contended Go mutexes,
// by the stack that released them), switched on at the baseline's start
// and written at each phase's end. The default SQLite driver
// (modernc.org/sqlite) runs SQLite's pthread mutexes as Go mutexes
// (modernc.org/libc), so the store's SQLite-level lock waits are in both,
// under libc's Xpthread_mutex_lock and Xpthread_mutex_unlock. The
// profiles are cumulative: a phase's own is its file less the one before
// (go tool pprof -base).
type lockProfile struct {
	dir string
	// prevMutex is the mutex profile fraction before start, restored by
	// stop (the block profile is off by default and left off).
	prevMutex int
	on        bool
}

// start switches both profiles on.
func (l *lockProfile) start() error {
	if l == nil {
		return nil
	}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return fmt.Errorf("--lock-profile: %w", err)
	}
	runtime.SetBlockProfileRate(lockProfileRate)
	l.prevMutex = runtime.SetMutexProfileFraction(1)
	l.on = true
	return nil
}

// write writes both profiles, as they are now, to block.PHASE.pb.gz and
// mutex.PHASE.pb.gz.
func (l *lockProfile) write(phase string) error {
	if l == nil || !l.on {
		return nil
	}
	for _, name := range []string{"block", "mutex"} {
		f, err := os.Create(filepath.Join(l.dir, name+"."+phase+".pb.gz"))
		if err != nil {
			return fmt.Errorf("--lock-profile: %w", err)
		}
		err = pprof.Lookup(name).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("--lock-profile %s: %w", name, err)
		}
	}
	return nil
}

// stop switches both profiles off again.
func (l *lockProfile) stop() {
	if l == nil || !l.on {
		return
	}
	runtime.SetBlockProfileRate(0)
	runtime.SetMutexProfileFraction(l.prevMutex)
	l.on = false
}
