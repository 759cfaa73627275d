package store

import (
	"context"
	"errors"

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
	keys := map[string]admission.Config{}
	ve := &job.ValidationError{}
	for _, j := range jobs {
		for _, name := range j.LimitKeys {
			c, ok := keys[name]
			if !ok {
				k, err := st.GetLimit(ctx, name)
				switch {
				case errors.Is(err, ErrNotFound):
					c = def
					c.Name = name
				case err != nil:
					return err
				default:
					c = k.Config
				}
				keys[name] = c
			}
			if err := c.CheckCost(j.Cost); err != nil {
				ve.Fields = append(ve.Fields, job.FieldError{Field: "cost", Detail: err.Error()})
				return ve
			}
		}
	}
	return nil
}
