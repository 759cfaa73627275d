package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/store"
)

// CreateBatch persists a batch and its pending items; see store.Batches.
func (s *Store) CreateBatch(ctx context.Context, b *store.Batch, items []store.BatchItem) error {
	if err := b.CheckIn(s.cfg.Region); err != nil {
		return err
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO batches (`+store.BatchCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)`,
			b.ID, b.Tenant, b.Region, b.Provider, b.State, ns(b.Deadline), b.MaxAttempts, []byte(b.Summary),
			ns(b.CreatedAt), ns(b.UpdatedAt)); err != nil {
			return err
		}
		rows := make([][]any, len(items))
		for i, it := range items {
			rows[i] = []any{b.ID, it.CustomID, it.JobID, it.ObjectID, int64(it.Index), store.ItemPending, int64(0), "", "", "",
				nil, ns(b.CreatedAt)}
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"batch_items"}, []string{"batch_id", "custom_id", "job_id", "object_id", "idx",
			"state", "attempts", "chunk_key", "disposition", "reason", "result", "updated_at"}, pgx.CopyFromRows(rows))
		return err
	})
	if pgCode(err) == "23505" {
		return fmt.Errorf("batch %s exists or repeats a custom_id: %w", b.ID, store.ErrConflict)
	}
	return err
}

// AbandonBatch removes a batch still marked creating, and its items; see
// store.Batches. CreateBatch here is one transaction and never leaves the
// mark, so this finds nothing unless a single-writer store's file was
// migrated in.
func (s *Store) AbandonBatch(ctx context.Context, id string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM batches WHERE id = $1 AND creating = 1`, id)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// SetBatchState moves a batch between states, guarded; see store.Batches.
func (s *Store) SetBatchState(ctx context.Context, id string, from []string, to string, now time.Time) error {
	if len(from) == 0 {
		return errors.New("set batch state: no from states")
	}
	tag, err := s.pool.Exec(ctx, `UPDATE batches SET state = $1, updated_at = $2 WHERE id = $3 AND creating = 0 AND state = ANY($4)`,
		to, ns(now), id, from)
	if err != nil || tag.RowsAffected() > 0 {
		return err
	}
	var st string
	var creating int64
	err = s.pool.QueryRow(ctx, `SELECT state, creating FROM batches WHERE id = $1`, id).Scan(&st, &creating)
	if errors.Is(err, pgx.ErrNoRows) || creating != 0 {
		return fmt.Errorf("batch %s: %w", id, store.ErrNotFound)
	} else if err != nil {
		return err
	}
	return fmt.Errorf("batch %s is %s, not one of %v: %w", id, st, from, store.ErrConflict)
}

// PlanBatchChunk records a chunk and moves its pending items into it; see
// store.Batches.
func (s *Store) PlanBatchChunk(ctx context.Context, c store.BatchChunk, customIDs []string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO batch_chunks (`+store.BatchChunkCols+`) VALUES ($1,$2,$3,$4,$5)`,
			c.Key, c.BatchID, c.State, []byte(c.Record), ns(c.UpdatedAt)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE batch_items SET state = 'submitted', chunk_key = $1, attempts = attempts + 1,
			updated_at = $2 WHERE batch_id = $3 AND custom_id = ANY($4) AND state = 'pending'`, c.Key, ns(c.UpdatedAt), c.BatchID, customIDs)
		if err != nil {
			return err
		}
		if int(tag.RowsAffected()) != len(customIDs) {
			return fmt.Errorf("chunk %s: %d of its %d items of batch %s are not pending: %w",
				c.Key, len(customIDs)-int(tag.RowsAffected()), len(customIDs), c.BatchID, store.ErrConflict)
		}
		return nil
	})
	if pgCode(err) == "23505" {
		return fmt.Errorf("chunk %s already exists: %w", c.Key, store.ErrConflict)
	}
	return err
}

// SaveBatchChunk replaces a chunk record, guarded on its state; see
// store.Batches.
func (s *Store) SaveBatchChunk(ctx context.Context, c store.BatchChunk, from string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE batch_chunks SET state = $1, record = $2, updated_at = $3 WHERE chunk_key = $4 AND state = $5`,
		c.State, []byte(c.Record), ns(c.UpdatedAt), c.Key, from)
	if err != nil || tag.RowsAffected() > 0 {
		return err
	}
	var st string
	err = s.pool.QueryRow(ctx, `SELECT state FROM batch_chunks WHERE chunk_key = $1`, c.Key).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) { // no such chunk
		st, err = "", nil
	}
	if err != nil {
		return err
	}
	return c.NotSaved(st, from)
}
