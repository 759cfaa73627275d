package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The case: an interactive lane whose oldest ready job is 733 s
// old, with nothing leasing its kind, predicted a 0 s wait (its keys are
// unpaced) and accepted more work with on_overload reject. The one
// prediction counts the lane's age when nothing serves the kind, and trusts
// the keys again once a worker leases it.
func TestOverloadUnservedKindUsesLaneAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := func() map[string]any {
		b := jobBody("report", "us")
		b["lane"] = "interactive"
		return b
	}
	first := e.createJob(acmeKey, body())
	// On a fresh lane the wait is 0 s, a lower bound: the response says
	// nothing handles the kind, in the words of the job's view.
	if first.Unserved == nil || !strings.Contains(first.Unserved.Detail, `nothing handles kind "report" in region us`) {
		t.Fatalf("create response of an unserved kind: unserved = %+v", first.Unserved)
	}
	e.clock.Add(733 * time.Second)
	p := e.do("POST", "/v1/jobs", acmeKey, body()).wantProblem(t, http.StatusTooManyRequests, "overloaded")
	if p.PredictedWaitSeconds == nil || *p.PredictedWaitSeconds < 733 {
		t.Fatalf("predicted wait %v, want at least 733 s", p.PredictedWaitSeconds)
	}
	// A worker leases the kind: it is served, and the idle keys decide.
	got := e.lease("us", 1, "report")
	if len(got) != 1 {
		t.Fatalf("leased %d jobs", len(got))
	}
	v := e.createJob(acmeKey, body())
	if v.PredictedWaitSeconds == nil || *v.PredictedWaitSeconds != 0 {
		t.Fatalf("predicted wait %v once the kind is served, want 0", v.PredictedWaitSeconds)
	}
	if v.Unserved != nil {
		t.Fatalf("served kind's create response says unserved: %+v", v.Unserved)
	}
}
