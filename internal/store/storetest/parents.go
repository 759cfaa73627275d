package storetest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

var parentCases = map[string]func(*testing.T, Opener){
	"ReadyParents":         testReadyParents,
	"ReadyParentsItems":    testReadyParentsItems,
	"ReadyParentsSince":    testReadyParentsFinishedSince,
	"PartsOf":              testPartsOf,
	"AdvancePublish":       testAdvancePublish,
	"FinishAdvancesParent": testFinishAdvancesParent,
	"AdvanceMany":          testAdvanceMany,
	"ParentsWithChildren":  testParentsWithChildren,
	"AdvanceBrief":         testAdvanceBrief,
}

// newParent returns an accepted parent of kind and its waiting parts of
// partKind, ready to insert together.
func newParent(kind, partKind string, parts int) []*job.Job {
	p := NewJob("acme", job.LaneBatch, "k")
	p.Kind, p.State = kind, job.StateAccepted
	js := []*job.Job{p}
	for range parts {
		c := NewJob("acme", job.LaneBatch, "k")
		c.Kind, c.ParentID = partKind, p.ID
		js = append(js, c)
	}
	return js
}

// readyParents pages through ReadyParents(kind, partKinds) limit at a
// time and returns the ids in the order listed, checking that every page
// is newest first and that no id repeats.
func readyParents(t *testing.T, s store.Store, kind string, partKinds []string, limit int) []string {
	t.Helper()
	var out []string
	after := ""
	for {
		page, err := s.ReadyParents(context.Background(), store.ReadyParentsParams{Kind: kind, PartKinds: partKinds, After: after, Limit: limit})
		if err != nil {
			t.Fatalf("ReadyParents: %v", err)
		}
		for _, j := range page {
			if j.Kind != kind || j.State != job.StateAccepted || slices.Contains(out, j.ID) || (len(out) > 0 && j.ID >= out[len(out)-1]) {
				t.Fatalf("ReadyParents listed %s (kind %s, %s) after %v", j.ID, j.Kind, j.State, out)
			}
			out = append(out, j.ID)
		}
		if len(page) < limit {
			return out
		}
		after = page[len(page)-1].ID
	}
}

