// Package chunk splits a parsed diff into parts that each fit a reviewer's
// token budget, so that a large review becomes several child jobs.
//
// Tokens are estimated, not counted: EstimateTokens assumes about
// BytesPerToken bytes per token, which is close for code and English with
// the tokenizers ratelane's providers use and needs no model-specific
// tables. Callers who need a margin should lower MaxTokens.
//
// Split never splits a hunk unless that hunk alone exceeds the budget;
// then it cuts the hunk at line boundaries and gives every piece its own
// recomputed hunk header, so each part stays a valid unified diff that
// diff.Parse accepts.
package chunk

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/ratelane/ratelane/internal/review/diff"
)

// BytesPerToken is the estimate behind EstimateTokens.
const BytesPerToken = 4

// DefaultMaxTokens is the budget used when Options.MaxTokens is zero.
const DefaultMaxTokens = 8000

// minMaxTokens is the smallest accepted budget: below it even one file
// header and one hunk header may not fit.
const minMaxTokens = 64

// FastContext is the number of unchanged lines kept on each side of a run of
// changed lines in ModeFast, as with git diff -U1.
const FastContext = 1

// Mode selects how much of each hunk a part shows.
type Mode string

const (
	// ModeFull keeps every hunk as it is in the diff, context lines
	// included. It is the default.
	ModeFull Mode = "full"
	// ModeFast keeps changed lines (added and deleted) and at most
	// FastContext unchanged lines before and after each run of changes;
	// runs whose context windows touch or overlap stay in one hunk, as with
	// git diff -U1. It spends fewer tokens and gives the reviewer less to
	// go on.
	ModeFast Mode = "fast"
)

// Options configures Split. The zero value is valid: see WithDefaults.
type Options struct {
	// MaxTokens is the estimated-token budget of one part; 0 means
	// DefaultMaxTokens. A part exceeds it only when a single line, or a
	// run of unchanged lines with no change inside, is itself larger.
	MaxTokens int
	// Mode is ModeFull or ModeFast; empty means ModeFull.
	Mode Mode
}

// WithDefaults returns o with zero fields replaced by their defaults.
func (o Options) WithDefaults() Options {
	o.MaxTokens = cmp.Or(o.MaxTokens, DefaultMaxTokens)
	o.Mode = cmp.Or(o.Mode, ModeFull)
	return o
}

func (o Options) validate() error {
	if o.MaxTokens < minMaxTokens {
		return fmt.Errorf("chunk: MaxTokens must be at least %d, got %d", minMaxTokens, o.MaxTokens)
	}
	if o.Mode != ModeFull && o.Mode != ModeFast {
		return fmt.Errorf("chunk: Mode must be %q or %q", ModeFull, ModeFast)
	}
	return nil
}

// LineRange is an inclusive range of new-side line numbers.
type LineRange struct {
	Start, End int
}

// FileSpan says which new-side lines of one file a part shows. Ranges is
// empty for a file shown by its header only (binary, deleted, pure rename).
type FileSpan struct {
	Path   string
	Ranges []LineRange
}

// Part is one reviewable piece of a diff.
type Part struct {
	// Index is the 0-based position of the part in Split's result.
	Index int
	// Text is the part as unified-diff text; it parses with diff.Parse.
	Text string
	// Tokens is EstimateTokens(Text).
	Tokens int
	// Files lists the files in the part, in diff order.
	Files []FileSpan
}

// EstimateTokens returns the estimated token count of s: its length in
// bytes divided by BytesPerToken, rounded up.
func EstimateTokens(s string) int {
	return (len(s) + BytesPerToken - 1) / BytesPerToken
}

// ErrEmpty is returned by Split for a nil diff.
var ErrEmpty = errors.New("chunk: nil diff")

// Split divides d into parts of at most opts.MaxTokens estimated tokens.
// Files and hunks keep their order; hunks of one file may end up in
// several parts, each with the file's header. Deleted files are rendered
// header-only, because no finding may point into them, and binary files
// without their patch data.
func Split(d *diff.Diff, opts Options) ([]Part, error) {
	if d == nil {
		return nil, ErrEmpty
	}
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	p := &packer{maxBytes: opts.MaxTokens * BytesPerToken}
	for _, f := range d.Files {
		p.addFile(f, hunksFor(f, opts.Mode))
	}
	p.flush()
	return p.parts, nil
}

// hunksFor returns the hunks of f that a part shows in the given mode.
func hunksFor(f *diff.File, mode Mode) []diff.Hunk {
	if f.IsDeleted {
		return nil
	}
	if mode == ModeFast {
		return fastHunks(f.Hunks)
	}
	return f.Hunks
}

// spanOf returns the new-side ranges of hunks.
func spanOf(path string, hunks []diff.Hunk) FileSpan {
	s := FileSpan{Path: path}
	for _, h := range hunks {
		if h.NewLines > 0 {
			s.Ranges = append(s.Ranges, LineRange{Start: h.NewStart, End: h.NewStart + h.NewLines - 1})
		}
	}
	return s
}

// renderedSize is the byte size of f rendered with hunks.
func renderedSize(f *diff.File, hunks []diff.Hunk) int {
	return len(f.Render(hunks))
}
