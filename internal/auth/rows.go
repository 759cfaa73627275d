package auth

import "time"

// This file holds what both key stores (sqlite, postgres) do with the rows
// they read, so the two drivers differ only in their SQL and types.

// Rows is a key query's result as both drivers see it: database/sql's
// *sql.Rows and pgx.Rows both have these methods. Closing stays with the
// caller (the two Close methods differ).
type Rows interface {
	Next() bool
	Err() error
}

// CollectKeys reads every row of a key listing with scan. The list is never
// nil, so no keys is [] in JSON.
func CollectKeys(rows Rows, scan func() (Record, error)) ([]KeyInfo, error) {
	keys := []KeyInfo{}
	for rows.Next() {
		r, err := scan()
		if err != nil {
			return nil, err
		}
		keys = append(keys, r.KeyInfo)
	}
	return keys, rows.Err()
}

// FromRow completes a Record read from a row: its role, a NULL region
// list as empty, and the times stored as Unix nanoseconds (revoked nil:
// not revoked).
func (r *Record) FromRow(role string, created int64, revoked *int64) {
	r.Role = Role(role)
	if r.Regions == nil {
		r.Regions = []string{}
	}
	r.CreatedAt = time.Unix(0, created).UTC()
	if revoked != nil {
		r.RevokedAt = time.Unix(0, *revoked).UTC()
	}
}
