package store

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
