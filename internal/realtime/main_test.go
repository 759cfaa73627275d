package realtime_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them, as in
// the root package, whose tests these were.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
