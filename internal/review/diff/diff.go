// Package diff is ratelane's model of a unified git diff, as the review job
// kind sees it.
//
// Parse turns diff text into files and hunks and indexes the new side of
// every file, so that a finding's (path, line) can be checked in constant
// time: Lookup says whether a new-side line was added, is unchanged context
// shown in the diff, or is absent from it. Only lines that appear in the
// diff are known; a reviewer that anchors a finding on any other line is
// making it up.
//
// A Diff is immutable after Parse and safe for concurrent use.
package diff

import (
	"errors"
	"fmt"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// LineKind says what a line is in a hunk. Lookups on the new side return
// only Absent, Context or Added.
type LineKind uint8

const (
	// Absent means the line does not appear on the new side of the diff.
	// It is the zero value so that a failed lookup needs no extra flag.
	Absent LineKind = iota
	// Context is an unchanged line shown around a change.
	Context
	// Added is a line that the change adds.
	Added
	// Deleted is a line that the change removes; it has no new-side number.
	Deleted
)

// String returns the lower-case name used in machine-readable output.
func (k LineKind) String() string {
	switch k {
	case Absent:
		return "absent"
	case Context:
		return "context"
	case Added:
		return "added"
	case Deleted:
		return "deleted"
	}
	return fmt.Sprintf("LineKind(%d)", uint8(k))
}

// Line is one line of a hunk. Text excludes the diff marker and the
// trailing newline; NoEOL records a "\ No newline at end of file" marker so
// that rendering can reproduce it.
type Line struct {
	Kind LineKind
	// OldLine is the 1-based line number on the old side, 0 for added lines.
	OldLine int
	// NewLine is the 1-based line number on the new side, 0 for deleted lines.
	NewLine int
	Text    string
	NoEOL   bool
}

// Hunk is one "@@ -a,b +c,d @@" section of a file. OldStart and NewStart
// follow the unified-diff convention: when a side has no lines, its start
// is the line before the hunk.
type Hunk struct {
	OldStart, OldLines int
	NewStart, NewLines int
	// Section is the optional text after the closing "@@" (often the
	// enclosing function), kept for rendering.
	Section string
	Lines   []Line
}

// File is the change to one file. OldPath is empty for a new file and
// NewPath is empty for a deleted file.
type File struct {
	OldPath, NewPath string
	IsNew            bool
	IsDeleted        bool
	IsRenamed        bool
	IsCopied         bool
	IsBinary         bool
	Hunks            []Hunk

	header *gitdiff.File   // header fields only, for rendering
	lines  map[int]lineRef // new-side index
}

type lineRef struct {
	hunk, idx int
}

// Diff is a parsed unified diff. Files keeps the order of the input.
type Diff struct {
	Files  []*File
	byPath map[string]*File
}

// Entry is one new-side line of a diff, as returned by Diff.Entries.
type Entry struct {
	Path string
	Line int
	Kind LineKind
	Text string
}

// ErrNoFiles is returned by Parse when the input holds no file diff at all,
// which is what an empty or non-diff input (garbage) looks like.
var ErrNoFiles = errors.New("parse diff: input contains no file diffs")

// Path returns the path a reviewer refers to: the new path, or the old
// path for a deleted file.
func (f *File) Path() string {
	if f.IsDeleted || f.NewPath == "" {
		return f.OldPath
	}
	return f.NewPath
}

// Lookup returns the kind and text of new-side line n of the file, or
// Absent when the diff does not show that line.
func (f *File) Lookup(n int) (LineKind, string) {
	ref, ok := f.lines[n]
	if !ok {
		return Absent, ""
	}
	l := f.Hunks[ref.hunk].Lines[ref.idx]
	return l.Kind, l.Text
}

// HunkOf returns the index in f.Hunks of the hunk that shows new-side line
// n, and false when no hunk does.
func (f *File) HunkOf(n int) (int, bool) {
	ref, ok := f.lines[n]
	return ref.hunk, ok
}

// File returns the file whose Path is path. Deleted files are found by
// their old path; renamed files only by their new path.
func (d *Diff) File(path string) (*File, bool) {
	f, ok := d.byPath[path]
	return f, ok
}

// Lookup returns the kind and text of new-side line n of path, or Absent
// when the diff has no such file or does not show that line.
func (d *Diff) Lookup(path string, n int) (LineKind, string) {
	f, ok := d.byPath[path]
	if !ok {
		return Absent, ""
	}
	return f.Lookup(n)
}

// Entries returns every new-side line of the diff in file and line order.
// It is what chunking must preserve, and what tests compare.
func (d *Diff) Entries() []Entry {
	var out []Entry
	for _, f := range d.Files {
		for _, h := range f.Hunks {
			for _, l := range h.Lines {
				if l.Kind == Added || l.Kind == Context {
					out = append(out, Entry{Path: f.Path(), Line: l.NewLine, Kind: l.Kind, Text: l.Text})
				}
			}
		}
	}
	return out
}
