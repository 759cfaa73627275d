// Package report renders review findings for the tools that consume them:
// reviewdog (rdjsonl), code-scanning UIs (SARIF 2.1.0) and people (a text
// table). Writers take findings already verified and aggregated; they do
// no filtering of their own.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/ratelane/ratelane/internal/review/finding"
)

// ToolName is the tool and source name written into every format.
const ToolName = "ratelane"

// messageWithSuggestion appends the suggestion, when there is one, because
// neither rdjsonl nor SARIF has a field for a prose fix.
func messageWithSuggestion(f finding.Finding) string {
	if f.Suggestion == nil || *f.Suggestion == "" {
		return f.Message
	}
	return f.Message + "\nSuggestion: " + *f.Suggestion
}

type rdPosition struct {
	Line int `json:"line"`
}

type rdRange struct {
	Start rdPosition  `json:"start"`
	End   *rdPosition `json:"end,omitempty"`
}

type rdDiagnostic struct {
	Message  string `json:"message"`
	Location struct {
		Path  string  `json:"path"`
		Range rdRange `json:"range"`
	} `json:"location"`
	Severity string            `json:"severity"`
	Source   map[string]string `json:"source"`
	Code     map[string]string `json:"code"`
}

// WriteRDJSONL writes findings as reviewdog Diagnostic JSON lines (the
// rdjsonl format, `reviewdog -f=rdjsonl`), one object per line.
func WriteRDJSONL(w io.Writer, findings []finding.Finding) error {
	enc := json.NewEncoder(w)
	for _, f := range findings {
		var d rdDiagnostic
		d.Message = messageWithSuggestion(f)
		d.Location.Path = f.Path
		d.Location.Range.Start.Line = f.Line
		if f.EndLine != nil {
			d.Location.Range.End = &rdPosition{Line: *f.EndLine}
		}
		d.Severity = strings.ToUpper(string(f.Severity))
		d.Source = map[string]string{"name": ToolName}
		d.Code = map[string]string{"value": string(f.Category)}
		if err := enc.Encode(d); err != nil {
			return fmt.Errorf("write rdjsonl: %w", err)
		}
	}
	return nil
}

// sarifLevel maps a severity to a SARIF result level.
func sarifLevel(s finding.Severity) string {
	switch s {
	case finding.SeverityError:
		return "error"
	case finding.SeverityWarning:
		return "warning"
	}
	return "note"
}

// fileURI turns a repository-relative path into a relative URI reference,
// escaping each segment (spaces, '#', '?').
func fileURI(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// WriteText writes findings as an aligned, human-readable table with the
// columns SEVERITY, LOCATION, CATEGORY and MESSAGE. Control characters in
// paths and messages are replaced by spaces so that model text cannot
// break the layout or drive the terminal.
func WriteText(w io.Writer, findings []finding.Finding) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEVERITY\tLOCATION\tCATEGORY\tMESSAGE")
	for _, f := range findings {
		loc := fmt.Sprintf("%s:%d", f.Path, f.Line)
		if f.EndLine != nil && *f.EndLine != f.Line {
			loc += fmt.Sprintf("-%d", *f.EndLine)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Severity, clean(loc), f.Category, clean(f.Message))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write text: %w", err)
	}
	return nil
}

func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}
