package store

import (
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// HistoryFoldAll is the history length from which any pending pass folds
// into a pending last record, whatever its why, status or error: below
// it, only passes that differ from the last record in nothing but their
// time, attempt and delay fold (FoldsInto). It makes a history's length
// bounded by the budgets and redrives, not by the number of passes: a
// driver job whose polls alternate between an error and none would
// otherwise add two records per error for the whole life of its batch.
const HistoryFoldAll = 32

// FoldsRecord reports whether r, appended to a job's attempt history, may
// be folded into the history's last record instead of adding a record:
// only a pending pass (job.ClassPending) may. A pending pass spends no
// budget, so nothing else bounds how many a job makes (a 24 h provider
// batch polled every minute makes ~1,440); every other outcome is bounded
// by its budget, a cancel or an operator's redrive, and keeps a record of
// its own. Both drivers fold in the UPDATE that appends the record
// (AppendFolded is the rule in Go; the conformance suite checks the two
// agree); an append of any other record costs what it did.
func FoldsRecord(r job.AttemptRecord) bool {
	return r.Outcome == job.ClassPending
}

// FoldsInto reports whether r folds into last, the last record of a
// history of n records: r is a pending pass (FoldsRecord), last is one too
// (possibly a fold already), and either they differ in nothing but At,
// Attempt, Delay (a pass's own time, number and the wait it chose) and
// the fold's Count and FirstAt, or the history holds HistoryFoldAll
// records or more.
func FoldsInto(last, r job.AttemptRecord, n int) bool {
	if !FoldsRecord(r) || last.Outcome != job.ClassPending {
		return false
	}
	if n >= HistoryFoldAll {
		return true
	}
	return sansPass(last) == sansPass(r)
}

// sansPass is r without what differs from pass to pass of one pending
// run: its time, attempt number and delay, and a fold's count and first
// time. The drivers' SQL compares the records the same way (every field
// but these), so that a field added to the record is compared too.
func sansPass(r job.AttemptRecord) job.AttemptRecord {
	r.At, r.Attempt, r.Delay, r.Count, r.FirstAt = time.Time{}, 0, 0, 0, time.Time{}
	return r
}

// AppendFolded returns h with r appended, or with r folded into h's last
// record when FoldsInto says so: the last record becomes r, counting the
// passes it stands for (Count, at least 2) and keeping the time the first
// of them ended (FirstAt). It is the rule the drivers' SQL applies.
func AppendFolded(h []job.AttemptRecord, r job.AttemptRecord) []job.AttemptRecord {
	if len(h) == 0 || !FoldsInto(h[len(h)-1], r, len(h)) {
		return append(h, r)
	}
	last := h[len(h)-1]
	r.Count = max(last.Count, 1) + 1
	r.FirstAt = last.FirstAt
	if r.FirstAt.IsZero() {
		r.FirstAt = last.At
	}
	h[len(h)-1] = r
	return h
}
