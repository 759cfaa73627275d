package postgres

import (
	"testing"

	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestConformance runs the suite every driver passes, each test on its own
// fresh schema.
func TestConformance(t *testing.T) {
	testURL(t)
	storetest.Run(t, func(t *testing.T) store.Store { return newStore(t) })
}
