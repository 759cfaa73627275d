package postgres

import (
	"context"
	"fmt"
	"time"
)

// readyTimeout bounds one Ready probe.
const readyTimeout = 2 * time.Second

// Ready reads one page of the region's jobs table: it fails when the pool
// is closed, the database is unreachable, the schema or table was dropped,
// or the role lost its privileges. It is cheap (one index-free LIMIT 1
// read); callers such as /readyz cache its answer.
func (s *Store) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM jobs LIMIT 1) AS one`).Scan(&n); err != nil {
		return fmt.Errorf("postgres: schema %s cannot be read: %w", s.cfg.Schema, err)
	}
	return nil
}
