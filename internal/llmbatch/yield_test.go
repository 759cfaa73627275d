package llmbatch_test

import (
	"context"
	"maps"
	"testing"

	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
)

// TestProviderCallsYieldInPieces: a 100-item chunk's upload file is
// encoded, and its results decoded, llmbatch.YieldPiece lines at a time,
// with the caller's yield func (WithYield) called between the pieces, so
// no provider call is one stretch of CPU a pacer cannot rest.
func TestProviderCallsYieldInPieces(t *testing.T) {
	eachProvider(t, func(t *testing.T, provider string) {
		b := setup(t, provider, opts{})
		its := items("yield", 100)
		d := b.driver(&journal{}, newSink(t))
		c := llmbatch.NewChunk("m1-c0", provider, ids(its))
		yields := 0
		ctx := llmbatch.WithYield(context.Background(), func(context.Context) { yields++ })
		byAction := map[llmbatch.Action]int{}
		for c.State != llmbatch.StateReconciled {
			before := yields
			next, a, err := d.Step(ctx, b.clock.Now(), c, its)
			if err != nil {
				t.Fatalf("step: %v", err)
			}
			if n := yields - before; n > 0 {
				byAction[a] += n
			}
			if a == llmbatch.ActionWait {
				b.clock.Set(next.NotBefore)
			}
			c = next
		}
		// 100 lines: a yield before lines 32, 64 and 96.
		want := map[llmbatch.Action]int{llmbatch.ActionCollect: 3}
		if provider == batchsim.ProviderOpenAI {
			want[llmbatch.ActionUpload] = 3
		}
		if !maps.Equal(byAction, want) {
			t.Errorf("yields by step %v, want %v", byAction, want)
		}
	})
}
