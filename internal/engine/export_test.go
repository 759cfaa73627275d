package engine

import "github.com/ratelane/ratelane/internal/job"

// SetReapHook makes e call f between selecting expired leases and
// recovering them: the test signal that lets the reaper-vs-completion race
// tests (RELIABILITY.md T3) act in the gap. Set it before Start.
func SetReapHook(e *Engine, f func(expired []*job.Job)) { e.reapHook = f }

// SetPublishQueue bounds e's publication queue to n ids, so a test can
// fill it. Set it before Start.
func SetPublishQueue(e *Engine, n int) { e.pub.q = make(chan string, n) }
