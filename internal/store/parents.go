package store

import (
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// ReadyParentsParams selects ReadyParents' page: the accepted parents of
// one kind that are ready to aggregate.
type ReadyParentsParams struct {
	// Kind is the parents' kind (required).
	Kind string
	// PartKinds are the kinds of child that count as the parents' parts;
	// empty means every child (as engine.Jobs.Parts reads them).
	PartKinds []string
	// After is the id of the last parent of the previous page; ids sort
	// by creation time, so pagination is stable.
	After string
	// Limit is the page size: zero means DefaultListLimit, above
	// MaxListLimit it is MaxListLimit (PageSize).
	Limit int
	// Lane, when set, lists only that lane's parents: a lane-dedicated
	// node sweeps the parents of the lanes it serves (engine.Config.Lanes).
	Lane job.Lane
	// FinishedSince, when not zero, lists only the parents of which a
	// child (any kind, any tenant) has a finished_at at or after it: the
	// engine's periodic pass between two full walks, which then reads the
	// parts finished since shortly before its previous pass (through the
	// index of finished jobs) rather than every waiting parent.
	FinishedSince time.Time
}

// ReadyParentsQuery is ReadyParents' statement for both SQL drivers: the
// columns cols of the accepted jobs of p.Kind, newest first, one page,
// that have
//
//   - no part that is not final: no child (parent_id) of the parent's
//     tenant and region, of one of p.PartKinds, in a state other than
//     published and terminal (engine.Jobs.Parts reads the same children);
//   - no batch item that is not final naming the parent (batch_items.job_id,
//     an item in state pending or submitted) in a batch of the parent's
//     tenant and region: a batch-lane review's parts are its items, and
//     its aggregator waits while any of them is open.
//
// So a parent with no parts at all is ready, as it always was: its
// aggregator decides (one that waits on something that is neither a job
// nor a batch item is still asked at every sweep). The parents are walked
// in the partial index of accepted jobs by kind (jobs_accepted_kind), and
// each is probed in jobs_parent and batch_items_job: one statement per
// page whatever the number of waiting parents, instead of one List of
// parts per parent (docs/benchmarks.md, "Session 15 (s15h1)"). States are
// literals, as in ListQuery, so that PostgreSQL's generic plan can use the
// partial indexes.
//
// With p.FinishedSince the parents are not walked: the statement starts
// from the children finished since then (jobs_finished, by finished_at),
// their distinct parent ids, and reads each such parent by its key
// (CROSS JOIN: SQLite keeps that order), so its cost follows the parts
// finished in the window, not the parents waiting.
func ReadyParentsQuery(cols string, p ReadyParentsParams) *Query {
	child := `SELECT 1 FROM jobs pj WHERE pj.parent_id = jobs.id AND pj.parent_id <> ''
		AND pj.tenant = jobs.tenant AND pj.region = jobs.region
		AND pj.state <> '` + string(job.StatePublished) + `' AND pj.state <> '` + string(job.StateTerminal) + `'`
	child, args := ofPartKinds(child, nil, p.PartKinds)
	q := NewQuery(`SELECT ` + cols + ` FROM jobs`)
	if !p.FinishedSince.IsZero() {
		// No parent_id <> '' here: it would let SQLite scan every part
		// in jobs_parent for the DISTINCT; a job that is no one's part
		// yields '', which names no job.
		q = NewQuery(`SELECT `+cols+` FROM (SELECT DISTINCT parent_id AS pid FROM jobs pf
			WHERE pf.finished_at IS NOT NULL AND pf.finished_at >= ?) ch
			CROSS JOIN jobs`, UnixNano(p.FinishedSince)).Where(`jobs.id = ch.pid`)
	}
	q.Where(`state = '`+string(job.StateAccepted)+`'`).Where(`kind = ?`, p.Kind)
	q.WhereSet(`lane = ?`, string(p.Lane))
	q.Where(`NOT EXISTS (`+child+`)`, args...).Where(`NOT EXISTS (` + openItemSQL + `)`)
	return q.WhereSet(`id < ?`, p.After).Then(`ORDER BY id DESC LIMIT ?`, PageSize(p.Limit))
}

// openItemSQL finds a batch item that is not final naming the job of the
// enclosing statement's jobs row, in a batch of its tenant and region
// (ReadyParentsQuery, ParentAdvanceQuery). CROSS JOIN: SQLite then reads
// the parent's items first (by job_id) and each one's batch by its key,
// rather than every batch of the tenant and their items; PostgreSQL plans
// it as any inner join.
const openItemSQL = `SELECT 1 FROM batch_items bi CROSS JOIN batches bh
		WHERE bi.job_id = jobs.id AND bh.id = bi.batch_id AND (bi.state = '` + ItemPending + `' OR bi.state = '` + ItemSubmitted + `')
		AND bh.tenant = jobs.tenant AND bh.region = jobs.region`

// ofPartKinds adds to child, a probe of a parent's children pj, the test
// that a child is of one of kinds (none: any child counts), and its
// arguments to args.
func ofPartKinds(child string, args []any, kinds []string) (string, []any) {
	if len(kinds) == 0 {
		return child, args
	}
	child += ` AND pj.kind IN (?` + strings.Repeat(`, ?`, len(kinds)-1) + `)`
	for _, k := range kinds {
		args = append(args, k)
	}
	return child, args
}

// PartsOfQuery is PartsOf's statement for both SQL drivers: the columns
// cols of every child of a set of parents (parent_id, through the partial
// index jobs_parent), a parent's children together and newest first, as
// List(Parent) pages them. in is the driver's test of parent_id against
// the set as one bound value, ids (SQLite: `parent_id IN (SELECT value
// FROM json_each(?))` with a JSON array; PostgreSQL: `parent_id = ANY(?)`
// with a text array): one text for any number of parents, so the
// statement is prepared once rather than once per page size.
func PartsOfQuery(cols, in string, ids any) *Query {
	return NewQuery(`SELECT `+cols+` FROM jobs`).
		Where(in+` AND parent_id <> ''`, ids).
		Then(`ORDER BY parent_id, id DESC`)
}

// ParentsWithChildrenQuery is ParentsReader's statement for both SQL
// drivers: one statement, so one snapshot, of the columns cols after a
// first column that is 0 for a parent's row and 1 for a child's; the
// parents (idIn, the driver's test of id against the set as one bound
// value, as PartsOfQuery's in) first, then their children (parentIn)
// together and newest first, as PartsOf returns them. A job that is one
// of the parents and a child of another is read twice, once as each.
func ParentsWithChildrenQuery(cols, idIn, parentIn string, ids any) *Query {
	return NewQuery(`SELECT 0 AS child, `+cols+` FROM jobs WHERE `+idIn+`
		UNION ALL SELECT 1, `+cols+` FROM jobs WHERE `+parentIn+` AND parent_id <> ''
		ORDER BY child, parent_id, id DESC`, ids, ids)
}
