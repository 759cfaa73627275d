// Package finding defines ratelane's code-review finding (schema v1) and the
// checks every finding passes before it is published.
//
// A finding travels three gates, in order:
//
//  1. ValidateOutput parses raw model output and validates it against the
//     embedded JSON Schema (schema.json); failures are *OutputError values
//     that count against a job's schema budget.
//  2. Verify checks each finding against the diff it claims to be about and
//     quarantines those anchored on lines the diff does not show or whose
//     evidence does not match.
//  3. Aggregate merges the findings of all parts of a review, removes
//     duplicates, orders them and caps their number.
//
// Everything here is pure and safe for concurrent use.
package finding

// Severity is how much a finding matters. The zero value is invalid.
type Severity string

const (
	// SeverityError is a defect that should block the change.
	SeverityError Severity = "error"
	// SeverityWarning is a probable problem worth a look.
	SeverityWarning Severity = "warning"
	// SeverityInfo is a remark that needs no action.
	SeverityInfo Severity = "info"
)

// Rank orders severities for sorting and deduplication: error is 3,
// warning 2, info 1 and anything else 0.
func (s Severity) Rank() int {
	switch s {
	case SeverityError:
		return 3
	case SeverityWarning:
		return 2
	case SeverityInfo:
		return 1
	}
	return 0
}

// Category is the kind of problem a finding reports.
type Category string

// The categories of schema v1. Categories lists them in a stable order.
const (
	CategoryBug             Category = "bug"
	CategorySecurity        Category = "security"
	CategoryPerformance     Category = "performance"
	CategoryMaintainability Category = "maintainability"
	CategoryStyle           Category = "style"
	CategoryTest            Category = "test"
	CategoryDocs            Category = "docs"
)

// Categories returns every category of schema v1, in the order of the
// schema's enum. Output formats use it to number their rules.
func Categories() []Category {
	return []Category{CategoryBug, CategorySecurity, CategoryPerformance,
		CategoryMaintainability, CategoryStyle, CategoryTest, CategoryDocs}
}

// Finding is one review comment anchored on the new side of a diff. Its JSON
// form is schema v1 (see Schema). EndLine and Suggestion are optional: nil
// pointers marshal as null, which both schema variants accept.
type Finding struct {
	// Path is the repository-relative path on the new side of the diff.
	Path string `json:"path"`
	// Line is the 1-based new-side line the finding is about.
	Line int `json:"line"`
	// EndLine is the last line of a multi-line finding, nil for one line.
	EndLine *int `json:"end_line"`
	// Severity and Category classify the finding.
	Severity Severity `json:"severity"`
	Category Category `json:"category"`
	// Message says what is wrong and why.
	Message string `json:"message"`
	// Evidence is the verbatim text of the line(s); Verify checks it.
	Evidence string `json:"evidence"`
	// Suggestion says how to fix it, nil when there is no concrete fix.
	Suggestion *string `json:"suggestion"`
	// Confidence is the probability, from 0 to 1, that the finding is right.
	Confidence float64 `json:"confidence"`
}

// LastLine returns EndLine when set and Line otherwise.
func (f Finding) LastLine() int {
	if f.EndLine != nil {
		return *f.EndLine
	}
	return f.Line
}

// Output is the top-level object a model returns: {"findings": [...]}.
type Output struct {
	Findings []Finding `json:"findings"`
}
