//go:build !cpulabels

package engine

import "github.com/ratelane/ratelane/internal/job"

// noteLease, dumpLeaseStats and finishTrigger count leases by trigger in
// a cpulabels build only (leasestats_on.go).
func noteLease(string, LeaseParams, []*job.Job) {}
func dumpLeaseStats()                           {}

// leaseStatsOn: this build does not count leases by trigger.
const leaseStatsOn = false
