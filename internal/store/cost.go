package store

import (
	"context"
	"maps"
	"slices"

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

type costCheckKey struct{}

// WithCostCheck asks Insert to do CheckCosts' check itself, inside its own
// write, and to refuse with CheckCosts' error, inserting nothing, what
// CheckCosts would refuse: the check then costs a PostgreSQL insert no
// round trip of its own (a LimitConfigs read before the insert was one,
// and its own transaction; docs/benchmarks.md, "Session 29 (s29h4)").
// Keys not created yet are checked against Insert's def, as CheckCosts
// checks them against its def. The configuration checked is the one the
// insert's write sees: a reconfiguration committed after it is not, as
// one committed after CheckCosts' read is not.
func WithCostCheck(ctx context.Context) context.Context {
	return context.WithValue(ctx, costCheckKey{}, true)
}

// CostCheck reports whether WithCostCheck marked ctx.
func CostCheck(ctx context.Context) bool {
	v, _ := ctx.Value(costCheckKey{}).(bool)
	return v
}

// CostBounded reports whether every job that names a limit key has a cost
// from 1 to admission.MaxCost, the part of CheckCosts that needs no key:
// with it, a key refuses a job exactly when the job's cost (1 on a
// per-start key) is above the key's admission.Config.MaxCost, which a
// driver can check in SQL. When it is false CheckCosts refuses something.
func CostBounded(jobs []*job.Job) bool {
	for _, j := range jobs {
		if len(j.LimitKeys) > 0 && (j.Cost < 1 || j.Cost > admission.MaxCost) {
			return false
		}
	}
	return true
}

// MaxCosts returns each key the jobs name with the largest cost of a job
// naming it, and their names sorted: with CostBounded, what a driver's
// check in SQL compares with each key's configuration.
func MaxCosts(jobs []*job.Job) (names []string, costs []int64) {
	most := map[string]int64{}
	for _, j := range jobs {
		for _, name := range j.LimitKeys {
			if c, ok := most[name]; !ok || j.Cost > c {
				most[name] = j.Cost
			}
		}
	}
	names = slices.Sorted(maps.Keys(most))
	costs = make([]int64, len(names))
	for i, n := range names {
		costs[i] = most[n]
	}
	return names, costs
}
