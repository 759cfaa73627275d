package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// ended is the transition that ends leased part j as to at now, with
// its parent's advance pa (nil: none).
func ended(j *job.Job, to job.State, now time.Time, pa *store.ParentAdvance) store.Transition {
	t := store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: to, Attempts: j.Attempts, Result: []byte(`{"n":1}`),
		Record: job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassSuccess}, Parent: pa}
	if to == job.StateTerminal {
		t.Reason = job.ReasonPermanentError
	}
	t.Keys.Now = now
	return t
}

// parentAdvance is an aggregation's advance of parent to validated with
// Publish (nothing to deliver), its parts those of kind partKind.
func parentAdvance(parent *job.Job, partKind string, now, finishedBy time.Time) *store.ParentAdvance {
	return &store.ParentAdvance{PartKinds: []string{partKind}, FinishedBy: finishedBy, Advance: store.AdvanceParams{
		ID: parent.ID, From: job.StateAccepted, To: job.StateValidated, Result: []byte(`{"sum":2}`), Now: now, Publish: true,
		Record: job.AttemptRecord{At: now, Outcome: job.ClassSuccess, Why: "aggregated 2 parts (0 failed)"}}}
}

// testFinishAdvancesParent: a finish that ends a parent's last open part
// writes the parent's advance (store.Transition.Parent) in the same
// write, through Finish and FinishLease alike: the parent ends published
// with its result and the aggregation's record, and ParentAdvance.Job
// says so. It writes nothing of the parent, and the part's finish still
// stands, when another part is still open, when a part finished after
// the aggregation's reading (FinishedBy), when a batch item naming the
// parent is open, or when the parent is no longer accepted; and nothing
// at all when the part's own guard fails (a lost lease). An advance out
// of anything but accepted is refused.
func testFinishAdvancesParent(t *testing.T, open Opener) {
	for _, via := range []string{"Finish", "FinishLease"} {
		t.Run(via, func(t *testing.T) { finishAdvancesParent(t, open, via) })
	}
}

