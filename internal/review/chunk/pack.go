package chunk

import (
	"github.com/ratelane/ratelane/internal/review/diff"
)

// hunkHeaderReserve is the room kept for a piece's "@@ -a,b +c,d @@"
// header, on top of the section text it repeats.
const hunkHeaderReserve = 64

// pending is one file's contribution to the part being built.
type pending struct {
	file  *diff.File
	hunks []diff.Hunk
}

// packer builds parts greedily: it keeps adding hunks to the current part
// until the next one would not fit, then starts a new part.
type packer struct {
	maxBytes int
	parts    []Part
	cur      []pending
	curBytes int
}

// addFile adds f with the hunks to show, splitting any hunk that alone
// exceeds the budget.
func (p *packer) addFile(f *diff.File, hunks []diff.Hunk) {
	if len(hunks) == 0 {
		p.add(f, nil, renderedSize(f, nil))
		return
	}
	for _, h := range hunks {
		if renderedSize(f, []diff.Hunk{h}) <= p.maxBytes {
			p.addHunk(f, h)
			continue
		}
		overhead := renderedSize(f, []diff.Hunk{h}) - len(h.String())
		budget := p.maxBytes - overhead - len(h.Section) - hunkHeaderReserve
		for _, piece := range splitHunk(h, budget) {
			p.addHunk(f, piece)
		}
	}
}

// addHunk adds one hunk of f, starting a new part first when it does not
// fit in the current one.
func (p *packer) addHunk(f *diff.File, h diff.Hunk) {
	p.add(f, &h, p.cost(f, h))
}

// cost is what adding h of f to the current part takes: the hunk alone
// when f is already in the part, the hunk with f's headers otherwise.
func (p *packer) cost(f *diff.File, h diff.Hunk) int {
	if n := len(p.cur); n > 0 && p.cur[n-1].file == f {
		return len(h.String())
	}
	return renderedSize(f, []diff.Hunk{h})
}

func (p *packer) add(f *diff.File, h *diff.Hunk, cost int) {
	if len(p.cur) > 0 && p.curBytes+cost > p.maxBytes {
		p.flush()
		if h != nil {
			cost = p.cost(f, *h)
		}
	}
	p.curBytes += cost
	n := len(p.cur)
	if n == 0 || p.cur[n-1].file != f {
		p.cur = append(p.cur, pending{file: f})
		n++
	}
	if h != nil {
		p.cur[n-1].hunks = append(p.cur[n-1].hunks, *h)
	}
}

// flush turns the current contents into a Part.
func (p *packer) flush() {
	if len(p.cur) == 0 {
		return
	}
	part := Part{Index: len(p.parts)}
	var text []byte
	for _, pe := range p.cur {
		text = append(text, pe.file.Render(pe.hunks)...)
		part.Files = append(part.Files, spanOf(pe.file.Path(), pe.hunks))
	}
	part.Text = string(text)
	part.Tokens = EstimateTokens(part.Text)
	p.parts = append(p.parts, part)
	p.cur, p.curBytes = nil, 0
}

// splitHunk cuts h at line boundaries into pieces of about budget bytes of
// lines. A piece is only closed once it holds a change, because a hunk of
// context alone is not a valid hunk; a trailing run of context joins the
// last piece. So a piece exceeds budget only when a single line, or a run
// of context lines, does.
func splitHunk(h diff.Hunk, budget int) []diff.Hunk {
	var out []diff.Hunk
	start, lastStart, size, changed := 0, 0, 0, false
	for i, l := range h.Lines {
		n := lineBytes(l)
		if changed && i > start && size+n > budget {
			out = append(out, h.Slice(start, i))
			lastStart, start, size, changed = start, i, 0, false
		}
		size += n
		if l.Kind == diff.Added || l.Kind == diff.Deleted {
			changed = true
		}
	}
	if changed || len(out) == 0 {
		return append(out, h.Slice(start, len(h.Lines)))
	}
	out[len(out)-1] = h.Slice(lastStart, len(h.Lines))
	return out
}

// lineBytes is the rendered size of l: marker, text, newline, and the
// "\ No newline at end of file" line when present.
func lineBytes(l diff.Line) int {
	n := len(l.Text) + 2
	if l.NoEOL {
		n += len("\\ No newline at end of file\n")
	}
	return n
}

// fastHunks trims each hunk to its changed lines with FastContext unchanged
// lines around each run of changes; windows that touch stay one hunk.
func fastHunks(hunks []diff.Hunk) []diff.Hunk {
	var out []diff.Hunk
	for _, h := range hunks {
		keep := make([]bool, len(h.Lines))
		for i, l := range h.Lines {
			if l.Kind != diff.Added && l.Kind != diff.Deleted {
				continue
			}
			for j := max(0, i-FastContext); j <= min(len(h.Lines)-1, i+FastContext); j++ {
				keep[j] = true
			}
		}
		for i := 0; i < len(keep); {
			if !keep[i] {
				i++
				continue
			}
			j := i
			for j < len(keep) && keep[j] {
				j++
			}
			out = append(out, h.Slice(i, j))
			i = j
		}
	}
	return out
}
