package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// slowReady is a store whose ReadyParents takes 20 ms of (simulated) time
// and notes the batch turns held while it runs and when each call began
// and ended.
type slowReady struct {
	store.Store
	e *engine.Engine

	mu           sync.Mutex
	running      []int
	began, ended []time.Time
}

func (s *slowReady) ReadyParents(ctx context.Context, p store.ReadyParentsParams) ([]*job.Job, error) {
	running, _, _ := engine.BudgetState(s.e)
	s.mu.Lock()
	s.running = append(s.running, running)
	s.began = append(s.began, time.Now())
	s.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	defer func() {
		s.mu.Lock()
		s.ended = append(s.ended, time.Now())
		s.mu.Unlock()
	}()
	return s.Store.ReadyParents(ctx, p)
}

// TestSweepReadsArePaced: while the batch lane works, a sweep pass's read
// of the ready parents (one statement that walks every accepted parent of
// the kind: 10,000 batch reviews under a sweep) is a piece of computing
// batch-lane work. It holds a turn of the CPU governor, and while
// interactive work is about the batch pacer rests after it (share 0.5: a
// read of 20 ms is followed by a rest of 20 ms before the next batch
// piece and the next pass's read); with no interactive work about it
// rests for nothing. Outside a turn those reads were the largest share of
// batch-lane CPU no rest followed (docs/benchmarks.md, "Session 27
// (s27h2)"). With no batch work since the last pass the read takes no
// turn, so an engine without batch work leases as before
// (TestIdleGovernorCostsInteractiveNothing). In simulated time.
func TestSweepReadsArePaced(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                   string
		interactive, batchWork bool
		turns                  int
		gap                    time.Duration
		rests                  int64
	}{
		{"interactive", true, true, 1, 20 * time.Millisecond, 2},
		{"alone", false, true, 1, 0, 0},
		{"no batch work", true, false, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &slowReady{Store: newStore(t)}
				// Not started: only the passes below read.
				e, err := engine.New(engine.Config{Store: s, Region: "us", BatchCPUs: 1, BatchCPUShare: 0.5, BatchYieldMax: -1, // the pacer alone
					Kinds: map[string]engine.Kind{"report": {Aggregate: sumParts(new(atomic.Int64))}}})
				if err != nil {
					t.Fatal(err)
				}
				s.e = e
				if c.interactive {
					defer engine.EnterInteractive(e)()
				}
				ctx := store.WithLane(context.Background(), job.LaneBatch)
				for range 2 {
					if c.batchWork {
						engine.BatchPiece(e) // another batch piece since the last pass
					}
					if err := e.SweepParents(ctx); err != nil {
						t.Fatal(err)
					}
				}
				for i, r := range s.running {
					if r != c.turns {
						t.Errorf("pass %d read the ready parents holding %d batch turns, want %d", i, r, c.turns)
					}
				}
				if gap, rests := s.began[1].Sub(s.ended[0]), e.BudgetCounts().Rests; gap != c.gap || rests != c.rests {
					t.Errorf("the second pass read %v after the first ended (want %v), %d rests (want %d)", gap, c.gap, rests, c.rests)
				}
			})
		})
	}
}
