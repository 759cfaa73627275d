// Package realtime holds the few tests that measure pacing over real
// time: a rate reached, a ceiling kept, against a real clock, a real store
// and real HTTP on loopback. Everything else in the suite is independent
// of the machine's speed (fake clocks, testing/synctest, waits with a
// deadline), so it runs packages in parallel; these tests must not share
// a small machine with other load, so `make test` runs this package alone,
// after the rest. The package has no code of its own, only tests.
package realtime
