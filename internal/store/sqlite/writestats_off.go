//go:build !cpulabels

package sqlite

import "time"

func writeCaller() string                                          { return "" }
func noteWrite(r *writeReq, d time.Duration, interQueued int)      {}
func dumpWriteStats()                                              {}
func noteCommit(batch []ran, hasInteractive bool, d time.Duration) {}
