package store

import "github.com/ratelane/ratelane/internal/job"

// This file holds what both drivers do with a query's rows, so the loop is
// written once.

// Rows is a query's result as both drivers see it: database/sql's
// *sql.Rows and pgx.Rows both have these methods. Closing stays with the
// caller (the two Close methods differ).
type Rows interface {
	Next() bool
	Err() error
}

// CollectRows calls scan once for each row of rows and returns what it
// made, stopping at the first error; rows.Err is the last word.
func CollectRows[T any](rows Rows, scan func() (T, error)) ([]T, error) {
	var out []T
	for rows.Next() {
		v, err := scan()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// CollectParents collects the rows of ParentsWithChildrenQuery: for each,
// scan reads the job's columns through a Scan that first reads the row's
// leading column (0 a parent, 1 a child) and passes the rest on.
func CollectParents(rows interface {
	Rows
	Scan(dest ...any) error
}, scan func(r interface{ Scan(dest ...any) error }) (*job.Job, error)) (parents, children []*job.Job, err error) {
	for rows.Next() {
		var child int64
		j, err := scan(leading{rows, &child})
		if err != nil {
			return nil, nil, err
		}
		if child == 1 {
			children = append(children, j)
		} else {
			parents = append(parents, j)
		}
	}
	return parents, children, rows.Err()
}

// leading scans a row's first column into first and the rest into
// Scan's dest.
type leading struct {
	r     interface{ Scan(dest ...any) error }
	first any
}

func (l leading) Scan(dest ...any) error { return l.r.Scan(append([]any{l.first}, dest...)...) }
