package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/store"
)

const (
	batchCols     = `id, tenant, region, provider, state, deadline, max_attempts, summary, created_at, updated_at`
	batchItemCols = `batch_id, custom_id, job_id, object_id, idx, state, attempts, chunk_key, disposition, reason, result, updated_at`
	batchChunkCol = `chunk_key, batch_id, state, record, updated_at`
)

func scanBatch(r scanner) (*store.Batch, error) {
	var b store.Batch
	var deadline, created, updated sql.NullInt64
	if err := r.Scan(&b.ID, &b.Tenant, &b.Region, &b.Provider, &b.State, &deadline, &b.MaxAttempts, &b.Summary,
		&created, &updated); err != nil {
		return nil, err
	}
	b.Deadline, b.CreatedAt, b.UpdatedAt = tm(deadline), tm(created), tm(updated)
	return &b, nil
}

func scanBatchItem(r scanner) (store.BatchItem, error) {
	var it store.BatchItem
	var updated sql.NullInt64
	var result []byte
	err := r.Scan(&it.BatchID, &it.CustomID, &it.JobID, &it.ObjectID, &it.Index, &it.State, &it.Attempts, &it.ChunkKey,
		&it.Disposition, &it.Reason, &result, &updated)
	if result != nil {
		it.Result = result
	}
	it.UpdatedAt = tm(updated)
	return it, err
}

func scanBatchChunk(r scanner) (store.BatchChunk, error) {
	var c store.BatchChunk
	var updated sql.NullInt64
	err := r.Scan(&c.Key, &c.BatchID, &c.State, &c.Record, &updated)
	c.UpdatedAt = tm(updated)
	return c, err
}

// CreateBatch persists a batch and its pending items; see store.Batches.
func (s *Store) CreateBatch(ctx context.Context, b *store.Batch, items []store.BatchItem) error {
	if err := b.Check(); err != nil {
		return err
	}
	if b.Region != s.cfg.Region {
		return fmt.Errorf("batch %s: region %q does not belong in the %q store", b.ID, b.Region, s.cfg.Region)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := s.exec(tx, `INSERT INTO batches (`+batchCols+`) VALUES (?,?,?,?,?,?,?,?,?,?)`,
			b.ID, b.Tenant, b.Region, b.Provider, b.State, ns(b.Deadline), b.MaxAttempts, []byte(b.Summary),
			ns(b.CreatedAt), ns(b.UpdatedAt))
		if err != nil {
			if strings.Contains(err.Error(), "UNIQUE constraint failed") {
				return fmt.Errorf("batch %s already exists: %w", b.ID, store.ErrConflict)
			}
			return err
		}
		for _, it := range items {
			if _, err := s.exec(tx, `INSERT INTO batch_items (`+batchItemCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
				b.ID, it.CustomID, it.JobID, it.ObjectID, it.Index, store.ItemPending, 0, "", "", "", nil, ns(b.CreatedAt)); err != nil {
				if strings.Contains(err.Error(), "UNIQUE constraint failed") {
					return fmt.Errorf("batch %s: custom_id %q repeats: %w", b.ID, it.CustomID, store.ErrConflict)
				}
				return err
			}
		}
		return nil
	})
}

// GetBatch returns one batch with its counts; see store.Batches.
func (s *Store) GetBatch(ctx context.Context, id string) (*store.Batch, error) {
	b, err := s.GetBatchHead(ctx, id)
	if err != nil {
		return nil, err
	}
	return b, s.countBatch(ctx, b)
}

func (s *Store) countBatch(ctx context.Context, b *store.Batch) error {
	rows, err := s.rdb.QueryContext(ctx, `SELECT state, count(*) FROM batch_items WHERE batch_id = ? GROUP BY state`, b.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	b.Counts = store.BatchCounts{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return err
		}
		b.Counts.Add(st, n)
	}
	return rows.Err()
}

// ListBatches returns batches newest first; see store.Batches.
func (s *Store) ListBatches(ctx context.Context, p store.BatchListParams) ([]*store.Batch, error) {
	q, args := `SELECT `+batchCols+` FROM batches WHERE 1=1`, []any{}
	if p.Before != "" {
		q, args = q+` AND id < ?`, append(args, p.Before)
	}
	if p.Tenant != "" {
		q, args = q+` AND tenant = ?`, append(args, p.Tenant)
	}
	if p.State != "" {
		q, args = q+` AND state = ?`, append(args, p.State)
	}
	q, args = q+` ORDER BY id DESC LIMIT ?`, append(args, store.PageSize(p.Limit))
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	bs, err := store.CollectRows(rows, func() (*store.Batch, error) { return scanBatch(rows) })
	rows.Close()
	if err != nil {
		return nil, err
	}
	for _, b := range bs {
		if err := s.countBatch(ctx, b); err != nil {
			return nil, err
		}
	}
	return bs, nil
}

