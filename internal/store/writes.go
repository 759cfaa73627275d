package store

// WriteCounts are a store's cumulative write figures since it was opened:
// Writes is the number of write calls (each one guarded write of the
// contract), Transactions the number of transactions that committed them
// (the SQLite writer commits every write queued at the moment together,
// one fsync each). Writes ÷ Transactions is the group commit's yield.
type WriteCounts struct {
	Writes       int64
	Transactions int64
}

// WriteCounter is implemented by a store that counts its writes (the
// SQLite driver); metrics and benchmarks read it when present.
type WriteCounter interface {
	WriteCounts() WriteCounts
}
