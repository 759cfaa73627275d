package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/ratelane/ratelane/internal/store"
)

// PutObject stores a document, replacing any previous one.
func (s *Store) PutObject(ctx context.Context, o store.Object) error {
	return s.PutObjects(ctx, []store.Object{o})
}

// PutObjects stores documents in one transaction; see store.ObjectsBulk.
func (s *Store) PutObjects(ctx context.Context, os []store.Object) error {
	if err := store.CheckObjects(os); err != nil {
		return err
	}
	if len(os) == 0 {
		return nil
	}
	// A batch-lane caller's many objects go in pieces (writePieces): each
	// is an idempotent upsert.
	return s.writePieces(ctx, len(os), func(tx *sql.Tx, lo, hi int) error {
		for _, o := range os[lo:hi] {
			if _, err := s.exec(tx, `INSERT INTO objects (kind, id, body, updated_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at`,
				o.Kind, o.ID, o.Body, ns(o.UpdatedAt)); err != nil {
				return err
			}
		}
		return nil
	})
}

// PutObjectIf stores a document only if the stored body is prev (nil: only
// if there is none).
func (s *Store) PutObjectIf(ctx context.Context, o store.Object, prev []byte) error {
	if err := o.Check(); err != nil {
		return err
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		var res sql.Result
		var err error
		if prev == nil {
			res, err = s.exec(tx, `INSERT INTO objects (kind, id, body, updated_at) VALUES (?, ?, ?, ?) ON CONFLICT (kind, id) DO NOTHING`,
				o.Kind, o.ID, o.Body, ns(o.UpdatedAt))
		} else {
			res, err = s.exec(tx, `UPDATE objects SET body = ?, updated_at = ? WHERE kind = ? AND id = ? AND body = ?`,
				o.Body, ns(o.UpdatedAt), o.Kind, o.ID, prev)
		}
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, o.Changed())
		}
		return nil
	})
}

// DeleteObject removes a document.
func (s *Store) DeleteObject(ctx context.Context, kind, id string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := s.exec(tx, `DELETE FROM objects WHERE kind = ? AND id = ?`, kind, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		return nil
	})
}
