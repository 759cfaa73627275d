package ratelane_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// Client, API, store and simulator a test starts must be stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
