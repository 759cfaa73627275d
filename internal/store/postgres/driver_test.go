package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// Payloads come back byte for byte and times to the nanosecond, which is why
// the schema uses bytea and bigint rather than jsonb and timestamptz.
func TestRoundTripFidelity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	j := storetest.NewJob("t", job.LaneBatch, "b", "a")
	j.Payload = json.RawMessage(`{ "z": 1,  "a": [1e3] }`)
	j.EligibleAt = t0.Add(123456789 * time.Nanosecond)
	j.Deadline = t0.Add(time.Hour + time.Nanosecond)
	if _, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Payload) != string(j.Payload) || !got.EligibleAt.Equal(j.EligibleAt) || !got.Deadline.Equal(j.Deadline) {
		t.Fatalf("got payload %s eligible %v deadline %v", got.Payload, got.EligibleAt, got.Deadline)
	}
	if got.LimitKeys[0] != "b" || got.LimitKeys[1] != "a" {
		t.Fatalf("limit keys reordered: %v", got.LimitKeys)
	}
}

// Finish applies transitions in id order but answers in the caller's order.
func TestFinishKeepsCallerOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	insertN(t, s, 3, 3, "k")
	got := leaseN(t, s, t0, 3)
	ts := []store.Transition{successOf(got[2], t0), successOf(got[0], t0), successOf(got[1], t0)}
	ts[1].LeaseToken = "stale"
	if ts[0].ID < ts[1].ID {
		ts[0], ts[2] = ts[2], ts[0] // make sure the caller's order is not id order
	}
	errs, err := s.Finish(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || !errors.Is(errs[1], store.ErrConflict) || errs[2] != nil {
		t.Fatalf("errs = %v; want only the stale token (index 1) to conflict", errs)
	}
}

// UpsertLimit makes groups blocked on the old configuration ready again: a
// job behind a nearly stopped key is leased as soon as a larger burst admits
// it, not when the group's blocked_until, computed from the old burst, says.
// (Reconfigure keeps the bucket's TAT, so raising only the rate would not
// admit it early; that is admission's rule, not the store's.)
func TestUpsertLimitUnblocksGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	upsert(t, s, admission.Config{Name: "slow", Rate: 0.01, Burst: 1})
	insertN(t, s, 2, 1, "slow")
	lease := func(now time.Time) int {
		got, err := s.Lease(ctx, store.LeaseParams{Now: now, Max: 5, LeaseFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return len(got)
	}
	if n := lease(t0); n != 1 {
		t.Fatalf("first lease took %d jobs, want the burst of 1", n)
	}
	if n := lease(t0.Add(time.Second)); n != 0 {
		t.Fatalf("second lease took %d jobs before the key refilled", n)
	}
	upsert(t, s, admission.Config{Name: "slow", Rate: 0.01, Burst: 100})
	if n := lease(t0.Add(2 * time.Second)); n != 1 {
		t.Fatalf("after raising the burst the lease took %d jobs, want 1", n)
	}
}

// TestNoDanglingGroups: without a foreign key on jobs.group_id (migration
// 0033), every job's group must still exist. Jobs of the same groups are
// inserted while others of those groups are leased, finished and pruned
// (the only deletion of jobs that ends a group's last job); afterwards no
// job names a missing group, and the new jobs are leased. A prune that
// also removed groups left empty, racing the inserts, would fail here.
func TestNoDanglingGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	const rounds, groups = 20, 8
	for r := range rounds {
		insertN(t, s, groups, groups, "k")
		got, err := s.Lease(ctx, store.LeaseParams{Now: t0, Max: groups, LeaseFor: time.Minute})
		if err != nil || len(got) != groups {
			t.Fatalf("round %d: lease %d jobs, %v", r, len(got), err)
		}
		if err := finishAll(ctx, s, got, t0); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := s.Prune(ctx, t0.Add(time.Hour))
			done <- err
		}()
		insertN(t, s, groups, groups, "k") // the groups' next jobs, racing the prune
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		got, err = s.Lease(ctx, store.LeaseParams{Now: t0, Max: groups, LeaseFor: time.Minute})
		if err != nil || len(got) != groups {
			t.Fatalf("round %d: after the prune, lease %d jobs, %v", r, len(got), err)
		}
		if err := finishAll(ctx, s, got, t0); err != nil {
			t.Fatal(err)
		}
	}
	var dangling int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM jobs j WHERE NOT EXISTS (SELECT 1 FROM job_groups g WHERE g.id = j.group_id)`).Scan(&dangling); err != nil {
		t.Fatal(err)
	}
	if dangling != 0 {
		t.Fatalf("%d jobs name a group that does not exist", dangling)
	}
}
