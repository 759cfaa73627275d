// Package rules is ratelane's offline reviewer: pattern rules over the
// added lines of a diff, with no model and no network. It lets every review
// path run in tests, demos and air-gapped regions, and it catches the
// mistakes a regular expression can see (leaked keys, disabled TLS checks,
// string-built SQL, debug output) without spending provider quota.
//
// Only added lines are examined, and each finding's evidence is the exact
// text of its line, so every finding of Review passes finding.Verify by
// construction. Lines longer than MaxLineBytes (minified or generated
// code) are skipped.
package rules

import (
	"path"
	"strings"

	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/finding"
)

// MaxLineBytes is the longest added line Review examines; it matches the
// evidence limit of finding schema v1.
const MaxLineBytes = 4000

// line is what a rule sees: one added line and where it is.
type line struct {
	path string
	lang lang
	text string
	// next is the text of the following new-side line when that line is
	// also added, else "".
	next string
}

// rule is one check. match reports whether the line is a hit.
type rule struct {
	id         string
	severity   finding.Severity
	category   finding.Category
	confidence float64
	message    string
	match      func(l line) bool
}

// Review returns the findings of every rule on the added lines of d, in
// diff order. A line gets at most one finding per category: rules are
// ordered most severe first, and the first match wins.
func Review(d *diff.Diff) []finding.Finding {
	var out []finding.Finding
	for _, f := range d.Files {
		if f.IsDeleted || f.IsBinary {
			continue
		}
		for _, h := range f.Hunks {
			out = reviewHunk(out, f.Path(), h)
		}
	}
	return out
}

func reviewHunk(out []finding.Finding, p string, h diff.Hunk) []finding.Finding {
	lg := langOf(p)
	for i, dl := range h.Lines {
		if dl.Kind != diff.Added || len(dl.Text) > MaxLineBytes || strings.TrimSpace(dl.Text) == "" {
			continue
		}
		l := line{path: p, lang: lg, text: dl.Text, next: nextAdded(h.Lines, i)}
		seen := map[finding.Category]bool{}
		for _, r := range all {
			if seen[r.category] || !r.match(l) {
				continue
			}
			seen[r.category] = true
			out = append(out, finding.Finding{
				Path: p, Line: dl.NewLine, Severity: r.severity, Category: r.category,
				Message: r.message, Evidence: dl.Text, Confidence: r.confidence,
			})
		}
	}
	return out
}

// nextAdded returns the text of the next new-side line after lines[i] when
// it is an added line; deleted lines in between are skipped.
func nextAdded(lines []diff.Line, i int) string {
	for _, l := range lines[i+1:] {
		switch l.Kind {
		case diff.Added:
			return l.Text
		case diff.Context:
			return ""
		}
	}
	return ""
}

// lang is a coarse language family chosen from the file name.
type lang int

const (
	langOther lang = iota
	langGo
	langPython
	langJS
	langRust
	langJava
	langShell
	langDocs
)

var extLang = map[string]lang{
	".go": langGo, ".py": langPython, ".js": langJS, ".jsx": langJS, ".ts": langJS,
	".tsx": langJS, ".mjs": langJS, ".cjs": langJS, ".rs": langRust, ".java": langJava,
	".sh": langShell, ".bash": langShell, ".zsh": langShell, ".md": langDocs,
	".rst": langDocs, ".txt": langDocs, ".adoc": langDocs,
}

func langOf(p string) lang {
	if l, ok := extLang[strings.ToLower(path.Ext(p))]; ok {
		return l
	}
	if b := path.Base(p); b == "Dockerfile" || b == "Makefile" {
		return langShell
	}
	return langOther
}

// isTestFile reports whether p looks like a test file in any language:
// debug output and throwaway values are normal there.
func isTestFile(p string) bool {
	b := strings.ToLower(path.Base(p))
	return strings.HasSuffix(b, "_test.go") || strings.HasPrefix(b, "test_") ||
		strings.HasSuffix(b, "_test.py") || strings.Contains(b, ".test.") ||
		strings.Contains(b, ".spec.") || strings.HasSuffix(b, "test.java") ||
		strings.Contains("/"+p, "/testdata/") || strings.Contains("/"+p, "/test/") ||
		strings.Contains("/"+p, "/tests/") || strings.Contains("/"+p, "/__tests__/")
}

// isComment reports whether a line is entirely a comment, judged by its
// first characters. It errs towards "not a comment" for odd languages.
func isComment(l line) bool {
	t := strings.TrimSpace(l.text)
	for _, p := range []string{"//", "/*", "* ", "*/", "<!--"} {
		if strings.HasPrefix(t, p) || t == "*" {
			return true
		}
	}
	switch l.lang {
	case langPython, langShell, langOther:
		return strings.HasPrefix(t, "#")
	}
	return false
}

// isCode reports whether a line is code in a source file, not a comment or
// documentation.
func isCode(l line) bool {
	return l.lang != langDocs && !isComment(l)
}