// testReadyParents: the engine's parts sweep lists only the accepted
// parents of a kind whose parts (children of the part kinds, of the
// parent's tenant and region) are all final: published or terminal. A
// parent with no parts is listed (its aggregator decides); one with an
// open part, a validated one (publishPending publishes it) and one of
// another kind are not. Paging returns the same set, newest first.
func testReadyParents(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	const kind, partKind = "agg", "agg.part"
	open1 := newParent(kind, partKind, 2)    // one part stays waiting
	final := newParent(kind, partKind, 2)    // parts end published and terminal
	bare := newParent(kind, partKind, 0)     // no parts at all
	valid := newParent(kind, partKind, 0)    // advanced to validated
	other := newParent("other", partKind, 0) // another kind
	foreignKind := newParent(kind, "unrelated", 1)
	forged := newParent(kind, partKind, 1)
	forged[1].Tenant = "mallory" // a child of another tenant is no part
	// final's parts run first, alone: one ends published, one terminal.
	insert(t, s, final...)
	leased := lease(t, s, T0, 10)
	if len(leased) != 2 {
		t.Fatalf("leased %d of final's parts, want 2", len(leased))
	}
	done := []store.Transition{{To: job.StatePublished}, {To: job.StateTerminal, Reason: job.ReasonPermanentError}}
	for i, j := range leased {
		done[i].ID, done[i].LeaseToken, done[i].Attempts = j.ID, j.LeaseToken, j.Attempts
		done[i].Record = job.AttemptRecord{At: T0, Outcome: job.ClassSuccess}
		done[i].Keys.Now = T0
	}
	for i, err := range finish(t, s, done...) {
		if err != nil {
			t.Fatalf("finish %s: %v", done[i].ID, err)
		}
	}
	for _, js := range [][]*job.Job{open1, bare, valid, other, foreignKind, forged} {
		insert(t, s, js...)
	}
	// open1's first part ends terminal (cancelled); its second stays waiting.
	if _, err := s.Cancel(ctx, open1[1].ID, T0); err != nil {
		t.Fatal(err)
	}
	adv := func(id string, from, to job.State) {
		t.Helper()
		if _, err := s.Advance(ctx, store.AdvanceParams{ID: id, From: from, To: to, Now: T0,
			Record: job.AttemptRecord{At: T0, Outcome: job.ClassSuccess}}); err != nil {
			t.Fatalf("advance %s %s -> %s: %v", id, from, to, err)
		}
	}
	adv(valid[0].ID, job.StateAccepted, job.StateValidated)

	parts := []string{partKind}
	want := []string{forged[0].ID, foreignKind[0].ID, bare[0].ID, final[0].ID} // newest first
	for _, limit := range []int{1, 2, 3, 500} {
		if got := readyParents(t, s, kind, parts, limit); !slices.Equal(got, want) {
			t.Fatalf("ReadyParents(limit %d) = %v, want %v (open %s, validated %s)", limit, got, want, open1[0].ID, valid[0].ID)
		}
	}
	// With no part kinds every child counts: the open child of another
	// kind holds its parent back; the other tenant's child still does not.
	if got, want := readyParents(t, s, kind, nil, 500), []string{forged[0].ID, bare[0].ID, final[0].ID}; !slices.Equal(got, want) {
		t.Fatalf("ReadyParents(every child) = %v, want %v", got, want)
	}
	// The last open part ends: its parent is ready at the next read.
	if _, err := s.Cancel(ctx, open1[2].ID, T0); err != nil {
		t.Fatal(err)
	}
	if got := readyParents(t, s, kind, parts, 500); !slices.Contains(got, open1[0].ID) {
		t.Fatalf("ReadyParents after the last part ended = %v, want %s in it", got, open1[0].ID)
	}
	if got := readyParents(t, s, "other", parts, 500); !slices.Equal(got, []string{other[0].ID}) {
		t.Fatalf("ReadyParents(other) = %v, want %v", got, other[0].ID)
	}
}

// testReadyParentsItems: a batch-lane review has no part jobs; its parts
// are the batch items naming it (BatchItem.JobID). ReadyParents leaves it
// out while one of them is pending or submitted and lists it once all
// are final, so the sweep reads nothing for a review waiting on its
// provider batch. An open item in a batch of another tenant (a forged
// row) holds no parent back; the parent's aggregator judges that batch.
func testReadyParentsItems(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	const kind = "agg"
	waiting, foreign := newParent(kind, "", 0), newParent(kind, "", 0)
	insert(t, s, waiting[0], foreign[0])
	b, items := NewBatch("acme", 3)
	for i := range items {
		items[i].JobID = waiting[0].ID
	}
	createBatch(t, s, b, items)
	fb, fitems := NewBatch("mallory", 1)
	fitems[0].JobID = foreign[0].ID
	createBatch(t, s, fb, fitems)

	if got, want := readyParents(t, s, kind, nil, 500), []string{foreign[0].ID}; !slices.Equal(got, want) {
		t.Fatalf("ReadyParents with 3 pending items = %v, want %v", got, want)
	}
	settle := func(customID string) {
		t.Helper()
		ok, err := s.SettleBatchItem(ctx, store.SettleBatchItemParams{BatchID: b.ID, CustomID: customID, From: store.ItemPending,
			To: store.ItemCanceled, Reason: "cancelled", Now: T0})
		if err != nil || !ok {
			t.Fatalf("settle %s: %v, %v", customID, ok, err)
		}
	}
	settle(items[0].CustomID)
	settle(items[1].CustomID)
	if got := readyParents(t, s, kind, nil, 500); slices.Contains(got, waiting[0].ID) {
		t.Fatalf("ReadyParents with 1 pending item = %v, want %s left out", got, waiting[0].ID)
	}
	settle(items[2].CustomID)
	if got, want := readyParents(t, s, kind, nil, 500), []string{foreign[0].ID, waiting[0].ID}; !slices.Equal(got, want) {
		t.Fatalf("ReadyParents with every item final = %v, want %v", got, want)
	}
}

