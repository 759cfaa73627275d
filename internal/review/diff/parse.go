package diff

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// maxLineNumber bounds hunk positions so that line arithmetic cannot
// overflow; no reviewable file has a billion lines.
const maxLineNumber = 1 << 30

// ParseError reports malformed diff text. Its message holds an input line
// number and a fixed reason, never diff content, so it is safe to log or
// return to a client. The underlying parser error, which may quote the
// input, is available through errors.Unwrap for local debugging only.
type ParseError struct {
	// Line is the 1-based input line where parsing failed, 0 when unknown.
	Line int
	// Reason is a short, content-free description.
	Reason string
	err    error
}

// Error implements error.
func (e *ParseError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("parse diff: line %d: %s", e.Line, e.Reason)
	}
	return "parse diff: " + e.Reason
}

// Unwrap returns the underlying error, which may contain diff content.
func (e *ParseError) Unwrap() error { return e.err }

var gitdiffErrRE = regexp.MustCompile(`^gitdiff: line (\d+): ([^:]*)`)

// wrapParserError turns a go-gitdiff error into a *ParseError whose reason
// is the fixed prefix of the library's message (the part before the first
// colon), which never quotes the input.
func wrapParserError(err error) error {
	pe := &ParseError{Reason: "malformed unified diff", err: err}
	if m := gitdiffErrRE.FindStringSubmatch(err.Error()); m != nil {
		pe.Line, _ = strconv.Atoi(m[1])
		if r := strings.TrimSpace(m[2]); r != "" {
			pe.Reason = r
		}
	}
	return pe
}

// Parse parses a unified diff, as produced by git diff or diff -u. Text
// before the first file header (a commit message) is ignored. It returns
// ErrNoFiles when the input contains no file diff, and a *ParseError when
// the diff is malformed, has hunks that overlap or run backwards, or names
// the same path twice.
func Parse(text []byte) (*Diff, error) {
	files, _, err := gitdiff.Parse(&lineReader{text: string(text)})
	if err != nil {
		return nil, wrapParserError(err)
	}
	if len(files) == 0 {
		return nil, ErrNoFiles
	}
	d := &Diff{byPath: make(map[string]*File, len(files))}
	for i, gf := range files {
		f, err := convertFile(gf)
		if err != nil {
			return nil, &ParseError{Reason: fmt.Sprintf("file %d: %v", i+1, err), err: err}
		}
		if err := d.add(f); err != nil {
			return nil, &ParseError{Reason: fmt.Sprintf("file %d: %v", i+1, err), err: err}
		}
	}
	return d, nil
}

// lineReader gives gitdiff.Parse its input a line at a time, each line a
// slice of one string. gitdiff takes any reader with ReadString and wraps
// any other in a bufio.Reader, which made every parse a 4 KB buffer and
// every line a string of its own: 7 % of the bytes a 10,000-file sweep
// allocated (docs/benchmarks.md, "Session 23 (s23h3)").
type lineReader struct {
	text string
}

// ReadString returns the text up to and including the next delim, or the
// rest of it with io.EOF when there is no delim left (bufio.Reader's
// ReadString).
func (r *lineReader) ReadString(delim byte) (string, error) {
	i := strings.IndexByte(r.text, delim)
	if i < 0 {
		line := r.text
		r.text = ""
		return line, io.EOF
	}
	line := r.text[:i+1]
	r.text = r.text[i+1:]
	return line, nil
}

// Read is io.Reader's, which gitdiff.Parse's signature asks for; it
// reads with ReadString only.
func (r *lineReader) Read(p []byte) (int, error) {
	if r.text == "" {
		return 0, io.EOF
	}
	n := copy(p, r.text)
	r.text = r.text[n:]
	return n, nil
}

var errDuplicatePath = errors.New("duplicate path")

// add indexes f by its path. A path may appear once: two entries for one
// path would make (path, line) lookups ambiguous.
func (d *Diff) add(f *File) error {
	p := f.Path()
	if p == "" {
		return errors.New("missing path")
	}
	if _, dup := d.byPath[p]; dup {
		return errDuplicatePath
	}
	d.byPath[p] = f
	d.Files = append(d.Files, f)
	return nil
}

func convertFile(gf *gitdiff.File) (*File, error) {
	stripTraditionalPrefixes(gf)
	f := &File{
		OldPath:   gf.OldName,
		NewPath:   gf.NewName,
		IsNew:     gf.IsNew,
		IsDeleted: gf.IsDelete,
		IsRenamed: gf.IsRename,
		IsCopied:  gf.IsCopy,
		IsBinary:  gf.IsBinary,
		lines:     make(map[int]lineRef),
	}
	if f.IsNew {
		f.OldPath = ""
	}
	if f.IsDeleted {
		f.NewPath = ""
	}
	if err := checkModes(gf); err != nil {
		return nil, err
	}
	if err := checkPath(f.OldPath); err != nil {
		return nil, err
	}
	if err := checkPath(f.NewPath); err != nil {
		return nil, err
	}
	if !f.IsNew && !f.IsDeleted && !f.IsRenamed && !f.IsCopied && f.OldPath != f.NewPath {
		return nil, errors.New("paths differ without a rename")
	}
	hdr := *gf
	hdr.TextFragments, hdr.BinaryFragment, hdr.ReverseBinaryFragment = nil, nil, nil
	f.header = &hdr
	prevEnd := 0
	for _, frag := range gf.TextFragments {
		h, err := convertHunk(frag)
		if err != nil {
			return nil, err
		}
		if h.NewLines > 0 && h.NewStart <= prevEnd {
			return nil, errors.New("hunks overlap or are out of order")
		}
		if h.NewLines > 0 {
			prevEnd = h.NewStart + h.NewLines - 1
		}
		f.index(len(f.Hunks), h)
		f.Hunks = append(f.Hunks, h)
	}
	return f, nil
}

