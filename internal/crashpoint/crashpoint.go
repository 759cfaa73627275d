// Package crashpoint names the places where a test build of ratelane can
// be made to die on purpose, to prove what survives a crash at the worst
// moment (shared/RELIABILITY.md, T6 level A).
//
// In an ordinary build Hit is an empty function the compiler inlines away:
// no production binary can be armed, by an environment variable or
// anything else. A binary built with the ratelane_crashpoints tag reads
// RATELANE_CRASHPOINT at start ("name", or "name@n" to die on the nth hit)
// and exits with status 137, the status of a kill -9, at that point,
// without running deferred functions or flushing anything: what was
// committed is on disk, nothing else is.
package crashpoint

// The crash points. Each name says what has happened and what has not.
const (
	// CommitBeforeAck: an enqueue (POST /v1/jobs) committed; its HTTP
	// response was not written.
	CommitBeforeAck = "commit-before-ack"
	// AckAfterCommit: an enqueue committed and its 201 response was
	// written and flushed to the client.
	AckAfterCommit = "ack-after-commit"
	// PublishBeforeCAS: a validated job's publisher did its side effect;
	// the compare-and-set validated -> published was not written.
	PublishBeforeCAS = "publish-before-CAS"
	// CASBeforeAck: an external worker's outcome (the guarded
	// running -> published write) committed; the worker was not answered.
	CASBeforeAck = "CAS-before-ack"
	// PartsBeforeAdvance: every part of a parent job is final and the
	// engine computed the parent's aggregate; the parent's advance out of
	// accepted was not written. When the advance rides on the last part's
	// finish (engine: fused.go), that part's outcome is in and its finish
	// was not written either: its lease runs out and it runs again.
	PartsBeforeAdvance = "parts-before-advance"
	// SubscriberBeforeKey: a webhook subscriber's Put saved the
	// subscriber; its limit key was not written.
	SubscriberBeforeKey = "subscriber-before-key"
)

// Env names the environment variable a ratelane_crashpoints build reads.
const Env = "RATELANE_CRASHPOINT"

// ExitCode is the status a crash point exits with: 128 + SIGKILL.
const ExitCode = 137
