package llmbatch_test

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/llmbatch"
)

// TestChunkTurnaround: a chunk records when its create was sent and when a
// poll saw its batch end; Turnaround is the difference for a batch that
// completed or expired, and nothing for a cancelled one or one still out.
func TestChunkTurnaround(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := func(end llmbatch.End) llmbatch.Chunk {
		c := llmbatch.NewChunk("k", "anthropic", []string{"a"})
		c, err := c.BeginCreate(t0, false)
		if err != nil {
			t.Fatal(err)
		}
		if c, err = c.Created("b1"); err != nil {
			t.Fatal(err)
		}
		if _, ok := c.Turnaround(); ok || !c.SubmittedAt.Equal(t0) {
			t.Fatalf("submitted chunk: turnaround ok %v, submitted at %v", ok, c.SubmittedAt)
		}
		if c, err = c.Polled(llmbatch.Status{ID: "b1", Phase: llmbatch.PhaseInProgress}, t0.Add(time.Minute), time.Minute); err != nil {
			t.Fatal(err)
		}
		if c, err = c.Polled(llmbatch.Status{ID: "b1", Phase: llmbatch.PhaseEnded, End: end}, t0.Add(42*time.Minute), time.Minute); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for end, want := range map[llmbatch.End]time.Duration{llmbatch.EndCompleted: 42 * time.Minute, llmbatch.EndExpired: 42 * time.Minute,
		llmbatch.EndCancelled: 0, llmbatch.EndFailed: 0} {
		d, ok := run(end).Turnaround()
		if d != want || ok != (want > 0) {
			t.Errorf("%s: turnaround %s, %v; want %s", end, d, ok, want)
		}
	}
}
