package provider

import (
	"fmt"
	"strings"

	"github.com/ratelane/ratelane/internal/review/diff"
)

// systemFull and systemFast are the instructions. They hold no customer
// content; the diff goes in the user message only.
const (
	systemFull = `You are a careful senior code reviewer. Review the diff in the user message and report real problems only: bugs, security issues, performance problems, maintainability, tests and docs.
Answer with one JSON object {"findings":[...]} matching the given schema, nothing else.
Each finding is anchored on the NEW side of the diff: "path" is the file path shown after "File:", "line" is the number after "L" of a line marked "+" (added) or " " (context). Never use a line that is not shown.
"evidence" is the exact text of that line, without the line number and marker. "confidence" is between 0 and 1. Use null for end_line and suggestion when not needed.
If there is nothing worth reporting, answer {"findings":[]}.`
	systemFast = `You are a code reviewer under time pressure. The user message lists only the lines a change adds, as "path:line: text".
Report at most 5 findings, only errors and warnings that matter. Answer with one JSON object {"findings":[...]} matching the given schema, nothing else.
"path" and "line" must be copied from a listed line; "evidence" is that line's text exactly. Use null for end_line and suggestion when not needed.
If there is nothing worth reporting, answer {"findings":[]}.`
)

// Prompt returns the system and user messages for a request. Full depth
// shows each hunk with new-side line numbers; fast depth lists the added
// lines only, which costs fewer tokens and gives the model less to go on.
func Prompt(req Request) (system, user string) {
	if req.Depth == DepthFast {
		return systemFast, fastUser(req.Part)
	}
	return systemFull, fullUser(req.Part)
}

func fullUser(d *diff.Diff) string {
	var b strings.Builder
	for _, f := range d.Files {
		if f.IsBinary || f.IsDeleted {
			continue
		}
		fmt.Fprintf(&b, "File: %s\n", f.Path())
		for _, h := range f.Hunks {
			fmt.Fprintf(&b, "@@ -%d,%d +%d,%d @@\n", h.OldStart, h.OldLines, h.NewStart, h.NewLines)
			for _, l := range h.Lines {
				switch l.Kind {
				case diff.Added:
					fmt.Fprintf(&b, "L%d: +%s\n", l.NewLine, l.Text)
				case diff.Context:
					fmt.Fprintf(&b, "L%d:  %s\n", l.NewLine, l.Text)
				case diff.Deleted:
					fmt.Fprintf(&b, "     -%s\n", l.Text)
				}
			}
		}
	}
	return b.String()
}

func fastUser(d *diff.Diff) string {
	var b strings.Builder
	for _, e := range d.Entries() {
		if e.Kind == diff.Added {
			fmt.Fprintf(&b, "%s:%d: %s\n", e.Path, e.Line, e.Text)
		}
	}
	return b.String()
}