// maxFileMode is the largest mode git writes: the file-type bits and the
// permission bits of a 16-bit st_mode (regular 100644, executable 100755,
// symlink 120000, gitlink 160000).
const maxFileMode = 0o177777

// checkModes rejects file modes no git tree can hold. go-gitdiff reads a
// mode with a sign ("old mode -1") and keeps it as an unsigned FileMode, so
// Render would write "37777777777", which go-gitdiff then refuses as out of
// range: the part re-parse would fail where the whole diff had passed
// (found by FuzzParse in CI). Refusing here keeps Render's output readable.
func checkModes(gf *gitdiff.File) error {
	if gf.OldMode > maxFileMode || gf.NewMode > maxFileMode {
		return errors.New("file mode out of range")
	}
	return nil
}

// checkPath rejects paths that cannot name a file inside a repository:
// findings, SARIF URIs and reviewers all assume repository-relative paths.
func checkPath(p string) error {
	if strings.HasPrefix(p, "/") {
		return errors.New("absolute path")
	}
	// A name ending in a backslash cannot be written back: git quotes it
	// as "a/x\\", and go-gitdiff reads the escaped backslash before the
	// closing quote as an escaped quote, so Render's output would not
	// parse. Such a name is legal in git but no reviewer, SARIF consumer
	// or finding anchor handles it well; refuse it here, where the error
	// is clear, rather than on a part's re-parse.
	if strings.HasSuffix(p, `\`) {
		return errors.New("path ends with a backslash")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return errors.New("path escapes the repository")
		}
	}
	return nil
}

// stripTraditionalPrefixes removes the "a/" and "b/" prefixes from the
// names of a traditional (non-git) diff, as patch -p1 would. go-gitdiff
// strips them only from git headers. A file with no mode, no object ids and
// no rename or binary marker can only come from a traditional header.
func stripTraditionalPrefixes(gf *gitdiff.File) {
	if gf.OldMode != 0 || gf.NewMode != 0 || gf.OldOIDPrefix != "" || gf.NewOIDPrefix != "" ||
		gf.IsRename || gf.IsCopy || gf.IsBinary {
		return
	}
	for _, name := range []*string{&gf.OldName, &gf.NewName} {
		if rest, ok := strings.CutPrefix(*name, "a/"); ok && rest != "" {
			*name = rest
		} else if rest, ok := strings.CutPrefix(*name, "b/"); ok && rest != "" {
			*name = rest
		}
	}
}

// index records the new-side lines of h, the hi-th hunk of f.
func (f *File) index(hi int, h Hunk) {
	for i, l := range h.Lines {
		if l.Kind != Deleted {
			f.lines[l.NewLine] = lineRef{hunk: hi, idx: i}
		}
	}
}

func convertHunk(frag *gitdiff.TextFragment) (Hunk, error) {
	for _, v := range []int64{frag.OldPosition, frag.OldLines, frag.NewPosition, frag.NewLines} {
		if v < 0 || v > maxLineNumber {
			return Hunk{}, errors.New("hunk position out of range")
		}
	}
	h := Hunk{
		OldStart: int(frag.OldPosition), OldLines: int(frag.OldLines),
		NewStart: int(frag.NewPosition), NewLines: int(frag.NewLines),
		Section: frag.Comment,
		Lines:   make([]Line, 0, len(frag.Lines)),
	}
	if (h.NewLines > 0 && h.NewStart == 0) || (h.OldLines > 0 && h.OldStart == 0) {
		return Hunk{}, errors.New("hunk starts at line 0")
	}
	oldN, newN := h.OldStart, h.NewStart
	if h.OldLines == 0 {
		oldN++ // a side with no lines names the line before the hunk
	}
	if h.NewLines == 0 {
		newN++
	}
	for _, gl := range frag.Lines {
		l := Line{Text: strings.TrimSuffix(gl.Line, "\n"), NoEOL: gl.NoEOL()}
		switch gl.Op {
		case gitdiff.OpAdd:
			l.Kind, l.NewLine = Added, newN
			newN++
		case gitdiff.OpDelete:
			l.Kind, l.OldLine = Deleted, oldN
			oldN++
		default:
			l.Kind, l.OldLine, l.NewLine = Context, oldN, newN
			oldN++
			newN++
		}
		h.Lines = append(h.Lines, l)
	}
	return h, nil
}