// SetBatchState moves a batch between states, guarded; see store.Batches.
func (s *Store) SetBatchState(ctx context.Context, id string, from []string, to string, now time.Time) error {
	if len(from) == 0 {
		return errors.New("set batch state: no from states")
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		args := []any{to, ns(now), id}
		for _, f := range from {
			args = append(args, f)
		}
		res, err := tx.Exec(`UPDATE batches SET state = ?, updated_at = ? WHERE id = ? AND state IN (?`+
			strings.Repeat(",?", len(from)-1)+`)`, args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		var st string
		if err := s.queryRow(tx, `SELECT state FROM batches WHERE id = ?`, id).Scan(&st); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("batch %s: %w", id, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		return fmt.Errorf("batch %s is %s, not one of %v: %w", id, st, from, store.ErrConflict)
	})
}

// BatchItems returns a batch's items in custom_id order; see store.Batches.
func (s *Store) BatchItems(ctx context.Context, p store.BatchItemParams) ([]store.BatchItem, error) {
	q, args := `SELECT `+batchItemCols+` FROM batch_items WHERE batch_id = ? AND custom_id > ?`, []any{p.BatchID, p.After}
	if p.JobID != "" {
		q, args = q+` AND job_id = ?`, append(args, p.JobID)
	}
	if p.State != "" {
		q, args = q+` AND state = ?`, append(args, p.State)
	}
	q, args = q+` ORDER BY custom_id LIMIT ?`, append(args, batchPage(p.Limit))
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, func() (store.BatchItem, error) { return scanBatchItem(rows) })
}

// batchPage bounds a page of batch items: a driver reads a whole chunk's
// items, which may be far more than a listing page.
func batchPage(limit int) int {
	if limit <= 0 {
		return 1000
	}
	return limit
}

// PlanBatchChunk records a chunk and moves its pending items into it; see
// store.Batches.
func (s *Store) PlanBatchChunk(ctx context.Context, c store.BatchChunk, customIDs []string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := s.exec(tx, `INSERT INTO batch_chunks (`+batchChunkCol+`) VALUES (?,?,?,?,?)`,
			c.Key, c.BatchID, c.State, []byte(c.Record), ns(c.UpdatedAt)); err != nil {
			if strings.Contains(err.Error(), "UNIQUE constraint failed") {
				return fmt.Errorf("chunk %s already exists: %w", c.Key, store.ErrConflict)
			}
			return err
		}
		for _, id := range customIDs {
			res, err := s.exec(tx, `UPDATE batch_items SET state = 'submitted', chunk_key = ?, attempts = attempts + 1,
				updated_at = ? WHERE batch_id = ? AND custom_id = ? AND state = 'pending'`, c.Key, ns(c.UpdatedAt), c.BatchID, id)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return fmt.Errorf("chunk %s: item %q of batch %s is not pending: %w", c.Key, id, c.BatchID, store.ErrConflict)
			}
		}
		return nil
	})
}

// SaveBatchChunk replaces a chunk record, guarded on its state; see
// store.Batches.
func (s *Store) SaveBatchChunk(ctx context.Context, c store.BatchChunk, from string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := s.exec(tx, `UPDATE batch_chunks SET state = ?, record = ?, updated_at = ? WHERE chunk_key = ? AND state = ?`,
			c.State, []byte(c.Record), ns(c.UpdatedAt), c.Key, from)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		var st string
		if err := s.queryRow(tx, `SELECT state FROM batch_chunks WHERE chunk_key = ?`, c.Key).Scan(&st); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("chunk %s: %w", c.Key, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		return fmt.Errorf("chunk %s is %s, not %s: %w", c.Key, st, from, store.ErrConflict)
	})
}

// BatchChunks returns a batch's chunks in key order; see store.Batches.
func (s *Store) BatchChunks(ctx context.Context, batchID string) ([]store.BatchChunk, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+batchChunkCol+` FROM batch_chunks WHERE batch_id = ? ORDER BY chunk_key`, batchID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, func() (store.BatchChunk, error) { return scanBatchChunk(rows) })
}

// SettleBatchItem applies one guarded item write (a group of one); see
// store.Batches.
func (s *Store) SettleBatchItem(ctx context.Context, p store.SettleBatchItemParams) (bool, error) {
	applied, err := s.SettleBatchItems(ctx, []store.SettleBatchItemParams{p})
	return err == nil && applied[0], err
}
