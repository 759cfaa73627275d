//go:build !cpulabels

package cpulabel

// On reports whether this build labels goroutines (the cpulabels tag).
const On = false

// Set labels the calling goroutine's CPU from now on as work; goroutines
// it starts inherit the label. Without the cpulabels tag it does nothing.
func Set(work string) {}

// SetPhase names the phase the labels set from now on carry (a bench's
// "baseline", "sweep"). Without the cpulabels tag it does nothing.
func SetPhase(phase string) {}

// Phase is the phase SetPhase last named. Without the cpulabels tag it is
// empty.
func Phase() string { return "" }

// SetWrite is Set with a label naming a kind of store write. Without the
// cpulabels tag it does nothing.
func SetWrite(work, write string) {}
