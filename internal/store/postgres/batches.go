package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/store"
)

const (
	batchCols     = `id, tenant, region, provider, state, deadline, max_attempts, summary, created_at, updated_at`
	batchItemCols = `batch_id, custom_id, job_id, object_id, idx, state, attempts, chunk_key, disposition, reason, result, updated_at`
	batchChunkCol = `chunk_key, batch_id, state, record, updated_at`
)

func scanBatch(r pgx.Row) (*store.Batch, error) {
	var b store.Batch
	var deadline, created, updated, maxAttempts int64
	if err := r.Scan(&b.ID, &b.Tenant, &b.Region, &b.Provider, &b.State, &deadline, &maxAttempts, &b.Summary,
		&created, &updated); err != nil {
		return nil, err
	}
	b.MaxAttempts = int(maxAttempts)
	b.Deadline, b.CreatedAt, b.UpdatedAt = tm(deadline), tm(created), tm(updated)
	return &b, nil
}

func scanBatchItem(r pgx.Row) (store.BatchItem, error) {
	var it store.BatchItem
	var idx, attempts, updated int64
	err := r.Scan(&it.BatchID, &it.CustomID, &it.JobID, &it.ObjectID, &idx, &it.State, &attempts, &it.ChunkKey,
		&it.Disposition, &it.Reason, &it.Result, &updated)
	it.Index, it.Attempts, it.UpdatedAt = int(idx), int(attempts), tm(updated)
	return it, err
}

func scanBatchChunk(r pgx.Row) (store.BatchChunk, error) {
	var c store.BatchChunk
	var updated int64
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
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO batches (`+batchCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)`,
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

// GetBatch returns one batch with its counts; see store.Batches.
func (s *Store) GetBatch(ctx context.Context, id string) (*store.Batch, error) {
	b, err := s.GetBatchHead(ctx, id)
	if err != nil {
		return nil, err
	}
	return b, s.countBatch(ctx, b)
}

func (s *Store) countBatch(ctx context.Context, b *store.Batch) error {
	rows, err := s.pool.Query(ctx, `SELECT state, count(*) FROM batch_items WHERE batch_id = $1 GROUP BY state`, b.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	b.Counts = store.BatchCounts{}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return err
		}
		b.Counts.Add(st, int(n))
	}
	return rows.Err()
}

// ListBatches returns batches newest first; see store.Batches.
func (s *Store) ListBatches(ctx context.Context, p store.BatchListParams) ([]*store.Batch, error) {
	q, args := `SELECT `+batchCols+` FROM batches WHERE true`, []any{}
	add := func(cond string, v any) {
		args = append(args, v)
		q += fmt.Sprintf(` AND `+cond, len(args))
	}
	if p.Before != "" {
		add(`id < $%d`, p.Before)
	}
	if p.Tenant != "" {
		add(`tenant = $%d`, p.Tenant)
	}
	if p.State != "" {
		add(`state = $%d`, p.State)
	}
	args = append(args, store.PageSize(p.Limit))
	q += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, q, args...)
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
	tag, err := s.pool.Exec(ctx, `UPDATE batches SET state = $1, updated_at = $2 WHERE id = $3 AND state = ANY($4)`,
		to, ns(now), id, from)
	if err != nil || tag.RowsAffected() > 0 {
		return err
	}
	var st string
	if err := s.pool.QueryRow(ctx, `SELECT state FROM batches WHERE id = $1`, id).Scan(&st); errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("batch %s: %w", id, store.ErrNotFound)
	} else if err != nil {
		return err
	}
	return fmt.Errorf("batch %s is %s, not one of %v: %w", id, st, from, store.ErrConflict)
}

// BatchItems returns a batch's items in custom_id order; see store.Batches.
func (s *Store) BatchItems(ctx context.Context, p store.BatchItemParams) ([]store.BatchItem, error) {
	q, args := `SELECT `+batchItemCols+` FROM batch_items WHERE batch_id = $1 AND custom_id > $2`, []any{p.BatchID, p.After}
	if p.JobID != "" {
		args = append(args, p.JobID)
		q += fmt.Sprintf(` AND job_id = $%d`, len(args))
	}
	if p.State != "" {
		args = append(args, p.State)
		q += fmt.Sprintf(` AND state = $%d`, len(args))
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 1000 // a driver reads a whole chunk's items, far more than a listing page
	}
	args = append(args, limit)
	q += fmt.Sprintf(` ORDER BY custom_id LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return store.CollectRows(rows, func() (store.BatchItem, error) { return scanBatchItem(rows) })
}

// PlanBatchChunk records a chunk and moves its pending items into it; see
// store.Batches.
func (s *Store) PlanBatchChunk(ctx context.Context, c store.BatchChunk, customIDs []string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO batch_chunks (`+batchChunkCol+`) VALUES ($1,$2,$3,$4,$5)`,
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
	if err := s.pool.QueryRow(ctx, `SELECT state FROM batch_chunks WHERE chunk_key = $1`, c.Key).Scan(&st); errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("chunk %s: %w", c.Key, store.ErrNotFound)
	} else if err != nil {
		return err
	}
	return fmt.Errorf("chunk %s is %s, not %s: %w", c.Key, st, from, store.ErrConflict)
}

// BatchChunks returns a batch's chunks in key order; see store.Batches.
func (s *Store) BatchChunks(ctx context.Context, batchID string) ([]store.BatchChunk, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+batchChunkCol+` FROM batch_chunks WHERE batch_id = $1 ORDER BY chunk_key`, batchID)
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
