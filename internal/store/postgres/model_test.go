package postgres

import (
	"testing"

	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestModel is the model-based test of the store contract on PostgreSQL
// (shared/RELIABILITY.md T8), each check on its own fresh schema; see
// storetest.RunModel.
func TestModel(t *testing.T) {
	testURL(t)
	storetest.RunModel(t, func(t *testing.T) store.Store { return newStore(t) })
}
