package llmbatch

import "context"

// YieldPiece is how many items a Provider handles between two calls of
// the yield func a caller put in the call's context (WithYield): an
// upload's request file is encoded, and a collection's result files are
// decoded, YieldPiece lines at a time. At ~35 µs a line on a 2-core
// machine that is about a millisecond of CPU a piece, a few times an
// interactive review's own CPU work.
const YieldPiece = 32

type yieldKey struct{}

// WithYield returns ctx carrying yield, which a Provider's Upload and
// Collect call with ctx every YieldPiece lines of the file they encode or
// decode. A caller whose CPU work is paced between pieces (ratelane's
// batch lane passes engine.Yield, where the batch pacer rests it) so sees
// a thousand-line file as thirty-odd short pieces rather than one of
// some tens of milliseconds. Without it the calls run in one piece.
func WithYield(ctx context.Context, yield func(context.Context)) context.Context {
	return context.WithValue(ctx, yieldKey{}, yield)
}

// yieldEvery calls ctx's yield func (WithYield) before the line at index
// i when i is a positive multiple of YieldPiece.
func yieldEvery(ctx context.Context, i int) {
	if i == 0 || i%YieldPiece != 0 {
		return
	}
	if y, ok := ctx.Value(yieldKey{}).(func(context.Context)); ok && y != nil {
		y(ctx)
	}
}
