package sqlite

import "github.com/ratelane/ratelane/internal/job"

// listEvery is how many jobs are inserted between two listings
// (listUnlisted): it bounds the run of ids above jobs_list_mark that a key
// listing reads besides job_group_ids (migration 0033). An index led by
// group_id costs a commit about a leaf per group it touches; 256 jobs
// copied at once cost a few leaves per group.
const listEvery = 256

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
// once they reach listEvery, lists them (listUnlisted).
func (s *Store) countListing(tx *writeTx, n int) error {
	s.sinceListing += n
	if s.sinceListing < listEvery {
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
