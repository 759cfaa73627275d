package batchlane

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
)

// TestWakeAfterLastItemOfEachGroup runs a batch of multi-part reviews to
// its results (OpenAI batch simulator, manual clock) with two items
// settled per store write, so each review's items straddle settle groups.
// Every review is woken after the write that made its last item final:
// its last wake-up finds none of its items open. Woken once per pass
// (before session 42), a review was woken after its first group only, and
// its aggregation, which may run at once, found its later items open and
// waited for the engine's full sweep walk. And a review is woken at most
// once per group.
func TestWakeAfterLastItemOfEachGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := batchsim.NewClock(time.Now())
	const reviews, files = 3, 3
	var rs []Review
	for r := range reviews {
		var d strings.Builder
		for f := range files {
			fmt.Fprintf(&d, "diff --git a/r%[1]d/f%[2]d.go b/r%[1]d/f%[2]d.go\nnew file mode 100644\n--- /dev/null\n"+
				"+++ b/r%[1]d/f%[2]d.go\n@@ -0,0 +1,3 @@\n+package f%[2]d\n%[3]s", r, f,
				strings.Repeat("+// a line long enough to fill a part of a small part budget on its own\n", 2))
		}
		rs = append(rs, Review{Repo: "acme/app", Change: "c", Diff: []byte(d.String()), Publish: pipeline.Publish{Kind: "none"}})
	}
	plan, h, reads := reviewsBatch(t, batchsim.Config{ValidateFor: time.Second, ProcessFor: time.Second, FinalizeFor: time.Second,
		Now: clock.Now}, Manifest{ID: "b-wake", Reviews: rs, MaxPartTokens: 64}, clock.Now)
	st := reads.Store
	items := map[string]int{} // items by review
	for _, it := range plan.Items {
		items[it.JobID]++
	}
	if len(items) != reviews {
		t.Fatalf("%d reviews own items, want %d", len(items), reviews)
	}
	for id, n := range items {
		if n <= 2 {
			t.Fatalf("review %s has %d items, want more than a settle group (2)", id, n)
		}
	}
	h.cfg.SettleGroup = 2
	group := 0 // Yield is called before each settle group (and between other pieces)
	h.cfg.Yield = func(context.Context) { group++ }
	open := map[string][]int{}  // by review: its open items at each of its wake-ups
	wokenIn := map[string]int{} // by review: the group of its last wake-up
	twice := map[string]bool{}  // reviews woken twice in one group
	h.cfg.Wake = func(id string) {
		if g, ok := wokenIn[id]; ok && g == group {
			twice[id] = true
		}
		wokenIn[id] = group
		its, err := st.BatchItems(ctx, store.BatchItemParams{BatchID: plan.Batch.ID})
		if err != nil {
			t.Error(err)
			return
		}
		n := 0
		for _, it := range its {
			if it.JobID == id && !store.ItemFinal(it.State) {
				n++
			}
		}
		open[id] = append(open[id], n)
	}
	h.HandleSubmit(ctx, plan.Jobs[0])
	for passes := 0; ; passes++ {
		if passes == 20 {
			t.Fatal("the batch did not finish in 20 collect passes")
		}
		o := h.HandleCollect(ctx, plan.Jobs[1])
		if o.Class == job.ClassSuccess {
			break
		}
		clock.Advance(max(o.RetryAfter, time.Second))
	}
	if b, err := st.GetBatch(ctx, plan.Batch.ID); err != nil || b.Counts.Succeeded != len(plan.Items) {
		t.Fatalf("batch counts %+v, %v; want %d succeeded", b.Counts, err, len(plan.Items))
	}
	for id := range items {
		seen := open[id]
		if len(seen) == 0 || seen[len(seen)-1] != 0 {
			t.Errorf("review %s: open items at its wake-ups %v; want a last wake-up with none open", id, seen)
		}
		if twice[id] {
			t.Errorf("review %s woken twice in one settle group", id)
		}
	}
}
