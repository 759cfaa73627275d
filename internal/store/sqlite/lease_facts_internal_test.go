package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestFinishWithAndWithoutLeaseFacts: a finish whose lease MarkLeased
// remembered (Store.leases) and one whose entry is gone (a reopened store,
// an emptied map) end the attempt the same way: the job is validated with
// its record, the key's concurrency slot is given back (the keys, group
// and cost came from the map or from RETURNING), and a second finish of
// the same lease conflicts on either path.
func TestFinishWithAndWithoutLeaseFacts(t *testing.T) {
	t.Parallel()
	for _, forget := range []bool{false, true} {
		name := "remembered"
		if forget {
			name = "forgotten"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "us.db"), Region: "us", Synchronous: SyncNormal})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.UpsertLimit(ctx, admission.Config{Name: "k", Concurrency: 1}, storetest.T0); err != nil {
				t.Fatal(err)
			}
			a, b := storetest.NewJob("acme", job.LaneBatch, "k"), storetest.NewJob("acme", job.LaneBatch, "k")
			if _, err := s.Insert(ctx, []*job.Job{a, b}, storetest.Unpaced); err != nil {
				t.Fatal(err)
			}
			now := storetest.T0
			got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 2, LeaseFor: time.Minute})
			if err != nil || len(got) != 1 {
				t.Fatalf("lease with a cap of 1: %d jobs, %v; want 1", len(got), err)
			}
			first := got[0]
			var remembered bool
			if err := s.write(ctx, func(*sql.Tx) error {
				_, remembered = s.leases[first.ID]
				if forget {
					clear(s.leases)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !remembered {
				t.Fatal("MarkLeased did not remember the lease's keys, group and cost")
			}
			tr := store.Transition{ID: first.ID, LeaseToken: first.LeaseToken, To: job.StateValidated,
				Record: job.AttemptRecord{At: now, Attempt: first.Attempt, Outcome: job.ClassSuccess},
				Keys:   store.KeyEffect{Now: now, Success: true}}
			errs, err := s.Finish(ctx, []store.Transition{tr})
			if err != nil || errs[0] != nil {
				t.Fatalf("finish: %v, %v", errs, err)
			}
			errs, err = s.Finish(ctx, []store.Transition{tr})
			if err != nil || !errors.Is(errs[0], store.ErrConflict) {
				t.Fatalf("second finish of the same lease: %v, %v; want ErrConflict", errs, err)
			}
			j, err := s.Get(ctx, first.ID)
			if err != nil {
				t.Fatal(err)
			}
			if j.State != job.StateValidated || len(j.History) != 1 || j.History[0].Outcome != job.ClassSuccess {
				t.Fatalf("finished job: state %s, history %+v; want validated with one success", j.State, j.History)
			}
			got, err = s.Lease(ctx, store.LeaseParams{Now: now.Add(time.Second), Max: 2, LeaseFor: time.Minute})
			if err != nil || len(got) != 1 || got[0].ID == first.ID {
				t.Fatalf("lease after the finish: %d jobs, %v; want the other job (the slot given back)", len(got), err)
			}
		})
	}
}
