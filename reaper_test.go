package ratelane_test

import (
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
)

// TestExternalLeaseRecoveredWithoutHandlers is invariant 3 for a process
// that runs no handlers of its own and only serves external workers: an
// external worker leases a job and vanishes, and the lease is recovered
// (the job returns to waiting with one lease_expired attempt) though the
// region has no in-process kind; the vanished worker's late completion is
// then refused. A region with no kinds used to get no engine, hence no
// reaper, and such a lease stayed running for good.
func TestExternalLeaseRecoveredWithoutHandlers(t *testing.T) {
	t.Parallel()
	const admin = "rl_reaptest_AdminKeyForTheReaperEndToEndTestAbcdefghijklmnopq"
	c, url := serveAPI(t, ratelane.Config{DataDir: t.TempDir(), Regions: []ratelane.Region{{Name: "us"}}, LeaseFor: time.Second}, admin)
	a := &reviewAPI{t: t, c: c, url: url}
	key := func(role string) string {
		var out struct {
			Secret string `json:"secret"`
		}
		a.call("POST", "/v1/keys", admin, map[string]any{"tenant": "acme", "role": role, "regions": []string{"us"}}, nil, 201, &out)
		return out.Secret
	}
	producer, worker := key("producer"), key("worker")
	var created struct {
		ID string `json:"id"`
	}
	a.call("POST", "/v1/jobs", producer, map[string]any{"kind": "ext.work", "region": "us", "limit_keys": []string{"ext"}}, nil, 201, &created)
	var leased leaseAnswer
	a.call("POST", "/v1/leases", worker, map[string]any{"region": "us", "kinds": []string{"ext.work"}, "lease_seconds": 1, "wait_seconds": 5}, nil, 200, &leased)
	if len(leased.Jobs) != 1 || leased.Jobs[0].ID != created.ID {
		t.Fatalf("leased %+v, want job %s", leased.Jobs, created.ID)
	}
	at := time.Now()
	// The worker vanishes: no heartbeat, no outcome.
	waitForJob(t, c, created.ID, testkit.Timeout, "the abandoned external lease to be recovered", func(j *ratelane.Job) bool {
		return j.State == ratelane.StateWaiting && len(j.History) == 1 && j.History[0].Outcome == "lease_expired"
	})
	t.Logf("external lease of 1s recovered %v after it was taken", time.Since(at).Round(time.Millisecond))
	a.call("POST", "/v1/jobs/"+created.ID+"/complete?region=us", worker,
		map[string]any{"lease_token": leased.Jobs[0].LeaseToken, "result": map[string]int{"n": 1}}, nil, 409, nil)
}
