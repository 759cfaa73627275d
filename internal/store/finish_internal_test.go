package store

import (
	"slices"
	"testing"
)

// TestSplitRepeats: each job id's first transition stays in this round,
// in order, and its repeats go to the next; without a repeat the batch is
// returned as it is, not copied.
func TestSplitRepeats(t *testing.T) {
	t.Parallel()
	ids := func(ts []Transition) []string {
		var s []string
		for _, t := range ts {
			s = append(s, t.ID)
		}
		return s
	}
	batch := []Transition{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	now, nowIdx, later, laterIdx := splitRepeats(batch, []int{0, 2, 5})
	if &now[0] != &batch[0] || !slices.Equal(nowIdx, []int{0, 2, 5}) || later != nil || laterIdx != nil {
		t.Fatalf("no repeat: now %v %v, later %v %v; want the batch itself", ids(now), nowIdx, ids(later), laterIdx)
	}
	batch = []Transition{{ID: "a"}, {ID: "b"}, {ID: "a"}, {ID: "c"}, {ID: "b"}, {ID: "a"}}
	now, nowIdx, later, laterIdx = splitRepeats(batch, []int{0, 1, 2, 3, 4, 5})
	if !slices.Equal(ids(now), []string{"a", "b", "c"}) || !slices.Equal(nowIdx, []int{0, 1, 3}) ||
		!slices.Equal(ids(later), []string{"a", "b", "a"}) || !slices.Equal(laterIdx, []int{2, 4, 5}) {
		t.Fatalf("repeats: now %v %v, later %v %v", ids(now), nowIdx, ids(later), laterIdx)
	}
	now[0].ID = "x"
	if batch[0].ID != "a" {
		t.Fatal("a split round shares the caller's batch")
	}
}
