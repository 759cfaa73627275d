//go:build !cpulabels

package sqlite

import (
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// Without the cpulabels tag the writer names and times no write: these
// are empty, and the calls behind cpulabel.On are dead code.

func writeCaller() string                                                   { return "" }
func noteWrite(r *writeReq, d time.Duration, interQueued int)               {}
func dumpWriteStats()                                                       {}
func noteCommit(batch []ran, hasInteractive bool, d time.Duration)          {}
func stepStart() time.Time                                                  { return time.Time{} }
func noteStep(lane job.Lane, step string, t0 time.Time)                     {}
func noteArrival(r *writeReq)                                               {}
func noteHold(r *writeReq, bound bool, d time.Duration)                     {}
func noteSeg(s *Store, what string, r *writeReq, t0 time.Time)              {}
func noteRun(s *Store, r *writeReq, t0 time.Time)                           {}
func noteGapCheckpoint(s *Store, t0 time.Time)                              {}
func noteTxCommit(s *Store, batch []ran, hasInteractive bool, c0 time.Time) {}
func noteBesideBegin(s *Store)                                              {}
func noteBesideEnd(s *Store, t0 time.Time)                                  {}
