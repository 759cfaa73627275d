package postgres

import (
	"context"
	"strconv"
	"strings"
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
	stopped chan struct{} // closed when the first lease is held
	release chan struct{}
}

func newHoldMarkLeased() *holdMarkLeased {
	return &holdMarkLeased{stopped: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdMarkLeased) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
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

// TestLeaseWaitsForHolderOfEveryGroup: a lease that locked every ready
// group (4 groups, a lease of 8 reads up to 32) is waited for by a second
// lease of the same Store and filter, which then leases what the first
// left, instead of skipping the locked groups and coming back empty (it
// did before the gate: the engine's second fetch loop on PostgreSQL).
func TestLeaseWaitsForHolderOfEveryGroup(t *testing.T) {
	t.Parallel()
	s, h := gateStore(t, 4, 10)
	first := leaseAsync(s, gateParams(8))
	<-h.stopped // the first lease holds the 4 groups and 8 heads
	second := leaseAsync(s, gateParams(8))
	// Let the second lease run as far as it goes: to its result (what it
	// did before the gate) or to its place in the gate's queue.
	var got leaseResult
	var done bool
	testkit.WaitFor(t, 10*time.Second, "second lease returned or queued", func() bool {
		select {
		case got = <-second:
			done = true
			return true
		default:
		}
		s.gate.mu.Lock()
		defer s.gate.mu.Unlock()
		return len(s.gate.holds) == 2
	})
	close(h.release)
	a := <-first
	if !done {
		got = <-second
	}
	if a.err != nil || got.err != nil {
		t.Fatalf("leases: %v, %v", a.err, got.err)
	}
	if len(a.jobs) != 8 || len(got.jobs) != 8 {
		t.Fatalf("leased %d and %d jobs, want 8 and 8: the second lease must not come back empty while the first holds every group", len(a.jobs), len(got.jobs))
	}
	seen := map[string]bool{}
	for _, j := range append(a.jobs, got.jobs...) {
		if seen[j.ID] {
			t.Fatalf("job %s leased twice", j.ID)
		}
		seen[j.ID] = true
	}
}

// TestLeaseGateLetsOthersRun: while a lease holds every ready group of its
// filter, a lease of another filter does not wait for it, and when there
// are more ready groups than a lease reads (40 groups, a lease of 1 reads
// 18), a lease of the same filter does not wait either: both run beside
// the held lease and return jobs.
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
		close(h.release)
		a := <-first
		if a.err != nil || got.err != nil {
			t.Fatalf("leases: %v, %v", a.err, got.err)
		}
		// It ran beside the held lease: its groups were locked, so it
		// found nothing, and it did not wait to find out.
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
		close(h.release)
		a := <-first
		if a.err != nil || got.err != nil {
			t.Fatalf("leases: %v, %v", a.err, got.err)
		}
		if len(a.jobs) != 1 || len(got.jobs) != 1 || a.jobs[0].ID == got.jobs[0].ID {
			t.Fatalf("leased %d and %d jobs, want one each, different", len(a.jobs), len(got.jobs))
		}
	})
}
