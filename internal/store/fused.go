package store

import (
	"errors"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// ParentAdvance is a parent's advance written with the finish of its last
// open part (Transition.Parent), in the same transaction: the part's end
// and its parent's aggregation in one write, where apart they were two
// visits to a single-writer store on every interactive review's path
// (docs/benchmarks.md, "Session 30 (s30h1)"). The engine computed
// Advance from the parent and its parts as it read them before the
// finish, the finishing part taken as its transition leaves it.
//
// Finish writes it only when the part's own transition was written (its
// guard held) and, checked in the transaction, the parent is still in
// Advance.From (accepted: the compare-and-set of every advance) and it
// has no other part that is open or that finished after FinishedBy: no
// child of the parent's tenant and region of one of PartKinds (every
// child when empty) other than the finishing one in a state other than
// published and terminal, or with a finished_at after FinishedBy, and no
// batch item naming the parent that is not final (ReadyParentsQuery's
// two tests). So the parts the aggregation read are still the parts as
// they are. Otherwise it writes nothing of the parent, and that is no
// error: the part's finish stands, and the parent is aggregated the usual
// way (its wake-up, the sweep), as if the advance had never been asked.
type ParentAdvance struct {
	// Advance is the parent's guarded advance: from accepted, to
	// validated (with Publish when it has nothing to deliver) or terminal.
	Advance AdvanceParams
	// PartKinds are the kinds of child that count as the parent's parts
	// (ReadyParentsParams.PartKinds); empty means every child.
	PartKinds []string
	// FinishedBy is the latest finished_at of the other parts the
	// aggregation read (zero when there were none).
	FinishedBy time.Time
	// Job is Finish's answer: the parent as the write left it, or nil
	// when it wrote nothing of the parent (the call's own value is
	// replaced each time Finish runs).
	Job *job.Job
}

// Rest is what a driver passes to FinishAdvance after
// ParentAdvanceQuery moved the parent: the advance without its Publish,
// which the UPDATE did.
func (p *ParentAdvance) Rest() AdvanceParams {
	a := p.Advance
	a.Publish = false
	return a
}

// Check refuses a parent advance a finish may not write: one out of
// anything but accepted, or to anything but validated or terminal (an
// aggregation's outcomes).
func (p *ParentAdvance) Check() error {
	if err := p.Advance.Check(); err != nil {
		return err
	}
	if p.Advance.From != job.StateAccepted || p.Advance.To != job.StateValidated && p.Advance.To != job.StateTerminal {
		return errors.New("finish: a part's finish advances its parent from accepted to validated or terminal, not " +
			string(p.Advance.From) + " -> " + string(p.Advance.To))
	}
	return nil
}

// ParentAdvanceQuery is a ParentAdvance's guarded UPDATE for both SQL
// drivers, for the finish of part partID: it moves the parent and sets
// what Store.Advance's UPDATE sets, only under the conditions
// ParentAdvance states. With Advance.Publish it moves the parent
// straight to published, as Store.Advance's UPDATE and then Publish's
// leave it, in one statement: what is left of the advance (its record,
// reading the row back: FinishAdvance without Publish) needs no guard of
// its own, which a pipelined transaction (PostgreSQL's finish) could not
// check before its next read. It affects one row or none (RETURNING id,
// which both drivers take). The tests are ReadyParentsQuery's, on the row being
// updated, plus the finished-after test; the children are probed through
// jobs_parent and the items through batch_items_job, as a sweep's are.
func ParentAdvanceQuery(partID string, p *ParentAdvance) *Query {
	a := p.Advance
	to := a.To
	if a.Publish {
		to = job.StatePublished // the publication's compare-and-set is this one's (AdvanceParams.Publish)
	}
	var finished, result any
	if to.Final() {
		finished = UnixNano(a.Now)
	}
	if len(a.Result) > 0 {
		result = []byte(a.Result)
	}
	child := `SELECT 1 FROM jobs pj WHERE pj.parent_id = jobs.id AND pj.parent_id <> '' AND pj.id <> ?
		AND pj.tenant = jobs.tenant AND pj.region = jobs.region
		AND (pj.state <> '` + string(job.StatePublished) + `' AND pj.state <> '` + string(job.StateTerminal) + `'
			OR pj.finished_at > ?)`
	child, args := ofPartKinds(child, []any{partID, UnixNano(p.FinishedBy)}, p.PartKinds)
	q := NewQuery(`UPDATE jobs SET state = ?, reason = ?, result = coalesce(?, result), finished_at = ?, updated_at = ?,
		publish_claim = NULL, publish_claim_until = NULL`,
		string(to), string(a.Reason), result, finished, UnixNano(a.Now))
	q.Where(`id = ?`, a.ID).Where(`state = ?`, string(a.From))
	q.Where(`NOT EXISTS (`+child+`)`, args...).Where(`NOT EXISTS (` + openItemSQL + `)`)
	return q.Then(`RETURNING id`)
}
