package sqlite

import (
	"math/bits"
	"strings"

	"github.com/ratelane/ratelane/internal/job"
)

// Bounds of the job_group_ids pairs' writing (migration 0033).
const (
	// listEvery is how many jobs small inserts add between two listings
	// (listUnlisted): it bounds the run of ids above jobs_list_mark that a
	// key listing reads besides job_group_ids. An index led by group_id
	// costs a commit about a leaf per group it touches; 256 jobs copied at
	// once cost a few leaves per group.
	listEvery = 256
	// listEveryQuiet is listEvery while no key listing has read jobs_list_mark's
	// run since the last listing (Store.keyListed): nobody pays for the
	// longer run then, and a bulk of 2,048 jobs costs a commit fewer leaves
	// per job than one of 256 (about 16 groups' leaves either way). A key
	// listing that comes reads at most this many ids above the mark once;
	// the next insert lists them, and listEvery applies again while
	// listings keep coming.
	listEveryQuiet = 2048
	// listDirectFrom: an insert of this many fresh jobs or more writes
	// their pairs itself (listDirect), already a few to a leaf per group,
	// rather than have a listing read its rows back.
	listDirectFrom = 16
)

// groupPair is a job's row of job_group_ids.
type groupPair struct {
	gid int64
	jid string
}

// listDirect writes pairs (a large insert's jobs, after listUnlisted) into
// job_group_ids and raises the mark to the newest of them, so that the
// table again holds exactly the jobs at or below the mark.
func (s *Store) listDirect(tx *writeTx, pairs []groupPair) error {
	top := ""
	args := make([]any, 0, 2*min(len(pairs), maxInsertRows))
	for done := 0; done < len(pairs); {
		n := chunkSizes(len(pairs) - done)[0]
		args = args[:0]
		for _, p := range pairs[done : done+n] {
			args = append(args, p.gid, p.jid)
			top = max(top, p.jid)
		}
		if _, err := s.exec(tx, pairsSQL[bits.TrailingZeros(uint(n))], args...); err != nil {
			return err
		}
		done += n
	}
	s.forgetListMark()
	_, err := s.exec(tx, `UPDATE jobs_list_mark SET id = max(id, ?)`, top)
	return err
}

// pairsSQL[k] inserts 1<<k pairs into job_group_ids.
var pairsSQL = func() (out []string) {
	for n := 1; n <= maxInsertRows; n *= 2 {
		out = append(out, `INSERT INTO job_group_ids (gid, jid) VALUES `+strings.TrimSuffix(strings.Repeat("(?, ?),", n), ","))
	}
	return out
}()

// listLate gives the fresh jobs (indexes into jobs) whose id is not above
// the mark their job_group_ids pair at once: an id made before the last
// listing and committed after it, which the listings' run above the mark
// would not read. The others wait for listUnlisted.
func (s *Store) listLate(tx *writeTx, jobs []*job.Job, fresh []int) error {
	if len(fresh) == 0 {
		return nil
	}
	if err := s.loadListMark(tx); err != nil {
		return err
	}
	for _, i := range fresh {
		if id := jobs[i].ID; id <= s.listMark {
			if _, err := s.exec(tx, `INSERT INTO job_group_ids (gid, jid) SELECT group_id, id FROM jobs WHERE id = ?`, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// loadListMark reads jobs_list_mark into s.listMark unless it is known. A
// rollback, another process's commit and a migration make it unknown
// again (forgetListMark), so that it is always the stored mark.
func (s *Store) loadListMark(tx *writeTx) error {
	if s.listMarkKnown {
		return nil
	}
	if err := s.queryRow(tx, `SELECT id FROM jobs_list_mark`).Scan(&s.listMark); err != nil {
		return err
	}
	s.listMarkKnown = true
	return nil
}

// forgetListMark makes the writer read jobs_list_mark again before its
// next use: what it held may have been rolled back or changed by another
// connection.
func (s *Store) forgetListMark() { s.listMarkKnown = false }

// countListing adds n inserted jobs to those since the last listing and,
// once they reach listEvery (listEveryQuiet while no key listing has read
// the run above the mark since), lists them (listUnlisted).
func (s *Store) countListing(tx *writeTx, n int) error {
	s.sinceListing += n
	if s.sinceListing < listEvery || s.sinceListing < listEveryQuiet && !s.keyListed.Load() {
		return nil
	}
	return s.listUnlisted(tx)
}

// listUnlisted copies the pairs of every job above the mark into
// job_group_ids, in one statement: they land a few to a leaf per group,
// where the inserts' own entries took a leaf per group each commit. The
// mark then moves to the newest id, so that job_group_ids again holds
// exactly the jobs at or below it.
func (s *Store) listUnlisted(tx *writeTx) error {
	s.forgetListMark()
	// A listing from here on reads what this one leaves above the mark.
	s.keyListed.Store(false)
	if _, err := s.exec(tx, `INSERT INTO job_group_ids (gid, jid) SELECT group_id, id FROM jobs WHERE id > (SELECT id FROM jobs_list_mark)`); err != nil {
		return err
	}
	if err := s.queryRow(tx, `UPDATE jobs_list_mark SET id = (SELECT coalesce(max(id), '') FROM jobs) RETURNING id`).Scan(&s.listMark); err != nil {
		return err
	}
	s.listMarkKnown = true
	s.sinceListing = 0
	return nil
}
