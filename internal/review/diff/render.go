package diff

import (
	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// defaultFileMode stands in for the unknown mode of a file created or
// deleted by a traditional (non-git) diff: Render writes git headers, and
// without a "new file mode" or "deleted file mode" line a git header does
// not mark a creation or deletion.
const defaultFileMode = 0o100644

// Slice returns the hunk made of h.Lines[i:j] with a header recomputed so
// that it is a valid hunk on its own. It panics if i and j are not a valid,
// non-empty range of h.Lines, like a slice expression would.
func (h Hunk) Slice(i, j int) Hunk {
	if i < 0 || j > len(h.Lines) || i >= j {
		panic("diff: Hunk.Slice: invalid range")
	}
	oldNext, newNext := h.OldStart, h.NewStart
	if h.OldLines > 0 {
		oldNext--
	}
	if h.NewLines > 0 {
		newNext--
	}
	// oldNext and newNext now name the line before the hunk on each side.
	for _, l := range h.Lines[:i] {
		oldNext, newNext = advance(l, oldNext, newNext)
	}
	s := Hunk{OldStart: oldNext, NewStart: newNext, Section: h.Section, Lines: h.Lines[i:j:j]}
	for _, l := range s.Lines {
		if l.Kind != Added {
			s.OldLines++
		}
		if l.Kind != Deleted {
			s.NewLines++
		}
	}
	if s.OldLines > 0 {
		s.OldStart++
	}
	if s.NewLines > 0 {
		s.NewStart++
	}
	return s
}

func advance(l Line, oldN, newN int) (int, int) {
	if l.Kind != Added {
		oldN++
	}
	if l.Kind != Deleted {
		newN++
	}
	return oldN, newN
}

// Render returns f as unified-diff text (git flavour) with the given hunks,
// which may be any subset or Slice of f.Hunks in order. Binary files render
// as a "Binary files ... differ" header: their patch data is of no use to a
// reviewer. The result parses back with Parse.
func (f *File) Render(hunks []Hunk) string {
	hdr := *f.header
	if hdr.IsDelete && hdr.OldMode == 0 {
		hdr.OldMode = defaultFileMode
	}
	if hdr.IsNew && hdr.NewMode == 0 {
		hdr.NewMode = defaultFileMode
	}
	// A deletion has no new side and a creation no old one (File.NewPath
	// and File.OldPath are empty), but go-gitdiff keeps a name a "+++" or
	// "---" line gave before the "deleted file mode" or "new file mode"
	// line. Written into "diff --git a/old b/new", two different names
	// leave go-gitdiff no path for the file, so the part would not parse
	// (found by FuzzParse). With the stray name dropped, go-gitdiff writes
	// the one path twice and /dev/null for the missing side, as git does.
	if hdr.IsDelete {
		hdr.NewName = ""
	}
	if hdr.IsNew {
		hdr.OldName = ""
	}
	hdr.TextFragments = make([]*gitdiff.TextFragment, 0, len(hunks))
	for _, h := range hunks {
		hdr.TextFragments = append(hdr.TextFragments, h.fragment())
	}
	return hdr.String()
}

// fragment converts h back to go-gitdiff's representation for formatting.
func (h Hunk) fragment() *gitdiff.TextFragment {
	frag := &gitdiff.TextFragment{
		Comment:     h.Section,
		OldPosition: int64(h.OldStart), OldLines: int64(h.OldLines),
		NewPosition: int64(h.NewStart), NewLines: int64(h.NewLines),
		Lines: make([]gitdiff.Line, 0, len(h.Lines)),
	}
	for _, l := range h.Lines {
		gl := gitdiff.Line{Op: gitdiff.OpContext, Line: l.Text}
		switch l.Kind {
		case Added:
			gl.Op = gitdiff.OpAdd
		case Deleted:
			gl.Op = gitdiff.OpDelete
		}
		if !l.NoEOL {
			gl.Line += "\n"
		}
		frag.Lines = append(frag.Lines, gl)
	}
	return frag
}

// String returns h as unified-diff text: its "@@" header line and its lines.
func (h Hunk) String() string {
	return h.fragment().String()
}
