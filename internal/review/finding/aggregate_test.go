package finding

import (
	"fmt"
	"testing"
)

func TestAggregateDedupeAndOrder(t *testing.T) {
	t.Parallel()
	parts := [][]Finding{
		{
			{Path: "b.go", Line: 1, Category: CategoryBug, Severity: SeverityWarning, Confidence: 0.9, Message: "warn"},
			{Path: "a.go", Line: 9, Category: CategoryStyle, Severity: SeverityInfo, Confidence: 0.5, Message: "info-low"},
			{Path: "z.go", Line: 1, Category: CategorySecurity, Severity: SeverityError, Confidence: 0.1},
		},
		{
			{Path: "b.go", Line: 1, Category: CategoryBug, Severity: SeverityError, Confidence: 0.2, Message: "err"},
			{Path: "a.go", Line: 9, Category: CategoryStyle, Severity: SeverityInfo, Confidence: 0.7, Message: "info-high"},
			{Path: "b.go", Line: 1, Category: CategoryDocs, Severity: SeverityInfo, Confidence: 0.7},
			{Path: "a.go", Line: 2, Category: CategoryBug, Severity: SeverityError, Confidence: 0.7},
		},
	}
	got, err := Aggregate(parts, AggregateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, f := range got.Findings {
		keys = append(keys, fmt.Sprintf("%s %s:%d %s %s", f.Severity, f.Path, f.Line, f.Category, f.Message))
	}
	want := []string{
		"error a.go:2 bug ",
		"error b.go:1 bug err",
		"error z.go:1 security ",
		"info a.go:9 style info-high",
		"info b.go:1 docs ",
	}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("got\n%v\nwant\n%v", keys, want)
	}
	if got.Capped || got.Dropped != 0 {
		t.Errorf("capped = %v %d", got.Capped, got.Dropped)
	}
}

func TestAggregateCap(t *testing.T) {
	t.Parallel()
	var fs []Finding
	for i := range 60 {
		sev := SeverityInfo
		if i%10 == 0 {
			sev = SeverityError
		}
		fs = append(fs, Finding{Path: "f.go", Line: i + 1, Category: CategoryBug, Severity: sev})
	}
	tests := []struct {
		max, wantLen, wantDropped int
	}{
		{0, 50, 10},
		{5, 5, 55},
		{100, 60, 0},
	}
	for _, tt := range tests {
		got, err := Aggregate([][]Finding{fs}, AggregateOptions{MaxFindings: tt.max})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Findings) != tt.wantLen || got.Dropped != tt.wantDropped || got.Capped != (tt.wantDropped > 0) {
			t.Errorf("max %d: len %d dropped %d capped %v", tt.max, len(got.Findings), got.Dropped, got.Capped)
		}
		for i := range min(6, len(got.Findings)) {
			if got.Findings[i].Severity != SeverityError {
				t.Errorf("max %d: finding %d is %s; errors must survive the cap first", tt.max, i, got.Findings[i].Severity)
			}
		}
	}
	if _, err := Aggregate(nil, AggregateOptions{MaxFindings: -1}); err == nil {
		t.Error("negative MaxFindings accepted")
	}
}

func TestSeverityRank(t *testing.T) {
	t.Parallel()
	if !(SeverityError.Rank() > SeverityWarning.Rank() && SeverityWarning.Rank() > SeverityInfo.Rank() && SeverityInfo.Rank() > Severity("x").Rank()) {
		t.Error("severity ranks out of order")
	}
	if len(Categories()) != 7 {
		t.Errorf("Categories() has %d entries", len(Categories()))
	}
}
