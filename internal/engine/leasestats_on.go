//go:build cpulabels

package engine

import (
	"encoding/json"
	"os"
	"sync"

	"github.com/ratelane/ratelane/internal/cpulabel"
	"github.com/ratelane/ratelane/internal/job"
)

// leaseStat is one lease trigger's figures in one phase: how many leases
// it made, how many returned nothing, and what the others took. Only a
// cpulabels build counts them (a diagnostic, like the SQLite writer's
// write statistics), into $RATELANE_LEASESTATS at Stop. Besides the
// leases' triggers (start, poll, again, wake:<reason>, finish:<lane>,
// finish:<lane>-none for a finish that released nothing and so ran no
// lease), three kinds of row count what is not a lease: poll-read-none
// (a poll whose read found nothing), read:maylease (every MayLease read)
// and wake-stale:<reason> (a wake-up the fetch loop took as stale and
// waited on, neither reading nor leasing).
type leaseStat struct {
	Phase, Trigger     string
	Leases, Empty      int64
	Interactive, Batch int64
	// NoTurn counts the leases asked with no batch turn free (BatchMax
	// < 0), Capped those with fewer turns than jobs asked for.
	NoTurn, Capped int64
}

var leaseStats struct {
	mu sync.Mutex
	m  map[[2]string]*leaseStat
}

// noteLease counts one lease by trigger and what it took.
func noteLease(trigger string, p LeaseParams, jobs []*job.Job) {
	k := [2]string{cpulabel.Phase(), trigger}
	leaseStats.mu.Lock()
	defer leaseStats.mu.Unlock()
	if leaseStats.m == nil {
		leaseStats.m = map[[2]string]*leaseStat{}
	}
	st := leaseStats.m[k]
	if st == nil {
		st = &leaseStat{Phase: k[0], Trigger: k[1]}
		leaseStats.m[k] = st
	}
	st.Leases++
	if len(jobs) == 0 {
		st.Empty++
	}
	switch {
	case p.BatchMax < 0:
		st.NoTurn++
	case p.BatchMax > 0 && p.BatchMax < p.Max:
		st.Capped++
	}
	for _, j := range jobs {
		if j.Lane == job.LaneBatch {
			st.Batch++
		} else {
			st.Interactive++
		}
	}
}

// leaseStatsOn: this build counts leases by trigger (noteLease).
const leaseStatsOn = true

// dumpLeaseStats appends the figures to $RATELANE_LEASESTATS, one JSON
// line per (phase, trigger), and forgets them.
func dumpLeaseStats() {
	path := os.Getenv("RATELANE_LEASESTATS")
	if path == "" {
		return
	}
	leaseStats.mu.Lock()
	defer leaseStats.mu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, st := range leaseStats.m {
		_ = enc.Encode(st)
	}
	leaseStats.m = nil
}
