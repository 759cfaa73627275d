package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/store"
)

// CreateBatch persists a batch and its pending items; see store.Batches.
// A batch-lane batch of more than batchPiece items goes through the writer
// in pieces (writePieces), so that an interactive write waits behind one
// piece, not the manifest's thousand items: the first piece writes the
// batch marked creating, the last clears the mark, and each one after the
// first writes only while the batch is still marked (a batch its drivers
// abandoned meanwhile takes no more items).
func (s *Store) CreateBatch(ctx context.Context, b *store.Batch, items []store.BatchItem) error {
	if err := b.CheckIn(s.cfg.Region); err != nil {
		return err
	}
	// A repeated custom_id is refused before anything is written: found by
	// a later piece, it would leave the earlier ones behind.
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		if seen[it.CustomID] {
			return fmt.Errorf("batch %s: custom_id %q repeats: %w", b.ID, it.CustomID, store.ErrConflict)
		}
		seen[it.CustomID] = true
	}
	n := len(items)
	err := s.writePieces(ctx, n, func(tx *writeTx, lo, hi int) error {
		if err := s.createBatchPiece(tx, b, lo == 0, hi < n); err != nil {
			return err
		}
		for _, it := range items[lo:hi] {
			if _, err := s.exec(tx, `INSERT INTO batch_items (`+store.BatchItemCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
				b.ID, it.CustomID, it.JobID, it.ObjectID, it.Index, store.ItemPending, 0, "", "", "", nil, ns(b.CreatedAt)); err != nil {
				if strings.Contains(err.Error(), "UNIQUE constraint failed") {
					return fmt.Errorf("batch %s: custom_id %q repeats: %w", b.ID, it.CustomID, store.ErrConflict)
				}
				return err
			}
		}
		if createBatchPieceHook != nil {
			createBatchPieceHook(lo)
		}
		return nil
	})
	if err != nil && n > batchPiece && !errors.Is(err, errBatchTaken) {
		// Earlier pieces may have committed: remove them now rather than
		// leave them to the drivers' AbandonBatch, even if ctx ended.
		if _, aerr := s.AbandonBatch(context.WithoutCancel(ctx), b.ID); aerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the part written: %w", aerr))
		}
	}
	if errors.Is(err, errBatchTaken) {
		return fmt.Errorf("batch %s already exists: %w", b.ID, store.ErrConflict)
	}
	return err
}

// createBatchPieceHook, set by this package's tests only, runs at the end
// of each piece of CreateBatch (inside its transaction) with the piece's
// first item: a test holds the writer there.
var createBatchPieceHook func(lo int)

// errBatchTaken is CreateBatch's first piece finding the id taken.
var errBatchTaken = errors.New("batch id taken")

// createBatchPiece writes the batch row's part of one piece of
// CreateBatch: the first piece inserts it (marked creating when more
// pieces follow), a later one checks the mark is still there and the last
// one clears it.
func (s *Store) createBatchPiece(tx *writeTx, b *store.Batch, first, more bool) error {
	creating := 0
	if more {
		creating = 1
	}
	if first {
		_, err := s.exec(tx, `INSERT INTO batches (`+store.BatchCols+`, creating) VALUES (?,?,?,?,?,?,?,?,?,?,?)`,
			b.ID, b.Tenant, b.Region, b.Provider, b.State, ns(b.Deadline), b.MaxAttempts, []byte(b.Summary),
			ns(b.CreatedAt), ns(b.UpdatedAt), creating)
		if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
			return errBatchTaken
		}
		return err
	}
	res, err := s.exec(tx, `UPDATE batches SET creating = ? WHERE id = ? AND creating = 1`, creating, b.ID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("batch %s was abandoned while its items were written: %w", b.ID, store.ErrConflict)
	}
	return nil
}

// AbandonBatch removes a batch still marked creating, and its items; see
// store.Batches.
func (s *Store) AbandonBatch(ctx context.Context, id string) (bool, error) {
	var removed bool
	err := s.write(ctx, func(tx *writeTx) error {
		// The items first: the schema cascades, but a connection opened
		// without foreign_keys would leave them.
		if _, err := s.exec(tx, `DELETE FROM batch_items WHERE batch_id = ? AND EXISTS
			(SELECT 1 FROM batches WHERE id = ? AND creating = 1)`, id, id); err != nil {
			return err
		}
		res, err := s.exec(tx, `DELETE FROM batches WHERE id = ? AND creating = 1`, id)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		removed = n > 0
		return nil
	})
	return removed, err
}

