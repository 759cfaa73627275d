package sqlite_test

import (
	"testing"

	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestModel is the model-based test of the store contract on SQLite
// (shared/RELIABILITY.md T8); see storetest.RunModel.
func TestModel(t *testing.T) { storetest.RunModel(t, open) }
