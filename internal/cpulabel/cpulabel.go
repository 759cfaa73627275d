// Package cpulabel tags goroutines' CPU with what work they do, for a
// CPU profile's shares (go tool pprof -tags): interactive work, batch work
// the pacer governs, batch work it does not, the SQLite writer's writes
// by lane. It is compiled in only with the build tag cpulabels; in every
// other build Set is an empty function the compiler inlines away, so the
// hot paths that call it pay nothing (docs/benchmarks.md, "Session 27
// (s27h2)").
//
// A label names a kind of work, never a payload, an id or a key.
package cpulabel

// The work labels. Batch-lane work is "batch-paced" when it runs inside a
// piece the batch pacer governs (a computing turn of the CPU governor,
// engine/budget.go) and "batch-unpaced-<where>" otherwise.
const (
	Interactive      = "interactive"
	InteractiveAgg   = "interactive-aggregate"
	InteractivePub   = "interactive-publish"
	BatchPaced       = "batch-paced"
	BatchUnpacedHand = "batch-unpaced-handler"
	BatchUnpacedPub  = "batch-unpaced-publish"
	BatchUnpacedAgg  = "batch-unpaced-aggregate-loop"
	BatchIntake      = "batch-unpaced-intake"
	Fetch            = "engine-fetch"
	FinishBatch      = "engine-finish-batch"
	FinishInter      = "engine-finish-interactive"
	FinishMixed      = "engine-finish-mixed"
	Maintain         = "engine-maintain"
	WriterBatch      = "writer-batch"
	WriterInter      = "writer-interactive"
	WriterCommitB    = "writer-commit-batch"
	WriterCommitI    = "writer-commit-interactive"
	BenchWait        = "bench-wait"
)
