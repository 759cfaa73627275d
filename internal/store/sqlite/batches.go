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

// CreateBatch persists a batch and its pending items; see store.Batches.
func (s *Store) CreateBatch(ctx context.Context, b *store.Batch, items []store.BatchItem) error {
	if err := b.CheckIn(s.cfg.Region); err != nil {
		return err
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		_, err := s.exec(tx, `INSERT INTO batches (`+store.BatchCols+`) VALUES (?,?,?,?,?,?,?,?,?,?)`,
			b.ID, b.Tenant, b.Region, b.Provider, b.State, ns(b.Deadline), b.MaxAttempts, []byte(b.Summary),
			ns(b.CreatedAt), ns(b.UpdatedAt))
		if err != nil {
			if strings.Contains(err.Error(), "UNIQUE constraint failed") {
				return fmt.Errorf("batch %s already exists: %w", b.ID, store.ErrConflict)
			}
			return err
		}
		for _, it := range items {
			if _, err := s.exec(tx, `INSERT INTO batch_items (`+store.BatchItemCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
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

// PlanBatchChunk records a chunk and moves its pending items into it; see
// store.Batches.
func (s *Store) PlanBatchChunk(ctx context.Context, c store.BatchChunk, customIDs []string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := s.exec(tx, `INSERT INTO batch_chunks (`+store.BatchChunkCols+`) VALUES (?,?,?,?,?)`,
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

// SettleBatchItem applies one guarded item write (a group of one); see
// store.Batches.
func (s *Store) SettleBatchItem(ctx context.Context, p store.SettleBatchItemParams) (bool, error) {
	applied, err := s.SettleBatchItems(ctx, []store.SettleBatchItemParams{p})
	return err == nil && applied[0], err
}
