package store

import (
	"context"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
)

// CheckCosts refuses, before anything is inserted, a job whose cost one of
// its limit keys can never admit: above the key's burst or a window's
// limit, above admission.MaxCost, or below 1. Such a job would wait
// forever, or (before admission saturated) freeze a shared key for every
// tenant. Keys not created yet are checked against def, the configuration
// Insert would give them. The error is a *job.ValidationError naming the
// field "cost".
func CheckCosts(ctx context.Context, st Store, jobs []*job.Job, def admission.Config) error {
	// Every key of the call is read at once, configuration only: a
	// GetLimit per key cost a round trip each and, on PostgreSQL, a count
	// of the key's running jobs that the check never used (3.8 M index
	// entries in one throughput run; docs/benchmarks.md, "Session 12
	// (s12h3)").
	var names []string
	seen := map[string]bool{}
	for _, j := range jobs {
		for _, name := range j.LimitKeys {
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	keys, err := st.LimitConfigs(ctx, names)
	if err != nil {
		return err
	}
	ve := &job.ValidationError{}
	for _, j := range jobs {
		for _, name := range j.LimitKeys {
			c, ok := keys[name]
			if !ok {
				c = def
				c.Name = name
			}
			if err := c.CheckCost(j.Cost); err != nil {
				ve.Fields = append(ve.Fields, job.FieldError{Field: "cost", Detail: err.Error()})
				return ve
			}
		}
	}
	return nil
}
