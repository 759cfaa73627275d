//go:build !race

package llmbatch

// raceEnabled is set when the race detector runs; see race_on_test.go.
const raceEnabled = false
