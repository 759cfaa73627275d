package sqlite

import "github.com/ratelane/ratelane/internal/store"

// WriteCounts returns the writes and transactions committed since Open,
// and each lane's waits for the writer; see store.WriteCounter.
func (s *Store) WriteCounts() store.WriteCounts {
	return store.WriteCounts{Writes: s.writes.Load(), Transactions: s.txs.Load(), Lanes: s.lanes.read()}
}
