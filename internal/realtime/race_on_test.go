//go:build race

package realtime_test

// raceEnabled is set when the race detector runs, which slows delivery
// several times: throughput figures are not checked then.
const raceEnabled = true