// testReadyParentsFinishedSince: with FinishedSince, ReadyParents lists
// only the ready parents of which a child finished at or after it (the
// engine's pass between two full walks): not a ready parent whose parts
// all finished before, nor one with no parts, nor one with a part
// finished since and another still open; pagination holds.
func testReadyParentsFinishedSince(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	const kind, partKind = "agg", "agg.part"
	since := T0.Add(time.Hour)
	early, late, late2 := newParent(kind, partKind, 1), newParent(kind, partKind, 2), newParent(kind, partKind, 1)
	mixed, bare := newParent(kind, partKind, 2), newParent(kind, partKind, 0)
	insert(t, s, slices.Concat(early, late, late2, mixed, bare)...)
	cancel := func(id string, at time.Time) {
		t.Helper()
		if _, err := s.Cancel(ctx, id, at); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	cancel(early[1].ID, since.Add(-time.Nanosecond)) // finished just before
	cancel(late[1].ID, T0)                           // one part before, the last one since
	cancel(late[2].ID, since)
	cancel(late2[1].ID, since.Add(time.Minute))
	cancel(mixed[1].ID, since.Add(time.Minute)) // mixed[2] stays waiting

	list := func(since time.Time, limit int) []string {
		t.Helper()
		var out []string
		after := ""
		for {
			page, err := s.ReadyParents(ctx, store.ReadyParentsParams{Kind: kind, PartKinds: []string{partKind}, After: after, Limit: limit, FinishedSince: since})
			if err != nil {
				t.Fatalf("ReadyParents(since %v): %v", since, err)
			}
			for _, j := range page {
				out = append(out, j.ID)
			}
			if len(page) < limit {
				return out
			}
			after = page[len(page)-1].ID
		}
	}
	for _, limit := range []int{1, 500} {
		if got, want := list(since, limit), []string{late2[0].ID, late[0].ID}; !slices.Equal(got, want) {
			t.Fatalf("ReadyParents(finished since, limit %d) = %v, want %v (early %s, mixed %s, bare %s)", limit, got, want, early[0].ID, mixed[0].ID, bare[0].ID)
		}
	}
	if got, want := list(time.Time{}, 500), []string{bare[0].ID, late2[0].ID, late[0].ID, early[0].ID}; !slices.Equal(got, want) {
		t.Fatalf("ReadyParents(no FinishedSince) = %v, want %v", got, want)
	}
}

// testPartsOf: PartsOf reads the children of many parents at once, of
// every kind, tenant and state (the engine keeps the parts it counts),
// each parent's newest first, and nothing of a parent with none, an
// unknown id, or a job that is no one's part.
func testPartsOf(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	a, b, none := partsFixture(t, s)
	got, err := s.PartsOf(ctx, []string{b[0].ID, a[0].ID, none[0].ID, "no-such-job"})
	if err != nil {
		t.Fatal(err)
	}
	byParent := map[string][]string{}
	for _, j := range got {
		byParent[j.ParentID] = append(byParent[j.ParentID], j.ID)
	}
	want := map[string][]string{a[0].ID: {a[3].ID, a[2].ID, a[1].ID}, b[0].ID: {b[2].ID, b[1].ID}}
	if len(got) != 5 || len(byParent) != 2 || !slices.Equal(byParent[a[0].ID], want[a[0].ID]) || !slices.Equal(byParent[b[0].ID], want[b[0].ID]) {
		t.Fatalf("PartsOf = %v, want %v", byParent, want)
	}
	if got, err := s.PartsOf(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("PartsOf(none) = %v, %v; want nothing", got, err)
	}
}

// testAdvancePublish: an advance to validated with AdvanceParams.Publish
// records the publication in the same write (the engine's aggregation of
// a parent with nothing to deliver): the job is published, finished, with
// its result and the advance's record, its publication's compare-and-set
// spent (a later Publish or ClaimPublish is ErrConflict). Guarded as any
// advance: on a job no longer accepted it changes nothing, not even the
// publication of a job left validated for a Publisher to deliver. Publish
// with any other target is refused before any write.
func testAdvancePublish(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	parent := NewJob("acme", job.LaneInteractive, "k")
	parent.State = job.StateAccepted
	insert(t, s, parent)
	adv := store.AdvanceParams{ID: parent.ID, From: job.StateAccepted, To: job.StateValidated, Result: []byte(`{"sum":3}`),
		Record: job.AttemptRecord{At: T0, Outcome: job.ClassSuccess, Why: "aggregated 2 parts (0 failed)"}, Now: T0, Publish: true}
	got, err := s.Advance(ctx, adv)
	if err != nil || got.State != job.StatePublished || string(got.Result) != `{"sum":3}` {
		t.Fatalf("advance with Publish = %+v, %v; want published with its result", got, err)
	}
	if got, err = s.Get(ctx, parent.ID); err != nil || got.State != job.StatePublished || len(got.History) != 1 {
		t.Fatalf("the advanced job read back: %+v, %v; want published with one record", got, err)
	}
	if !got.FinishedAt.Equal(T0) {
		t.Fatalf("published at %v, want finished at %v", got.FinishedAt, T0)
	}
	if _, err := s.Advance(ctx, adv); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second advance with Publish = %v, want ErrConflict", err)
	}
	if err := s.Publish(ctx, parent.ID, T0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Publish after an advance that published = %v, want ErrConflict (published once)", err)
	}
	if err := s.ClaimPublish(ctx, parent.ID, "tok", T0, T0.Add(time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("ClaimPublish after an advance that published = %v, want ErrConflict", err)
	}

	// A job already validated (to be delivered) is not published by an
	// advance from accepted: the guard refuses the whole write.
	other := NewJob("acme", job.LaneInteractive, "k")
	other.State = job.StateAccepted
	insert(t, s, other)
	if _, err := s.Advance(ctx, store.AdvanceParams{ID: other.ID, From: job.StateAccepted, To: job.StateValidated, Now: T0}); err != nil {
		t.Fatal(err)
	}
	adv.ID = other.ID
	if _, err := s.Advance(ctx, adv); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("advance with Publish of a validated job = %v, want ErrConflict", err)
	}
	if j, err := s.Get(ctx, other.ID); err != nil || j.State != job.StateValidated || !j.FinishedAt.IsZero() {
		t.Fatalf("the validated job after a refused advance: %+v, %v; want it validated, unfinished", j, err)
	}

	held := NewJob("acme", job.LaneInteractive, "k")
	held.State = job.StateAccepted
	insert(t, s, held)
	for _, to := range []job.State{job.StateWaiting, job.StateTerminal} {
		p := store.AdvanceParams{ID: held.ID, From: job.StateAccepted, To: to, Now: T0, Publish: true}
		if to == job.StateTerminal {
			p.Reason = job.ReasonPermanentError
		}
		if _, err := s.Advance(ctx, p); err == nil || errors.Is(err, store.ErrConflict) {
			t.Fatalf("advance to %s with Publish = %v, want it refused before any write", to, err)
		}
	}
	if j, err := s.Get(ctx, held.ID); err != nil || j.State != job.StateAccepted {
		t.Fatalf("the accepted job after refused advances: %+v, %v", j, err)
	}
}

