package store

// Policies every driver applies the same way; the conformance suite checks
// each (ListPageCap, ObjectListPageCap, PruneBatchCap, LimitValidation).

// Page sizes of List.
const (
	// DefaultListLimit is List's page size when ListParams.Limit is 0.
	DefaultListLimit = 100
	// MaxListLimit is the largest page List returns; a larger Limit is
	// clamped to it (not reset to the default).
	MaxListLimit = 1000
)

// PruneBatch is the most finished jobs one Prune call deletes, so that a
// backlog of expired history is removed in short transactions; callers
// call Prune until it returns 0.
const PruneBatch = 10000

// PageSize returns the page size List uses for a requested limit: the
// default for 0 or less, MaxListLimit above it.
func PageSize(limit int) int {
	switch {
	case limit <= 0:
		return DefaultListLimit
	case limit > MaxListLimit:
		return MaxListLimit
	}
	return limit
}
