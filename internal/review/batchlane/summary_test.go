package batchlane

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// TestDecodeSummaryHead: a pass's summary is the whole summary but its
// review ids, decoded without a string per review (1 allocation per id
// with DecodeSummary; a 2,000-review summary's head in a handful), and a
// summary that is not JSON still fails.
func TestDecodeSummaryHead(t *testing.T) { // not parallel: AllocsPerRun
	full := Summary{Reviews: 2000, Items: 6000, Depth: "deep", Provider: "p", Kind: "openai", Rejected: 1, Tokens: 123456,
		Intake: &Intake{}}
	for i := range full.Reviews {
		full.ReviewIDs = append(full.ReviewIDs, fmt.Sprintf("0193a1b2-c3d4-7e5f-8a9b-%012d", i))
	}
	raw, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	head, err := DecodeSummaryHead(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := full
	want.ReviewIDs = nil
	if !reflect.DeepEqual(head, want) {
		t.Fatalf("head with %d review ids, %+v, want the summary without its ids", len(head.ReviewIDs), head.Intake)
	}
	if n := testing.AllocsPerRun(10, func() { _, _ = DecodeSummaryHead(raw) }); n > 20 {
		t.Fatalf("DecodeSummaryHead: %.0f allocations for a 2,000-review summary, want at most 20", n)
	}
	if _, err := DecodeSummaryHead([]byte(`{"review_ids":[1,`)); err == nil {
		t.Fatal("a truncated summary decoded")
	}
}
