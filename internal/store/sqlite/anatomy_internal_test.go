//go:build cpulabels && linux

package sqlite

import (
	"context"
	"syscall"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// openWriterThread opens a store with c and returns it and its writer's
// thread, once the writer ran a write (it locks its thread before).
func openWriterThread(t *testing.T, c Config) (*Store, *threadSched) {
	t.Helper()
	s := OpenTest(t, c)
	if err := s.write(context.Background(), bigObject); err != nil {
		t.Fatal(err)
	}
	anatomy.mu.Lock()
	ts := anatomy.threads[s]
	anatomy.mu.Unlock()
	if ts == nil {
		t.Fatal("the writer did not open its thread's schedstat")
	}
	return s, ts
}

// TestCommitAnatomy checks the cpulabels instrument of a COMMIT's parts
// (anatomy_on.go): every commit and gap checkpoint of a store is recorded,
// on the writer's one OS thread (locked to it, not the caller's), classed
// by its writes' lanes, with the WAL frames it appended, the frames a
// checkpoint copied, and thread clocks that nest (its CPU time and its
// run-queue wait each within its wall time).
func TestCommitAnatomy(t *testing.T) {
	s, ts := openWriterThread(t, Config{GapCheckpoint: 20, GapCheckpointOnWriter: true})
	if ts.tid == syscall.Gettid() {
		t.Fatal("the writer's thread is the test's")
	}
	from := func() int {
		anatomy.mu.Lock()
		defer anatomy.mu.Unlock()
		return len(anatomy.recs)
	}()
	ctx := context.Background()
	bctx := store.WithLane(ctx, job.LaneBatch)
	const each = 30
	for range each {
		if err := s.write(ctx, bigObject); err != nil {
			t.Fatal(err)
		}
		if err := s.write(bctx, bigObject); err != nil {
			t.Fatal(err)
		}
	}
	anatomy.mu.Lock()
	recs := append([]anatomyRec(nil), anatomy.recs[from:]...)
	anatomy.mu.Unlock()
	commits := map[string]int{}
	var frames, ckpts, copied int64
	for _, r := range recs {
		if r.Tid != ts.tid {
			continue // another test's store
		}
		if r.WallNs <= 0 || r.CPUNs <= 0 || r.CPUNs > r.WallNs || r.RunQNs < 0 || r.RunQNs > r.WallNs || r.Mono1 <= r.Mono0 {
			t.Errorf("%s: clocks do not nest: wall %d ns, CPU %d ns, run queue %d ns, mono %d..%d", r.What, r.WallNs, r.CPUNs, r.RunQNs, r.Mono0, r.Mono1)
		}
		switch r.What {
		case "commit":
			commits[r.Class]++
			frames += r.Frames
			if r.Frames < 2 {
				t.Errorf("a commit of a 6,000-byte row appended %d frames, want ≥ 2", r.Frames)
			}
		case "gap-checkpoint":
			ckpts++
			copied += r.Ckpt
		}
	}
	if commits["interactive"] != each || commits["batch"] != each {
		t.Errorf("commits by class %v, want %d interactive and %d batch", commits, each, each)
	}
	if ckpts == 0 || copied == 0 {
		t.Errorf("%d gap checkpoints copying %d frames recorded, want some (WAL frames appended: %d)", ckpts, copied, frames)
	}
}
