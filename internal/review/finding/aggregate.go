package finding

import (
	"cmp"
	"fmt"
	"slices"
)

// DefaultMaxFindings is the per-review cap used when AggregateOptions
// leaves MaxFindings at zero.
const DefaultMaxFindings = 50

// AggregateOptions configures Aggregate. The zero value is valid.
type AggregateOptions struct {
	// MaxFindings caps the findings of one review; 0 means
	// DefaultMaxFindings. Negative values are invalid.
	MaxFindings int
}

// WithDefaults returns o with zero fields replaced by their defaults.
func (o AggregateOptions) WithDefaults() AggregateOptions {
	o.MaxFindings = cmp.Or(o.MaxFindings, DefaultMaxFindings)
	return o
}

func (o AggregateOptions) validate() error {
	if o.MaxFindings < 1 {
		return fmt.Errorf("finding: MaxFindings must be positive, got %d", o.MaxFindings)
	}
	return nil
}

// Aggregated is the result of Aggregate.
type Aggregated struct {
	// Findings are deduplicated, ordered and capped.
	Findings []Finding
	// Capped reports whether findings were dropped by the cap;
	// Dropped says how many.
	Capped  bool
	Dropped int
}

type dedupeKey struct {
	path     string
	line     int
	category Category
}

// Aggregate merges the findings of every part of a review. Findings with
// the same (path, line, category) are one finding: the one with the higher
// severity, then the higher confidence, wins (the first on a full tie). The
// result is ordered by severity (error, warning, info), then path, then
// line, then category, and cut to MaxFindings, so the cap drops the least
// severe findings first.
func Aggregate(parts [][]Finding, opts AggregateOptions) (Aggregated, error) {
	opts = opts.WithDefaults()
	if err := opts.validate(); err != nil {
		return Aggregated{}, err
	}
	best := map[dedupeKey]int{}
	var all []Finding
	for _, fs := range parts {
		for _, f := range fs {
			k := dedupeKey{f.Path, f.Line, f.Category}
			i, seen := best[k]
			switch {
			case !seen:
				best[k] = len(all)
				all = append(all, f)
			case better(f, all[i]):
				all[i] = f
			}
		}
	}
	slices.SortStableFunc(all, compare)
	out := Aggregated{Findings: all}
	if len(all) > opts.MaxFindings {
		out = Aggregated{Findings: all[:opts.MaxFindings:opts.MaxFindings], Capped: true, Dropped: len(all) - opts.MaxFindings}
	}
	return out, nil
}

// better reports whether a should replace b as the kept duplicate.
func better(a, b Finding) bool {
	if ra, rb := a.Severity.Rank(), b.Severity.Rank(); ra != rb {
		return ra > rb
	}
	return a.Confidence > b.Confidence
}

// compare orders findings for Aggregate's result.
func compare(a, b Finding) int {
	return cmp.Or(
		cmp.Compare(b.Severity.Rank(), a.Severity.Rank()),
		cmp.Compare(a.Path, b.Path),
		cmp.Compare(a.Line, b.Line),
		cmp.Compare(a.Category, b.Category),
	)
}
