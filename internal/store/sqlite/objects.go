package sqlite

import (
	"context"
	"database/sql"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// putObjects is store.Writes.PutObjects. A batch-lane caller's many
// objects go in pieces (writePieces): each is an idempotent upsert.
func (s *Store) putObjects(ctx context.Context, os []store.Object) error {
	return s.writePieces(ctx, len(os), func(tx *writeTx, lo, hi int) error { return s.putObjectsTx(tx, os[lo:hi]) })
}

// putObjectsTx upserts os inside tx.
func (s *Store) putObjectsTx(tx *writeTx, os []store.Object) error {
	for _, o := range os {
		if _, err := s.exec(tx, `INSERT INTO objects (kind, id, body, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at`,
			o.Kind, o.ID, o.Body, ns(o.UpdatedAt)); err != nil {
			return err
		}
	}
	return nil
}

// InsertWithObjects stores os and inserts jobs in one write, all or
// nothing: one transaction and one commit; see store.ObjectsBulk. It is
// one write whatever ctx's lane (never in pieces): its callers are
// interactive submissions of a few objects and jobs.
func (s *Store) InsertWithObjects(ctx context.Context, os []store.Object, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	out, _, err := s.insertLease(ctx, os, jobs, def, store.LeaseParams{})
	return out, err
}

// InsertLease is InsertWithObjects and then, in the same write of the
// one writer, Lease with p (see store.InsertLeaser): the jobs an engine
// would lease right after the insert committed are leased without a
// second turn through the writer's queue. Unlike Insert it checks costs
// (store.WithCostCheck) as InsertWithObjects does not, before the write.
func (s *Store) InsertLease(ctx context.Context, os []store.Object, jobs []*job.Job, def admission.Config, p store.LeaseParams) ([]store.InsertResult, []*job.Job, error) {
	if store.CostCheck(ctx) {
		if err := store.CheckCosts(ctx, s, jobs, def); err != nil {
			return nil, nil, err
		}
	}
	return s.insertLease(ctx, os, jobs, def, p)
}

var _ store.InsertLeaser = (*Store)(nil)

// insertLease stores os, inserts jobs and, when p.Max > 0, leases with p,
// in one write.
func (s *Store) insertLease(ctx context.Context, os []store.Object, jobs []*job.Job, def admission.Config, p store.LeaseParams) ([]store.InsertResult, []*job.Job, error) {
	if err := store.CheckObjects(os); err != nil {
		return nil, nil, err
	}
	if err := store.CheckInsert(s.cfg.Region, jobs); err != nil {
		return nil, nil, err
	}
	var out []store.InsertResult
	var leased []*job.Job
	err := s.write(ctx, func(tx *writeTx) error {
		leased = nil
		if err := s.putObjectsTx(tx, os); err != nil {
			return err
		}
		var err error
		if out, err = s.insertJobs(tx, jobs, def); err != nil || p.Max <= 0 {
			return err
		}
		leased, err = (&txOps{s: s, tx: tx}).lease(p)
		return err
	})
	if err != nil {
		return make([]store.InsertResult, len(jobs)), nil, err
	}
	return out, leased, nil
}

// putObjectIf is store.Writes.PutObjectIf.
func (s *Store) putObjectIf(ctx context.Context, o store.Object, prev []byte) (n int64, err error) {
	err = s.write(ctx, func(tx *writeTx) error {
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
	err = s.write(ctx, func(tx *writeTx) error {
		res, err := s.exec(tx, `DELETE FROM objects WHERE kind = ? AND id = ?`, kind, id)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