// SetBatchState moves a batch between states, guarded; see store.Batches.
func (s *Store) SetBatchState(ctx context.Context, id string, from []string, to string, now time.Time) error {
	if len(from) == 0 {
		return errors.New("set batch state: no from states")
	}
	return s.write(ctx, func(tx *writeTx) error {
		args := []any{to, ns(now), id}
		for _, f := range from {
			args = append(args, f)
		}
		res, err := tx.Exec(`UPDATE batches SET state = ?, updated_at = ? WHERE id = ? AND creating = 0 AND state IN (?`+
			strings.Repeat(",?", len(from)-1)+`)`, args...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		var st string
		var creating int
		err = s.queryRow(tx, `SELECT state, creating FROM batches WHERE id = ?`, id).Scan(&st, &creating)
		if errors.Is(err, sql.ErrNoRows) || creating != 0 {
			return fmt.Errorf("batch %s: %w", id, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		return fmt.Errorf("batch %s is %s, not one of %v: %w", id, st, from, store.ErrConflict)
	})
}

// PlanBatchChunk records a chunk and moves its pending items into it; see
// store.Batches. A batch-lane chunk of more than batchPiece items is the
// batch lane's one long write that cannot go in pieces (the chunk and its
// items' move are one fact): it is written in a gap in the interactive
// work (writeInGap), not in pieces.
func (s *Store) PlanBatchChunk(ctx context.Context, c store.BatchChunk, customIDs []string) error {
	write := s.write
	if len(customIDs) > batchPiece {
		write = s.writeInGap
	}
	return write(ctx, func(tx *writeTx) error {
		if _, err := s.exec(tx, `INSERT INTO batch_chunks (`+store.BatchChunkCols+`) VALUES (?,?,?,?,?)`,
			c.Key, c.BatchID, c.State, []byte(c.Record), ns(c.UpdatedAt)); err != nil {
			if strings.Contains(err.Error(), "UNIQUE constraint failed") {
				return fmt.Errorf("chunk %s already exists: %w", c.Key, store.ErrConflict)
			}
			return err
		}
		ids, err := json.Marshal(customIDs)
		if err != nil {
			return err
		}
		res, err := s.exec(tx, planItemsSQL, c.Key, ns(c.UpdatedAt), c.BatchID, string(ids))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); int(n) != len(customIDs) {
			// The savepoint (or the transaction) undoes the chunk and the
			// items it moved: the chunk is planned whole or not at all.
			return fmt.Errorf("chunk %s: %d of its %d items of batch %s are not pending: %w",
				c.Key, len(customIDs)-int(n), len(customIDs), c.BatchID, store.ErrConflict)
		}
		return nil
	})
}

// planItemsSQL moves a planned chunk's pending items into it in one
// statement, as PostgreSQL's driver does, rather than one UPDATE per item:
// a 1,000-item chunk is one batch-lane write that cannot be split (the
// chunk and its items are planned together), and the longest of the
// 10,000-file batch-isolation run. Most of its time is SQLite's B-tree
// work, which this leaves; it saves the per-statement calls: the write's
// run 8.4 → 7.4 ms (fastest of 16, interleaved, loaded;
// docs/benchmarks.md, "Session 19 (s19h5)"). A custom id named twice
// moves once, so the count refuses it as the per-item loop did.
const planItemsSQL = `UPDATE batch_items SET state = 'submitted', chunk_key = ?, attempts = attempts + 1, updated_at = ?
	WHERE batch_id = ? AND state = 'pending' AND custom_id IN (SELECT value FROM json_each(?))`

// SaveBatchChunk replaces a chunk record, guarded on its state; see
// store.Batches.
func (s *Store) SaveBatchChunk(ctx context.Context, c store.BatchChunk, from string) error {
	return s.write(ctx, func(tx *writeTx) error {
		res, err := s.exec(tx, `UPDATE batch_chunks SET state = ?, record = ?, updated_at = ? WHERE chunk_key = ? AND state = ?`,
			c.State, []byte(c.Record), ns(c.UpdatedAt), c.Key, from)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		var st string
		err = s.queryRow(tx, `SELECT state FROM batch_chunks WHERE chunk_key = ?`, c.Key).Scan(&st)
		if errors.Is(err, sql.ErrNoRows) { // no such chunk
			st, err = "", nil
		}
		if err != nil {
			return err
		}
		return c.NotSaved(st, from)
	})
}
