package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// putObjects is store.Writes.PutObjects: one transaction and one round
// trip (store.ObjectsBulk).
func (s *Store) putObjects(ctx context.Context, os []store.Object) error {
	if len(os) == 1 { // no transaction needed for one statement
		o := os[0]
		_, err := s.pool.Exec(ctx, upsertObjectSQL, o.Kind, o.ID, o.Body, ns(o.UpdatedAt))
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var b pgx.Batch
		for _, o := range os {
			b.Queue(upsertObjectSQL, o.Kind, o.ID, o.Body, ns(o.UpdatedAt))
		}
		return tx.SendBatch(ctx, &b).Close()
	})
}

// InsertWithObjects stores os and then inserts jobs: two transactions,
// objects first, so that no job is stored without them (a failed insert
// leaves them stored, unreferenced); see store.ObjectsBulk. PostgreSQL
// commits transactions in parallel, so the second does not queue behind
// other writers' as a single-writer store's would.
func (s *Store) InsertWithObjects(ctx context.Context, os []store.Object, jobs []*job.Job, def admission.Config) ([]store.InsertResult, error) {
	if err := s.PutObjects(ctx, os); err != nil {
		return make([]store.InsertResult, len(jobs)), err
	}
	return s.Insert(ctx, jobs, def)
}

// InsertLease stores os and then inserts jobs and leases with p in one
// transaction (see store.InsertLeaser): the objects first, in a
// transaction of their own, as InsertWithObjects stores them. The insert
// is never coalesced with other callers' (as Insert's small calls are):
// its transaction carries this caller's lease.
func (s *Store) InsertLease(ctx context.Context, os []store.Object, jobs []*job.Job, def admission.Config, p store.LeaseParams) ([]store.InsertResult, []*job.Job, error) {
	if err := store.CheckObjects(os); err != nil {
		return nil, nil, err
	}
	if err := store.CheckInsert(s.cfg.Region, jobs); err != nil {
		return nil, nil, err
	}
	if len(jobs) == 0 {
		return nil, nil, s.PutObjects(ctx, os)
	}
	if err := s.PutObjects(ctx, os); err != nil {
		return make([]store.InsertResult, len(jobs)), nil, err
	}
	var res []store.InsertResult
	var leased []*job.Job
	err := s.costChecked(ctx, jobs, def, func() (err error) {
		res, leased, err = s.insertLeaseNow(ctx, jobs, def, p)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return res, leased, nil
}

var _ store.InsertLeaser = (*Store)(nil)

// upsertObjectSQL stores one document, replacing any previous one.
const upsertObjectSQL = `INSERT INTO objects (kind, id, body, updated_at) VALUES ($1, $2, $3, $4)
	ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at`

// putObjectIf is store.Writes.PutObjectIf.
func (s *Store) putObjectIf(ctx context.Context, o store.Object, prev []byte) (int64, error) {
	var tag pgconn.CommandTag
	var err error
	if prev == nil {
		tag, err = s.pool.Exec(ctx, `INSERT INTO objects (kind, id, body, updated_at) VALUES ($1, $2, $3, $4) ON CONFLICT (kind, id) DO NOTHING`,
			o.Kind, o.ID, o.Body, ns(o.UpdatedAt))
	} else {
		tag, err = s.pool.Exec(ctx, `UPDATE objects SET body = $1, updated_at = $2 WHERE kind = $3 AND id = $4 AND body = $5`,
			o.Body, ns(o.UpdatedAt), o.Kind, o.ID, prev)
	}
	return tag.RowsAffected(), err
}

// deleteObject is store.Writes.DeleteObject.
func (s *Store) deleteObject(ctx context.Context, kind, id string) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM objects WHERE kind = $1 AND id = $2`, kind, id)
	return tag.RowsAffected(), err
}
