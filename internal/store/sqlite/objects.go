package sqlite

import (
	"context"
	"database/sql"

	"github.com/ratelane/ratelane/internal/store"
)

// putObjects is store.Writes.PutObjects. A batch-lane caller's many
// objects go in pieces (writePieces): each is an idempotent upsert.
func (s *Store) putObjects(ctx context.Context, os []store.Object) error {
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

// putObjectIf is store.Writes.PutObjectIf.
func (s *Store) putObjectIf(ctx context.Context, o store.Object, prev []byte) (n int64, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
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
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// deleteObject is store.Writes.DeleteObject.
func (s *Store) deleteObject(ctx context.Context, kind, id string) (n int64, err error) {
	err = s.write(ctx, func(tx *sql.Tx) error {
		res, err := s.exec(tx, `DELETE FROM objects WHERE kind = ? AND id = ?`, kind, id)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
