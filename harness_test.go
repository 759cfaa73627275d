package ratelane_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
)

// waitForJob waits until job id of region us satisfies cond and returns it;
// a timeout names what and the job's state and history as last read. The
// root package's tests wait for a job this way rather than polling by hand.
func waitForJob(t testing.TB, c *ratelane.Client, id string, timeout time.Duration, what string, cond func(*ratelane.Job) bool) *ratelane.Job {
	t.Helper()
	var j *ratelane.Job
	testkit.Eventually(t, timeout, what, func() error {
		var err error
		if j, err = c.Job(context.Background(), "us", id); err != nil {
			t.Fatal(err)
		}
		if !cond(j) {
			return fmt.Errorf("job %s is %s/%s, history %+v", id, j.State, j.Reason, j.History)
		}
		return nil
	})
	return j
}