// testAdvanceMany: a store.ManyAdvancer answers each advance of one call
// in order as Advance would: one that applies leaves its job (published
// too with Publish), one whose job is not in From is ErrConflict and
// leaves it alone, one the state machine refuses is refused before any
// write; each on its own, the others applied. A store that does not
// implement it has nothing to test.
func testAdvanceMany(t *testing.T, open Opener) {
	s := open(t)
	m := optional[store.ManyAdvancer](t, s)
	ctx := context.Background()
	var js []*job.Job
	for range 4 {
		j := NewJob("acme", job.LaneBatch, "k")
		j.State = job.StateAccepted
		insert(t, s, j)
		js = append(js, j)
	}
	rec := job.AttemptRecord{At: T0, Outcome: job.ClassSuccess, Why: "aggregated"}
	ps := []store.AdvanceParams{
		{ID: js[0].ID, From: job.StateAccepted, To: job.StateValidated, Result: []byte(`{"sum":1}`), Record: rec, Now: T0, Publish: true},
		{ID: js[1].ID, From: job.StateValidated, To: job.StatePublished, Now: T0},             // not validated: refused by its guard
		{ID: js[2].ID, From: job.StateAccepted, To: job.StateWaiting, Publish: true, Now: T0}, // refused before any write
		{ID: js[3].ID, From: job.StateAccepted, To: job.StateTerminal, Reason: job.ReasonPermanentError, Record: rec, Now: T0},
	}
	got, errs := m.AdvanceMany(ctx, ps)
	if len(got) != len(ps) || len(errs) != len(ps) {
		t.Fatalf("AdvanceMany of %d answered %d jobs and %d errors", len(ps), len(got), len(errs))
	}
	if errs[0] != nil || got[0] == nil || got[0].ID != js[0].ID || got[0].State != job.StatePublished || string(got[0].Result) != `{"sum":1}` {
		t.Fatalf("advance 0 = %+v, %v; want it published with its result", got[0], errs[0])
	}
	if !errors.Is(errs[1], store.ErrConflict) {
		t.Fatalf("advance 1 from a state its job is not in = %v, want ErrConflict", errs[1])
	}
	if errs[2] == nil || errors.Is(errs[2], store.ErrConflict) {
		t.Fatalf("advance 2 (to waiting with Publish) = %v, want it refused before any write", errs[2])
	}
	if errs[3] != nil || got[3] == nil || got[3].ID != js[3].ID || got[3].State != job.StateTerminal {
		t.Fatalf("advance 3 = %+v, %v; want it terminal", got[3], errs[3])
	}
	for i, want := range []job.State{job.StatePublished, job.StateAccepted, job.StateAccepted, job.StateTerminal} {
		if j, err := s.Get(ctx, js[i].ID); err != nil || j.State != want {
			t.Fatalf("job %d read back: %+v, %v; want %s", i, j, err, want)
		}
	}
	if got, errs := m.AdvanceMany(ctx, nil); len(got) != 0 || len(errs) != 0 {
		t.Fatalf("AdvanceMany of none = %v, %v; want nothing", got, errs)
	}
}

