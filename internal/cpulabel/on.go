//go:build cpulabels

package cpulabel

import (
	"context"
	"runtime/pprof"
	"sync"
	"sync/atomic"
)

// On reports whether this build labels goroutines (the cpulabels tag).
const On = true

var (
	phase atomic.Pointer[string]
	// ctxs caches one labelled context per (phase, work): Set allocates
	// only the first time.
	ctxs sync.Map
)

type key struct{ phase, work string }

// Set labels the calling goroutine's CPU from now on as work, in the
// phase SetPhase last named; goroutines it starts inherit the label.
func Set(work string) {
	p := ""
	if s := phase.Load(); s != nil {
		p = *s
	}
	k := key{p, work}
	c, ok := ctxs.Load(k)
	if !ok {
		c, _ = ctxs.LoadOrStore(k, pprof.WithLabels(context.Background(), pprof.Labels("work", work, "phase", p)))
	}
	pprof.SetGoroutineLabels(c.(context.Context))
}

// SetPhase names the phase the labels set from now on carry.
func SetPhase(p string) { phase.Store(&p) }

// Phase is the phase SetPhase last named.
func Phase() string {
	if s := phase.Load(); s != nil {
		return *s
	}
	return ""
}

// SetWrite is Set with a third label, write, naming the kind of store
// write the goroutine runs (the SQLite writer's).
func SetWrite(work, write string) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("work", work, "phase", Phase(), "write", write)))
}
