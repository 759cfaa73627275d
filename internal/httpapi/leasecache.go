package httpapi

import (
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// maxLeasedJobs bounds the leased-job cache (200 leases of 100 jobs, each
// entry without its payload, about a kilobyte); past it, expired leases
// are dropped, and while it is still full new leases are not remembered
// (their outcomes read the store, as on another node).
const maxLeasedJobs = 20_000

// leasedJobs remembers the jobs this server leased to external workers,
// by id, as the lease left them, so that a batch complete of jobs leased
// here does not read each one back from the store (one SELECT per item
// was a tenth of the http-workers benchmark's CPU, pprof).
//
// A remembered job is only a shortcut to what the store's Get would say
// while the lease holds: the outcome is still written with the store's
// guarded Finish (state running and this lease token), so a lease that
// was recovered, re-leased or cancelled since conflicts there and is
// answered 409 lease-lost exactly as the read would have made it. An entry
// is used only for the same token and before its known expiry; otherwise
// (another node's heartbeat may have extended the lease) the store is
// read. Entries go when an outcome is reported here, or when they expire
// and the cache is full.
type leasedJobs struct {
	mu   sync.Mutex
	jobs map[string]*job.Job
}

func newLeasedJobs() *leasedJobs { return &leasedJobs{jobs: map[string]*job.Job{}} }

// put remembers freshly leased jobs.
func (c *leasedJobs) put(js []*job.Job, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.jobs)+len(js) > maxLeasedJobs {
		for id, j := range c.jobs {
			if !now.Before(j.LeaseExpiresAt) {
				delete(c.jobs, id)
			}
		}
	}
	for _, j := range js {
		if len(c.jobs) >= maxLeasedJobs {
			return
		}
		// Without the payload and result, which can be large and which
		// deciding an outcome does not read: the cache must not hold
		// megabytes for leases whose outcome goes to another node.
		cp := *j
		cp.Payload, cp.Result = nil, nil
		c.jobs[j.ID] = &cp
	}
}

// get returns the job id as leased with token, while that lease is known
// to hold at now; nil when the store must be read.
func (c *leasedJobs) get(id, token string, now time.Time) *job.Job {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.jobs[id]
	if j == nil || j.LeaseToken != token || !now.Before(j.LeaseExpiresAt) {
		return nil
	}
	return j
}

// extended notes a heartbeat made through this server.
func (c *leasedJobs) extended(id, token string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j := c.jobs[id]; j != nil && j.LeaseToken == token {
		cp := *j // readers hold the old pointer; never write through it
		cp.LeaseExpiresAt = until
		c.jobs[id] = &cp
	}
}

// done forgets jobs whose outcome was reported (or refused as lost).
func (c *leasedJobs) done(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		delete(c.jobs, id)
	}
}
