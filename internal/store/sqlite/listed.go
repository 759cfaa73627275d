package sqlite

import "github.com/ratelane/ratelane/internal/job"

// Bounds of the deferred jobs_group_id entries (migration 0033).
const (
	// deferListingBelow: an insert of fewer fresh jobs than this writes
	// them with listed = 0. An index led by group_id costs a commit about
	// a leaf per group it touches: a job or a few per group (the
	// single-request intake's commits) pay about a page per job, which one
	// listing of a few hundred jobs at once cuts to a few leaves per group;
	// a large insert's entries are already that dense.
	deferListingBelow = 16
	// listEvery is how many jobs are inserted between two listings
	// (listUnlisted), which bounds the run of ids above jobs_list_mark that
	// a key listing reads besides the index.
	listEvery = 256
)

// deferListing reports whether the fresh jobs (indexes into jobs) are
// written with listed = 0: a small insert whose every job's id is above
// the mark. A job whose id is not (an id made before the last listing,
// committed after it) is listed at once, as the listings read only ids
// above the mark for the unlisted ones.
func (s *Store) deferListing(tx *writeTx, jobs []*job.Job, fresh []int) (bool, error) {
	if len(fresh) == 0 || len(fresh) >= deferListingBelow {
		return false, nil
	}
	if err := s.loadListMark(tx); err != nil {
		return false, err
	}
	for _, i := range fresh {
		if jobs[i].ID <= s.listMark {
			return false, nil
		}
	}
	return true, nil
}

// loadListMark reads jobs_list_mark into s.listMark unless it is known.
// The copy may be above the stored mark (a listing rolled back after it
// was read), never below: what keeps it safe, as a job is written
// unlisted only when its id is above the copy. Another process's commit
// makes it unknown again (checkDataVersion).
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

// countListing adds n inserted jobs to those since the last listing and,
// once they reach listEvery, lists them (listUnlisted).
func (s *Store) countListing(tx *writeTx, n int) error {
	s.sinceListing += n
	if s.sinceListing < listEvery {
		return nil
	}
	return s.listUnlisted(tx)
}

// listUnlisted gives every job written with listed = 0 its jobs_group_id
// entry, in one statement: its entries land a few to a leaf per group,
// where the inserts' own would have taken a leaf per group each commit.
// The mark then moves to the newest id, so that no job is unlisted below
// it. It reads the stored mark, not s.listMark, which may be above it.
func (s *Store) listUnlisted(tx *writeTx) error {
	if _, err := s.exec(tx, `UPDATE jobs SET listed = 1 WHERE id > (SELECT id FROM jobs_list_mark) AND listed = 0`); err != nil {
		return err
	}
	if err := s.queryRow(tx, `UPDATE jobs_list_mark SET id = (SELECT coalesce(max(id), '') FROM jobs) RETURNING id`).Scan(&s.listMark); err != nil {
		s.listMarkKnown = false
		return err
	}
	s.listMarkKnown = true
	s.sinceListing = 0
	return nil
}
