package engine

import "github.com/ratelane/ratelane/internal/job"

// SetReapHook makes e call f between selecting expired leases and
// recovering them: the test signal that lets the reaper-vs-completion race
// tests (RELIABILITY.md T3) act in the gap. Set it before Start.
func SetReapHook(e *Engine, f func(expired []*job.Job)) { e.reapHook = f }