func finishAdvancesParent(t *testing.T, open Opener, via string) {
	s := open(t)
	ctx := context.Background()
	const kind, partKind = "agg", "agg.part"
	end := func(ts ...store.Transition) []error {
		t.Helper()
		if via == "Finish" {
			return finish(t, s, ts...)
		}
		fl := optional[store.FinishLeaser](t, s)
		errs, _, err := fl.FinishLease(ctx, ts, store.LeaseParams{Released: func(bool) {}})
		if err != nil {
			t.Fatalf("finish and lease: %v", err)
		}
		return errs
	}
	state := func(id string) *job.Job {
		t.Helper()
		j, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	two, one, lost, gone, late, items := newParent(kind, partKind, 2), newParent(kind, partKind, 1), newParent(kind, partKind, 1),
		newParent(kind, partKind, 1), newParent(kind, partKind, 2), newParent(kind, partKind, 1)
	var all []*job.Job
	for _, js := range [][]*job.Job{two, one, lost, gone, late, items} {
		all = append(all, js...)
	}
	insert(t, s, all...)
	if _, err := s.Cancel(ctx, late[2].ID, T0.Add(time.Hour)); err != nil { // finished after the reading
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, gone[0].ID, T0); err != nil { // the parent is no longer accepted
		t.Fatal(err)
	}
	b, its := NewBatch("acme", 1)
	its[0].JobID = items[0].ID
	createBatch(t, s, b, its)
	byID := map[string]*job.Job{}
	for _, j := range lease(t, s, T0, 20) {
		byID[j.ID] = j
	}
	if len(byID) != 7 {
		t.Fatalf("leased %d parts, want 7", len(byID))
	}

	// two's first part ends while its second runs: nothing of the parent.
	pa := parentAdvance(two[0], partKind, T0, time.Time{})
	mustOK(t, end(ended(byID[two[1].ID], job.StatePublished, T0, pa)))
	if pa.Job != nil || state(two[0].ID).State != job.StateAccepted || state(two[1].ID).State != job.StatePublished {
		t.Fatalf("a part's finish with a part still open advanced its parent (%+v)", pa.Job)
	}
	// Its last part ends: the parent is published in the same write.
	pa = parentAdvance(two[0], partKind, T0, T0)
	mustOK(t, end(ended(byID[two[2].ID], job.StateTerminal, T0, pa)))
	p := state(two[0].ID)
	if pa.Job == nil || pa.Job.State != job.StatePublished || p.State != job.StatePublished || string(p.Result) != `{"sum":2}` ||
		len(p.History) != 1 || !p.FinishedAt.Equal(T0) || state(two[2].ID).State != job.StateTerminal {
		t.Fatalf("the last part's finish left its parent %+v (told %+v), want it published with its result and record", p, pa.Job)
	}
	if err := s.Publish(ctx, two[0].ID, T0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Publish after the fused advance = %v, want ErrConflict (published once)", err)
	}

	// A terminal advance (an aggregation that failed).
	pa = parentAdvance(one[0], partKind, T0, time.Time{})
	pa.Advance.To, pa.Advance.Reason, pa.Advance.Publish = job.StateTerminal, job.ReasonPermanentError, false
	mustOK(t, end(ended(byID[one[1].ID], job.StateTerminal, T0, pa)))
	if j := state(one[0].ID); pa.Job == nil || j.State != job.StateTerminal || j.Reason != job.ReasonPermanentError {
		t.Fatalf("a terminal fused advance left the parent %+v", j)
	}

	// A lost lease: the part's guard fails, and nothing of the parent is written.
	stale := *byID[lost[1].ID]
	stale.LeaseToken = "not-the-token"
	pa = parentAdvance(lost[0], partKind, T0, time.Time{})
	if errs := end(ended(&stale, job.StatePublished, T0, pa)); !errors.Is(errs[0], store.ErrConflict) {
		t.Fatalf("finish under a stale token = %v, want ErrConflict", errs[0])
	}
	if pa.Job != nil || state(lost[0].ID).State != job.StateAccepted || state(lost[1].ID).State != job.StateRunning {
		t.Fatal("a finish whose guard failed wrote its parent")
	}

	// The parent is not accepted, a part finished after the reading, an
	// item is open: the part's finish stands, the parent is left alone.
	for _, c := range []struct {
		name       string
		parent     *job.Job
		part       *job.Job
		want       job.State
		finishedBy time.Time
	}{
		{"parent cancelled", gone[0], gone[1], job.StateTerminal, time.Time{}},
		{"part finished after the reading", late[0], late[1], job.StateAccepted, T0},
		{"open batch item", items[0], items[1], job.StateAccepted, time.Time{}},
	} {
		part := byID[c.part.ID]
		pa = parentAdvance(c.parent, partKind, T0, c.finishedBy)
		mustOK(t, end(ended(part, job.StatePublished, T0, pa)))
		if pa.Job != nil || state(c.parent.ID).State != c.want || state(part.ID).State != job.StatePublished {
			t.Fatalf("%s: the parent is %s (told %+v), want %s and its part published", c.name, state(c.parent.ID).State, pa.Job, c.want)
		}
	}

	// A ParentAdvance out of anything but accepted is refused whole.
	pa = parentAdvance(lost[0], partKind, T0, time.Time{})
	pa.Advance.From, pa.Advance.To, pa.Advance.Publish = job.StateValidated, job.StatePublished, false
	tr := ended(byID[lost[1].ID], job.StatePublished, T0, pa)
	var err error
	if via == "Finish" {
		_, err = s.Finish(ctx, []store.Transition{tr})
	} else {
		_, _, err = s.(store.FinishLeaser).FinishLease(ctx, []store.Transition{tr}, store.LeaseParams{Released: func(bool) {}})
	}
	if err == nil || state(lost[1].ID).State != job.StateRunning {
		t.Fatalf("a finish with a parent advance from validated = %v, want it refused with nothing written", err)
	}
}
