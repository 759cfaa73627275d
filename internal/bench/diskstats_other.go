//go:build !linux

package bench

// diskReader is nil where there is no /proc/diskstats: io-floor leaves
// out its device figures.
func diskReader(string) func() (diskReading, bool) { return nil }
