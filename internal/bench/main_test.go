package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them. The
// test binary is also the batch-isolation simulators' child (SimChild).
func TestMain(m *testing.M) {
	ServeSimChildIfAsked()
	goleak.VerifyTestMain(m)
}
