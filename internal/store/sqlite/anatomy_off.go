//go:build !cpulabels

package sqlite

// Without the cpulabels tag the writer times no COMMIT's parts: these are
// empty, and the calls behind cpulabel.On are dead code.

// commitMark is nothing without the cpulabels tag.
type commitMark struct{}

func lockWriterThread(s *Store) func()                             { return func() {} }
func anatomyBegin(s *Store) commitMark                             { return commitMark{} }
func noteAnatomy(s *Store, m commitMark, what string, batch []ran) {}
