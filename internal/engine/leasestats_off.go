//go:build !cpulabels

package engine

import "github.com/ratelane/ratelane/internal/job"

// noteWake, wakeReason, noteLease, dumpLeaseStats and finishTrigger count leases by
// trigger in a cpulabels build only (leasestats_on.go).
func noteWake(string)                           {}
func wakeReason() string                        { return "" }
func noteLease(string, LeaseParams, []*job.Job) {}
func dumpLeaseStats()                           {}
func finishTrigger([]Report, bool) string       { return "" }
