//go:build race

package llmbatch

// raceEnabled is set when the race detector runs: under it sync.Pool drops
// items at random, so encoding/json's encoder state is allocated afresh
// per line and allocation bounds do not hold.
const raceEnabled = true
