// Package testkit holds the helpers every package's tests share, so that
// no test depends on the machine's speed (issue 11 item 6): a wait with a
// deadline and a useful message instead of sleeps and hand-rolled polling
// loops, a receive with a deadline for test signals, a fake clock for the
// code that takes one (the engine's Config.Now, the stores' now
// arguments), and a PostgreSQL schema per test.
//
// A deadline here bounds a hang; it is no speed target (those live in
// benchmarks), so it is generous enough for a -race run on a loaded
// 2-core machine. Inside a testing/synctest bubble the waits run on the
// bubble's fake clock, so they cost no real time there.
//
// Only tests import this package.
package testkit

import (
	"fmt"
	"testing"
	"time"
)

// Timeout is the deadline of a wait that has no reason to choose its own:
// long enough that only a hang reaches it.
const Timeout = 30 * time.Second

// maxPoll is the longest pause between two checks of a condition; the
// pauses start at a millisecond and double up to it, so a condition that
// holds soon is seen soon and a long wait does not spin.
const maxPoll = 50 * time.Millisecond

// WaitFor checks cond until it returns true, failing the test (t.Fatalf,
// so it must be called from the test's goroutine) when timeout passes
// first. what names the awaited condition in the failure message, as in
// "the job to publish". cond may itself fail the test.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = fmt.Errorf("condition not met")

// Eventually calls check until it returns nil, failing the test when
// timeout passes first; the message names what and the last error check
// returned, which should say what the test saw ("job j1 is waiting"), so a
// timeout explains itself. It is WaitFor for conditions worth describing.
func Eventually(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	err := Until(timeout, check)
	switch {
	case err == nil:
	case err == errNotYet:
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	default:
		t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
	}
}

// Until calls check until it returns nil, and returns nil then, or the
// last error check returned once timeout has passed. It fails no test, so
// a goroutine other than the test's may call it (t.Fatalf may not be
// called there), and so may a benchmark that tolerates a timeout; a test
// wants Eventually or WaitFor, whose failure says what it waited for.
func Until(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for {
		err := check()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPoll)
	}
}

// Recv returns the next value from ch, failing the test when timeout
// passes first. A closed channel counts as a receive (of the zero value),
// so a signal channel may be closed rather than sent on. It is the way to
// wait for a test signal ("the handler started") without a bare receive
// that would hang the test for good.
func Recv[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
	var zero T
	return zero
}
