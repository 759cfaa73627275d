package storetest

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
)

// An adaptive key whose upstream announces its policy and a remaining
// quota (admission's announced credit) spends that remaining at once, up
// to its window, in the next lease: the store applies the finish's hints
// and keeps the credit in the key's row between transactions. Without it
// the key's bucket admits two starts, not the window's rest.
func testAnnouncedCredit(t *testing.T, open Opener) {
	s := open(t)
	setLimit(t, s, admission.AdaptiveUpstreamWindow("cr", 30, time.Second, 0, admission.DefaultHeadroom))
	for range 40 {
		insert(t, s, NewJob("acme", job.LaneBatch, "cr"))
	}
	got := lease(t, s, T0, 1)
	if len(got) != 1 {
		t.Fatalf("leased %d, want 1", len(got))
	}
	at := T0.Add(20 * time.Millisecond)
	tr := success(got[0], at)
	tr.Keys.Hints = []job.Hint{{Limit: 30, Remaining: 29, Reset: time.Second, Window: time.Second}}
	mustOK(t, finish(t, s, tr))
	if n := len(lease(t, s, at.Add(time.Millisecond), 40)); n != 29 {
		t.Fatalf("leased %d on a remaining of 29 of 30, want 29 (the window's rest)", n)
	}
}
