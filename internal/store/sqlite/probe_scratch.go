package sqlite

import (
	"fmt"
	"os"
	"time"
)

// SCRATCH probe (not for merge): slow writer transactions.
var probeOn = os.Getenv("RATELANE_PROBE") != ""

var probeDBMod time.Time

func (s *Store) probeTx(t0, t1, t2 time.Time, n int, walBefore int64) {
	if !probeOn {
		return
	}
	ckpt := false
	if fi, err := os.Stat(s.cfg.Path); err == nil {
		ckpt = !fi.ModTime().Equal(probeDBMod)
		probeDBMod = fi.ModTime()
	}
	if ckpt {
		fmt.Fprintf(os.Stderr, "PROBE   %s +0 dur %v CKPT writes %d run %v commit %v\n", t0.Format("15:04:05.000000"), t2.Sub(t0), n, t1.Sub(t0), t2.Sub(t1))
	}
	if t2.Sub(t0) < 15*time.Millisecond {
		return
	}
	var wal int64
	if fi, err := os.Stat(s.cfg.Path + "-wal"); err == nil {
		wal = fi.Size()
	}
	fmt.Fprintf(os.Stderr, "PROBE   %s +0 dur %v SQLTX writes %d run %v commit %v wal %d->%d\n", t0.Format("15:04:05.000000"), t2.Sub(t0), n, t1.Sub(t0), t2.Sub(t1), walBefore, wal)
}

func (s *Store) walSize() int64 {
	if !probeOn {
		return 0
	}
	if fi, err := os.Stat(s.cfg.Path + "-wal"); err == nil {
		return fi.Size()
	}
	return 0
}
