//go:build cpulabels

package sqlite

import (
	"strconv"

	"github.com/ratelane/ratelane/internal/job"
)

// The deferred answers' figures (Config.BatchSyncDefer), a cpulabels
// build only, in the write stats' lines (noteWrite, zero durations):
// "SYNC-HANDOFF why=…" counts the hand-offs to the syncer by reason, N
// each, and "SYNC-HANDOFF-WRITES why=…" the writes they answered, one
// line each; "RIDE interactive=…" the deferred writes answered by a
// commit's own fsync (an interactive one's or not), per commit;
// "WALSYNC met-interactive=…" the syncer's fsyncs by whether an
// interactive transaction was running or committing, or an interactive
// write queued, as the fsync began or as it ended: the collisions on the
// disk that the quiet window (syncIdle) is to avoid.

// noteSyncHandoff records one hand-off of n deferred writes to the
// syncer, for why.
func noteSyncHandoff(why string, n int) {
	noteWrite(&writeReq{lane: job.LaneBatch, kind: "SYNC-HANDOFF why=" + why}, 0, 0)
	for range n {
		noteWrite(&writeReq{lane: job.LaneBatch, kind: "SYNC-HANDOFF-WRITES why=" + why}, 0, 0)
	}
}

// noteRide records n deferred writes answered by a commit's own fsync.
func noteRide(hasInteractive bool, n int) {
	noteWrite(&writeReq{lane: job.LaneBatch, kind: "RIDE interactive=" + strconv.FormatBool(hasInteractive)}, 0, 0)
	for range n {
		noteWrite(&writeReq{lane: job.LaneBatch, kind: "RIDE-WRITES interactive=" + strconv.FormatBool(hasInteractive)}, 0, 0)
	}
}

// interMark is the interactive lane's state as a syncer fsync began, for
// the count of the fsyncs that met interactive work (noteSyncMet).
type interMark struct {
	about bool  // an interactive transaction running or committing, or a write queued
	ended int64 // interactive writes the writer had run
}

// noteSyncMet records whether one syncer fsync, begun at mark, met
// interactive work: an interactive transaction running or committing, or
// an interactive write queued, as it began or as it ended, or an
// interactive write run while it lasted.
func noteSyncMet(s *Store, mark interMark) {
	met := mark.about || s.interactiveCommitAbout() || s.lanes.interactive.ended.Load() != mark.ended
	noteWrite(&writeReq{lane: job.LaneBatch, kind: "WALSYNC met-interactive=" + strconv.FormatBool(met)}, 0, 0)
}

// markInteractive is the interactive lane's state as a syncer fsync
// begins (noteSyncMet).
func (s *Store) markInteractive() interMark {
	return interMark{about: s.interactiveCommitAbout(), ended: s.lanes.interactive.ended.Load()}
}

// interactiveCommitAbout reports whether the writer is running or committing
// a transaction that holds an interactive write, or one is queued: an
// fsync of the syncer's now shares the disk with its commit.
func (s *Store) interactiveCommitAbout() bool {
	st := s.wstate.Load()
	return st == writerRunInter || st == writerCommitInter || len(s.reqs) > 0
}
