package postgres

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// holdMarkLeased is a tracer that stops the first lease's last round trip
// (MarkLeased and COMMIT) before it is sent, so that the lease is held
// open with its groups and heads locked until release is closed.
type holdMarkLeased struct {
	first   atomic.Bool
	sent    atomic.Int64  // statements and batches sent
	stopped chan struct{} // closed when the first lease is held
	release chan struct{}
	once    sync.Once
}

// let lets the held lease go on (once).
func (h *holdMarkLeased) let() { h.once.Do(func() { h.let() }) }

func newHoldMarkLeased() *holdMarkLeased {
	return &holdMarkLeased{stopped: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdMarkLeased) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	h.sent.Add(1)
	for _, q := range d.Batch.QueuedQueries {
		if strings.HasPrefix(q.SQL, "UPDATE jobs SET state = 'running'") {
			if h.first.CompareAndSwap(false, true) {
				close(h.stopped)
				<-h.release
			}
		}
	}
	return ctx
}

func (h *holdMarkLeased) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (h *holdMarkLeased) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (h *holdMarkLeased) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	h.sent.Add(1)
	return ctx
}
func (h *holdMarkLeased) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// gateStore is a migrated store whose first lease stops before MarkLeased
// (see holdMarkLeased), with jobs of kind "noop" in groups groups (one key
// each) and perGroup jobs per group.
func gateStore(t *testing.T, groups, perGroup int) (*Store, *holdMarkLeased) {
	t.Helper()
	ctx := context.Background()
	h := newHoldMarkLeased()
	s, err := Open(ctx, Config{URL: testURL(t), Schema: newSchema(t), Region: "us", MaxConns: 4, tracer: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	t.Cleanup(h.let) // before Close: a test that failed while holding the lease
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var jobs []*job.Job
	for g := range groups {
		for range perGroup {
			jobs = append(jobs, storetest.NewJob("t", job.LaneInteractive, "k"+strconv.Itoa(g)))
		}
	}
	if _, err := s.Insert(ctx, jobs, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	return s, h
}

type leaseResult struct {
	jobs []*job.Job
	err  error
}

func leaseAsync(s *Store, p store.LeaseParams) chan leaseResult {
	out := make(chan leaseResult, 1)
	go func() {
		jobs, err := s.Lease(context.Background(), p)
		out <- leaseResult{jobs, err}
	}()
	return out
}

func gateParams(max int, kinds ...string) store.LeaseParams {
	return store.LeaseParams{Now: storetest.T0.Add(time.Second), Max: max, LeaseFor: time.Minute, Kinds: kinds,
		BatchMin: 2, InteractiveBudget: 30 * time.Second}
}

// TestLeaseSkipsWhileHolderHoldsEveryGroup: while a lease holds every
// ready group (4 groups, a lease of 8 reads up to 32), a second lease of
// the same Store and filter comes back empty without sending anything to
// the server; before the gate it ran a transaction (two round trips) that
// found every group locked and came back empty all the same. Once the
// first has committed, a lease takes what it left.
func TestLeaseSkipsWhileHolderHoldsEveryGroup(t *testing.T) {
	t.Parallel()
	s, h := gateStore(t, 4, 10)
	first := leaseAsync(s, gateParams(8))
	<-h.stopped // the first lease holds the 4 groups and 8 heads
	sent := h.sent.Load()
	got, err := s.Lease(context.Background(), gateParams(8))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 || h.sent.Load() != sent {
		t.Fatalf("second lease: %d jobs, %d round trips; want none and none while the first holds every group", len(got), h.sent.Load()-sent)
	}
	h.let()
	a := <-first
	if a.err != nil || len(a.jobs) != 8 {
		t.Fatalf("first lease: %d jobs, %v; want 8", len(a.jobs), a.err)
	}
	after, err := s.Lease(context.Background(), gateParams(8))
	if err != nil || len(after) != 8 {
		t.Fatalf("lease after the first's commit: %d jobs, %v; want 8", len(after), err)
	}
	seen := map[string]bool{}
	for _, j := range append(a.jobs, after...) {
		if seen[j.ID] {
			t.Fatalf("job %s leased twice", j.ID)
		}
		seen[j.ID] = true
	}
}

// TestLeaseGateLetsOthersRun: while a lease holds every ready group of its
// filter, a lease of another filter still runs its transaction, and when
// there are more ready groups than a lease reads (40 groups, a lease of 1
// reads 18), so does a lease of the same filter, beside the held lease,
// and it gets a job.
func TestLeaseGateLetsOthersRun(t *testing.T) {
	t.Parallel()
	t.Run("other filter", func(t *testing.T) {
		t.Parallel()
		s, h := gateStore(t, 4, 10)
		first := leaseAsync(s, gateParams(8))
		<-h.stopped
		other := leaseAsync(s, gateParams(8, "noop"))
		var got leaseResult
		testkit.WaitFor(t, 10*time.Second, "lease of another filter returned", func() bool {
			select {
			case got = <-other:
				return true
			default:
				return false
			}
		})
		h.let()
		a := <-first
		if a.err != nil || got.err != nil {
			t.Fatalf("leases: %v, %v", a.err, got.err)
		}
		// It ran beside the held lease: its groups were locked, so it
		// found nothing.
		if len(got.jobs) != 0 || len(a.jobs) != 8 {
			t.Fatalf("leased %d (held) and %d (other filter) jobs, want 8 and 0", len(a.jobs), len(got.jobs))
		}
	})
	t.Run("more groups than read", func(t *testing.T) {
		t.Parallel()
		s, h := gateStore(t, 40, 2)
		first := leaseAsync(s, gateParams(1))
		<-h.stopped
		second := leaseAsync(s, gateParams(1))
		var got leaseResult
		testkit.WaitFor(t, 10*time.Second, "second lease returned", func() bool {
			select {
			case got = <-second:
				return true
			default:
				return false
			}
		})
		h.let()
		a := <-first
		if a.err != nil || got.err != nil {
			t.Fatalf("leases: %v, %v", a.err, got.err)
		}
		if len(a.jobs) != 1 || len(got.jobs) != 1 || a.jobs[0].ID == got.jobs[0].ID {
			t.Fatalf("leased %d and %d jobs, want one each, different", len(a.jobs), len(got.jobs))
		}
	})
}
