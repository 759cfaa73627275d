package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestMigrateInlineHistory is storetest.RunInlineHistoryMigration on SQLite.
func TestMigrateInlineHistory(t *testing.T) {
	t.Parallel()
	s := OpenTest(t, Config{})
	storetest.RunInlineHistoryMigration(t, s, func(ctx context.Context, id string) ([]int, error) {
		down, err := migrations.ReadFile("migrations/0005_inline_history.down.sql")
		if err != nil {
			return nil, err
		}
		var seqs []int
		err = s.onWriterConn(func(c *sql.Conn) error {
			if _, err := c.ExecContext(ctx, string(down)); err != nil {
				return fmt.Errorf("down 0005: %w", err)
			}
			if _, err := c.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = 5`); err != nil {
				return err
			}
			rows, err := c.QueryContext(ctx, `SELECT seq FROM job_attempts WHERE job_id = ? ORDER BY seq`, id)
			if err != nil {
				return err
			}
			defer rows.Close()
			seqs, err = store.CollectRows(rows, func() (n int, err error) { return n, rows.Scan(&n) })
			return err
		})
		return seqs, err
	}, s.Migrate)
}