// partsFixture inserts three parents: a with 3 parts of agg.part (its
// first cancelled), b with 2 of kind other (the second of another
// tenant), none with none; and a job that is no one's part.
func partsFixture(t *testing.T, s store.Store) (a, b, none []*job.Job) {
	t.Helper()
	a, b, none = newParent("agg", "agg.part", 3), newParent("agg", "other", 2), newParent("agg", "", 0)
	b[2].Tenant = "mallory"
	loose := NewJob("acme", job.LaneBatch, "k")
	insert(t, s, append(append(append(a, b...), none...), loose)...)
	if _, err := s.Cancel(context.Background(), a[1].ID, T0); err != nil {
		t.Fatal(err)
	}
	return a, b, none
}

// testParentsWithChildren: a store.ParentsReader reads the parents that
// exist among ids, each row as Get returns it but for its History, and
// their children exactly as PartsOf reads them; a job that is one of the
// parents and a child of another is returned as each. No ids, nothing.
func testParentsWithChildren(t *testing.T, open Opener) {
	s := open(t)
	r := optional[store.ParentsReader](t, s)
	ctx := context.Background()
	a, b, none := partsFixture(t, s)
	ids := []string{b[0].ID, a[0].ID, none[0].ID, "no-such-job", a[1].ID}
	parents, children, err := r.ParentsWithChildren(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*job.Job{}
	for _, p := range parents {
		got[p.ID] = p
	}
	if len(parents) != 4 || len(got) != 4 {
		t.Fatalf("%d parents (%d distinct); want the 4 of %v that exist", len(parents), len(got), ids)
	}
	for _, id := range []string{b[0].ID, a[0].ID, none[0].ID, a[1].ID} {
		want, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want.History = nil
		if !reflect.DeepEqual(got[id], want) {
			t.Fatalf("parent %s read as\n%+v\nwant it as Get reads it (no history)\n%+v", id, got[id], want)
		}
	}
	want, err := s.PartsOf(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(children, want) {
		t.Fatalf("children %v; want them as PartsOf reads them, %v", jobIDs(children), jobIDs(want))
	}
	if len(children) != 5 {
		t.Fatalf("%d children, want 5 (3 of a's, 2 of b's)", len(children))
	}
	if p, c, err := r.ParentsWithChildren(ctx, nil); err != nil || len(p)+len(c) != 0 {
		t.Fatalf("ParentsWithChildren(none) = %v, %v, %v; want nothing", p, c, err)
	}
}

// jobIDs returns the ids of js, in order.
func jobIDs(js []*job.Job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}

// testAdvanceBrief: an advance with AdvanceParams.Brief writes exactly
// what one without it writes, and returns only the job's ID and the state
// it left (published with Publish); guarded as any advance.
func testAdvanceBrief(t *testing.T, open Opener) {
	s := open(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		to      job.State
		reason  job.Reason
		publish bool
		want    job.State
	}{
		{"validated", job.StateValidated, "", false, job.StateValidated},
		{"published", job.StateValidated, "", true, job.StatePublished},
		{"terminal", job.StateTerminal, job.ReasonPermanentError, false, job.StateTerminal},
	} {
		var rows [2]*job.Job
		for i, brief := range []bool{false, true} {
			j := NewJob("acme", job.LaneBatch, "k")
			j.State = job.StateAccepted
			insert(t, s, j)
			adv := store.AdvanceParams{ID: j.ID, From: job.StateAccepted, To: tc.to, Reason: tc.reason, Result: []byte(`{"n":1}`),
				Record: job.AttemptRecord{At: T0, Outcome: job.ClassSuccess, Why: "aggregated"}, Now: T0, Publish: tc.publish, Brief: brief}
			got, err := s.Advance(ctx, adv)
			if err != nil {
				t.Fatalf("%s: advance (Brief %v): %v", tc.name, brief, err)
			}
			if brief && !reflect.DeepEqual(got, &job.Job{ID: j.ID, State: tc.want}) {
				t.Fatalf("%s: a brief advance returned %+v; want only ID %s and state %s", tc.name, got, j.ID, tc.want)
			}
			if _, err := s.Advance(ctx, adv); !errors.Is(err, store.ErrConflict) {
				t.Fatalf("%s: the advance again (Brief %v) = %v, want ErrConflict", tc.name, brief, err)
			}
			if rows[i], err = s.Get(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
		}
		full, brief := *rows[0], *rows[1]
		full.ID, full.IdempotencyKey, full.CreatedAt = brief.ID, brief.IdempotencyKey, brief.CreatedAt
		if full.State != tc.want || !reflect.DeepEqual(full, brief) {
			t.Fatalf("%s: a brief advance left\n%+v\na full one\n%+v", tc.name, brief, full)
		}
	}
}
