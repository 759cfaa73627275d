package sqlite

import (
	"database/sql"
	"fmt"
)

// maxGroupIDs bounds Store.groupIDs. At the bound the map is emptied: the
// groups met again are upserted once more (upsertGroup), as after a
// restart. A node's live groups (lane × tenant × kind × keys) are far
// fewer.
const maxGroupIDs = 1 << 14

// upsertGroup returns the id of g's row in job_groups, creating it, and
// lowers the row's ready_at to ready unless it is already as early (ready
// NULL: the insert has none of the group's jobs waiting, and ready_at
// stays). A group the writer has met (Store.groupIDs) is not upserted:
// its ready_at is lowered by id only when that changes it (groupReady),
// and not touched at all when ready is NULL. The upsert rewrote the row
// on every insert, and ready_at being in job_groups_round's predicate, its
// index entry too, although an intake's inserts almost never move it:
// 13 % of a single insert's WAL pages (docs/benchmarks.md, "Session 26
// (s26h3)"). A conditional upsert needed a SELECT for the id whenever it
// wrote nothing, which cost more instructions than the rewrite saved
// ("Session 25 (s25h3)"); the memo needs none.
func (s *Store) upsertGroup(tx *writeTx, g groupOf, ready sql.NullInt64) (int64, error) {
	if id, ok := s.groupIDs[g]; ok {
		if !ready.Valid {
			return id, nil
		}
		return id, s.groupReadyNS(tx, id, ready.Int64)
	}
	var id int64
	err := s.queryRow(tx, `INSERT INTO job_groups (lane, tenant, kind, keys, ready_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (lane, tenant, kind, keys) DO UPDATE SET ready_at = CASE
			WHEN excluded.ready_at IS NULL THEN job_groups.ready_at
			WHEN job_groups.ready_at IS NULL OR excluded.ready_at < job_groups.ready_at THEN excluded.ready_at
			ELSE job_groups.ready_at END
		RETURNING id`, g.lane, g.tenant, g.kind, g.keys, ready).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert group of kind %s: %w", g.kind, err)
	}
	if len(s.groupIDs) >= maxGroupIDs {
		clear(s.groupIDs)
	}
	s.groupIDs[g] = id
	return id, nil
}

// groupReadyNS lowers the group's ready_at to at (unix ns) unless it is
// already as early. The condition is in the WHERE clause, not in a CASE
// of the SET: a row the UPDATE matches is written (and its
// job_groups_round entry deleted and added again) even when the values
// stay the same.
func (s *Store) groupReadyNS(tx *writeTx, group, at int64) error {
	_, err := s.exec(tx, `UPDATE job_groups SET ready_at = ?1 WHERE id = ?2 AND (ready_at IS NULL OR ready_at > ?1)`, at, group)
	return err
}

// forgetRows forgets what the writer remembers of stored rows (the
// unpaced keys' states, the stored shapes lengths, jobs_list_mark, the
// group ids), so that it reads them again: a rollback may have undone
// what it remembers (a group row created by the write rolled back, whose
// id another connection may then give another group), another
// connection's commit may have changed it, and a migration may have
// rewritten the tables. Only the writer goroutine calls it, or
// onWriterConn between the writer's transactions.
func (s *Store) forgetRows() {
	clear(s.unpaced)
	clear(s.shapesLen)
	clear(s.groupIDs)
	s.forgetListMark()
}
