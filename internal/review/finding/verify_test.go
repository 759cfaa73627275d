package finding

import (
	"testing"

	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/diff/difftest"
)

func testDiff(t *testing.T) *diff.Diff { t.Helper(); return difftest.Load(t, "mixed.diff") }

func ptr[T any](v T) *T { return &v }

func TestVerify(t *testing.T) {
	t.Parallel()
	d := testDiff(t)
	tests := []struct {
		name string
		f    Finding
		want Reason // "" means valid
	}{
		{"added line", Finding{Path: "pkg/server.go", Line: 5, Evidence: "InsecureSkipVerify: true,"}, ""},
		{"context line", Finding{Path: "pkg/server.go", Line: 2, Evidence: "// line 2"}, ""},
		{"whitespace differs", Finding{Path: "pkg/server.go", Line: 5, Evidence: "  InsecureSkipVerify:\t true, "}, ""},
		{"diff marker copied", Finding{Path: "pkg/server.go", Line: 5, Evidence: "+\tInsecureSkipVerify: true,"}, ""},
		{"substring", Finding{Path: "app.js", Line: 4, Evidence: `"SELECT * FROM users`}, ""},
		{"multi-line", Finding{Path: "pkg/server.go", Line: 5, EndLine: ptr(6), Evidence: "true,\n// TODO: remove"}, ""},
		{"end_line equals line", Finding{Path: "pkg/server.go", Line: 5, EndLine: ptr(5), Evidence: "true"}, ""},
		{"renamed file new path", Finding{Path: "pkg/new_name.go", Line: 8, Evidence: "return 3"}, ""},
		{"unknown path", Finding{Path: "nope.go", Line: 1, Evidence: "x"}, ReasonPathNotInDiff},
		{"renamed file old path", Finding{Path: "pkg/old_name.go", Line: 8, Evidence: "return 3"}, ReasonPathNotInDiff},
		{"deleted file", Finding{Path: "legacy.py", Line: 1, Evidence: "import os"}, ReasonLineDeletedFile},
		{"binary file", Finding{Path: "logo.png", Line: 1, Evidence: "x"}, ReasonLineNotInDiff},
		{"pure rename", Finding{Path: "pkg/moved2.txt", Line: 1, Evidence: "unchanged content"}, ReasonLineNotInDiff},
		{"line outside hunks", Finding{Path: "pkg/server.go", Line: 30, Evidence: "// line 30"}, ReasonLineNotInDiff},
		{"end before line", Finding{Path: "pkg/server.go", Line: 6, EndLine: ptr(5), Evidence: "TODO"}, ReasonEndLineInvalid},
		{"end in other hunk", Finding{Path: "pkg/server.go", Line: 5, EndLine: ptr(20), Evidence: "true"}, ReasonEndLineInvalid},
		{"end outside diff", Finding{Path: "pkg/server.go", Line: 5, EndLine: ptr(12), Evidence: "true"}, ReasonEndLineInvalid},
		{"wrong evidence", Finding{Path: "pkg/server.go", Line: 5, Evidence: "InsecureSkipVerify: false"}, ReasonEvidenceMismatch},
		{"evidence from another line", Finding{Path: "pkg/server.go", Line: 6, Evidence: "InsecureSkipVerify"}, ReasonEvidenceMismatch},
		{"blank evidence", Finding{Path: "pkg/server.go", Line: 5, Evidence: " \t\n"}, ReasonEvidenceMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			valid, quarantined := Verify(d, []Finding{tt.f})
			if tt.want == "" {
				if len(valid) != 1 || len(quarantined) != 0 {
					t.Errorf("quarantined %+v, want valid", quarantined)
				}
				return
			}
			if len(valid) != 0 || len(quarantined) != 1 || quarantined[0].Reason != tt.want {
				t.Errorf("valid %d quarantined %+v, want reason %s", len(valid), quarantined, tt.want)
			}
		})
	}
}

func TestVerifyKeepsOrder(t *testing.T) {
	t.Parallel()
	d := testDiff(t)
	in := []Finding{
		{Path: "app.js", Line: 3, Evidence: "console.log('hello');", Message: "1"},
		{Path: "x", Line: 1, Evidence: "x", Message: "2"},
		{Path: "app.js", Line: 1, Evidence: "const key", Message: "3"},
	}
	valid, q := Verify(d, in)
	if len(valid) != 2 || valid[0].Message != "1" || valid[1].Message != "3" || len(q) != 1 || q[0].Finding.Message != "2" {
		t.Errorf("valid %+v quarantined %+v", valid, q)
	}
}
