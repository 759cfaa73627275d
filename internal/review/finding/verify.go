package finding

import (
	"strings"
	"unicode"

	"github.com/ratelane/ratelane/internal/review/diff"
)

// Reason says why Verify quarantined a finding. The values are stable and
// machine-readable: they are stored and counted.
type Reason string

const (
	// ReasonPathNotInDiff means the diff has no file at the finding's path.
	ReasonPathNotInDiff Reason = "path_not_in_diff"
	// ReasonLineDeletedFile means the file is deleted: it has no new side.
	ReasonLineDeletedFile Reason = "line_deleted_file"
	// ReasonLineNotInDiff means the line is neither added nor context.
	ReasonLineNotInDiff Reason = "line_not_in_diff"
	// ReasonEndLineInvalid means end_line is before line or outside the
	// hunk that shows line.
	ReasonEndLineInvalid Reason = "end_line_invalid"
	// ReasonEvidenceMismatch means the evidence is not found in the text
	// of the lines the finding points at.
	ReasonEvidenceMismatch Reason = "evidence_mismatch"
)

// Quarantined is a finding that failed Verify, with the first reason found.
type Quarantined struct {
	Finding Finding
	Reason  Reason
}

// Verify checks findings against the diff they are about and splits them
// into valid ones and quarantined ones, each list in input order. A finding
// is valid when its path is in the diff and not deleted, line is an added
// or context line on the new side, end_line (if set) is >= line and in the
// same hunk, and the evidence matches (see EvidenceMatches).
func Verify(d *diff.Diff, findings []Finding) (valid []Finding, quarantined []Quarantined) {
	for _, f := range findings {
		if r, ok := check(d, f); !ok {
			quarantined = append(quarantined, Quarantined{Finding: f, Reason: r})
			continue
		}
		valid = append(valid, f)
	}
	return valid, quarantined
}

// check returns the reason f is invalid, or ok.
func check(d *diff.Diff, f Finding) (Reason, bool) {
	file, found := d.File(f.Path)
	switch {
	case !found:
		return ReasonPathNotInDiff, false
	case file.IsDeleted:
		return ReasonLineDeletedFile, false
	}
	hunk, shown := file.HunkOf(f.Line)
	if !shown {
		return ReasonLineNotInDiff, false
	}
	last := f.LastLine()
	if last < f.Line {
		return ReasonEndLineInvalid, false
	}
	if h, ok := file.HunkOf(last); !ok || h != hunk {
		return ReasonEndLineInvalid, false
	}
	texts := make([]string, 0, last-f.Line+1)
	for n := f.Line; n <= last; n++ {
		_, t := file.Lookup(n)
		texts = append(texts, t)
	}
	if !EvidenceMatches(f.Evidence, texts) {
		return ReasonEvidenceMismatch, false
	}
	return "", true
}

// EvidenceMatches reports whether evidence quotes lines. Both sides are
// normalised by collapsing runs of whitespace to one space and trimming;
// the lines are joined with one space; evidence matches when it is a
// non-empty substring of the result. Models often copy the diff marker, so
// when that fails a second try strips one leading "+" from each line of
// the evidence.
func EvidenceMatches(evidence string, lines []string) bool {
	joined := normalize(strings.Join(lines, "\n"))
	ev := normalize(evidence)
	if ev != "" && strings.Contains(joined, ev) {
		return true
	}
	ev = normalize(stripMarkers(evidence))
	return ev != "" && strings.Contains(joined, ev)
}

func stripMarkers(s string) string {
	ls := strings.Split(s, "\n")
	for i, l := range ls {
		ls[i] = strings.TrimPrefix(l, "+")
	}
	return strings.Join(ls, "\n")
}

// normalize collapses every run of Unicode white space to one space and
// trims both ends.
func normalize(s string) string {
	return strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
}
