//go:build !cpulabels

package sqlite

// Without the cpulabels tag the deferred answers' figures are not kept:
// these are empty, and the calls behind cpulabel.On are dead code.

// interMark is empty: the interactive lane's state is not marked.
type interMark struct{}

func noteSyncHandoff(why string, n int)     {}
func noteRide(hasInteractive bool, n int)   {}
func noteSyncMet(s *Store, mark interMark)  {}
func (s *Store) markInteractive() interMark { return interMark{} }
