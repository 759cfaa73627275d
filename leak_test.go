package ratelane_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// Client, API, store and simulator a test starts must be stopped. The
// binaries the tests built (buildOnce) are removed after the last test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(removingBuilds{m})
}

// removingBuilds runs the tests and then removes the binaries they built.
type removingBuilds struct{ m *testing.M }

// Run runs the tests, then removeBuilds.
func (r removingBuilds) Run() int {
	defer removeBuilds()
	return r.m.Run()
}
