package ratelane_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/crashpoint"
	"github.com/ratelane/ratelane/internal/testkit"
)

// crashed starts `ratelane serve` armed at point (a binary built with the
// ratelane_crashpoints tag), runs provoke against it, and checks that the
// process died there: exit status 137 and the crash point's own line on
// stderr, so the fault is proven to have happened where the test says.
func crashed(t *testing.T, bin, dir, point string, provoke func(s *server)) {
	t.Helper()
	s := startServe(t, bin, dir, crashpoint.Env+"="+point)
	if s.url == "" {
		t.Fatalf("the armed server exited before serving:\n%s", s.stderr)
	}
	provoke(s)
	if code := s.wait(60 * time.Second); code != crashpoint.ExitCode {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, crashpoint.ExitCode, s.stderr)
	}
	if !strings.Contains(s.stderr.String(), "crashpoint "+point+":") {
		t.Fatalf("the process did not die at %s; stderr:\n%s", point, s.stderr)
	}
}

type jobAnswer struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	History []struct {
		Outcome string `json:"outcome"`
	} `json:"history"`
}

type listAnswer struct {
	Jobs []jobAnswer `json:"jobs"`
}

func createBody(idem string) map[string]any {
	return map[string]any{"kind": "crash.probe", "region": "us", "tenant": "acme", "limit_keys": []string{"crash:probe"},
		"payload": map[string]int{"n": 1}, "idempotency_key": idem}
}

// jobsOf lists every job of a kind (one page is enough: the tests create a
// handful).
func jobsOf(t *testing.T, s *server, kind string) []jobAnswer {
	t.Helper()
	var l listAnswer
	if _, _, err := s.do("GET", "/v1/jobs?region=us&tenant=acme&limit=500&kind="+kind, nil, &l); err != nil {
		t.Fatal(err)
	}
	return l.Jobs
}

// TestCrashPoints is shared/RELIABILITY.md T6 level A: `ratelane serve`,
// built with the crash points compiled in, dies (exit 137) at each of them;
// restarted on the same data directory it shows that nothing acknowledged
// is missing, nothing unacknowledged is half applied, a retried enqueue
// returns the same job, and a publication happens once.
func TestCrashPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := buildRatelane(t, "ratelane_crashpoints")

	t.Run(crashpoint.CommitBeforeAck, func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "data")
		crashed(t, bin, dir, crashpoint.CommitBeforeAck, func(s *server) {
			if code, _, err := s.do("POST", "/v1/jobs", createBody("cba-1"), nil); err == nil {
				t.Fatalf("the enqueue was acknowledged (%d) although the process died before answering", code)
			}
		})
		s := startServe(t, bin, dir)
		// The client saw no answer, so it retries with the same key: the
		// committed job is returned, not a second one.
		var j jobAnswer
		_, h, err := s.do("POST", "/v1/jobs", createBody("cba-1"), &j)
		if err != nil {
			t.Fatal(err)
		}
		if h.Get("Idempotent-Replayed") != "true" {
			t.Errorf("the retry created a job: the commit before the crash was lost")
		}
		if all := jobsOf(t, s, "crash.probe"); len(all) != 1 || all[0].ID != j.ID || all[0].State != "waiting" {
			t.Fatalf("after the retry: %+v, want the one job %s, waiting", all, j.ID)
		}
		s.stop()
	})

	t.Run(crashpoint.AckAfterCommit, func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "data")
		var acked jobAnswer
		crashed(t, bin, dir, crashpoint.AckAfterCommit, func(s *server) {
			if _, _, err := s.do("POST", "/v1/jobs", createBody("aac-1"), &acked); err != nil {
				t.Fatalf("the enqueue was not acknowledged: %v", err)
			}
		})
		s := startServe(t, bin, dir)
		var got jobAnswer
		if _, _, err := s.do("GET", "/v1/jobs/"+acked.ID+"?region=us", nil, &got); err != nil {
			t.Fatalf("the acknowledged job %s is missing after the crash: %v", acked.ID, err)
		}
		var again jobAnswer
		if _, _, err := s.do("POST", "/v1/jobs", createBody("aac-1"), &again); err != nil || again.ID != acked.ID {
			t.Fatalf("a retried enqueue returned %s (%v), want %s", again.ID, err, acked.ID)
		}
		if n := len(jobsOf(t, s, "crash.probe")); n != 1 {
			t.Fatalf("%d jobs, want 1", n)
		}
		s.stop()
	})

	t.Run(crashpoint.CASBeforeAck, func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "data")
		var leased leaseAnswer
		crashed(t, bin, dir, crashpoint.CASBeforeAck, func(s *server) {
			if _, _, err := s.do("POST", "/v1/jobs", createBody("cas-1"), nil); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.do("POST", "/v1/leases", map[string]any{"region": "us", "kinds": []string{"crash.probe"}, "lease_seconds": 30}, &leased); err != nil || len(leased.Jobs) != 1 {
				t.Fatalf("lease: %+v, %v", leased, err)
			}
			path := "/v1/jobs/" + leased.Jobs[0].ID + "/complete?region=us"
			if code, _, err := s.do("POST", path, map[string]any{"lease_token": leased.Jobs[0].LeaseToken, "result": map[string]bool{"ok": true}}, nil); err == nil {
				t.Fatalf("the completion was acknowledged (%d) although the process died before answering", code)
			}
		})
		s := startServe(t, bin, dir)
		id, token := leased.Jobs[0].ID, leased.Jobs[0].LeaseToken
		// The worker saw no answer and reports again: refused, the first
		// write stands, and the job is not offered to anyone again.
		code, _, err := s.do("POST", "/v1/jobs/"+id+"/complete?region=us", map[string]any{"lease_token": token}, nil)
		if err == nil || code != http.StatusConflict {
			t.Errorf("the repeated completion: %d %v, want 409", code, err)
		}
		var j jobAnswer
		if _, _, err := s.do("GET", "/v1/jobs/"+id+"?region=us", nil, &j); err != nil {
			t.Fatal(err)
		}
		successes := 0
		for _, h := range j.History {
			if h.Outcome == "success" {
				successes++
			}
		}
		if j.State != "published" || successes != 1 {
			t.Fatalf("job %s is %s with %d successes, want published once: %+v", id, j.State, successes, j)
		}
		var again struct {
			Jobs []any `json:"jobs"`
		}
		if _, _, err := s.do("POST", "/v1/leases", map[string]any{"region": "us", "kinds": []string{"crash.probe"}}, &again); err != nil || len(again.Jobs) != 0 {
			t.Fatalf("a published job was leased again: %+v %v", again, err)
		}
		s.stop()
	})

	t.Run(crashpoint.PublishBeforeCAS, func(t *testing.T) {
		t.Parallel()
		recv := &hookReceiver{}
		hs := httptest.NewServer(recv)
		defer hs.Close()
		dir := filepath.Join(t.TempDir(), "data")
		sub := crashReviewToSubscriber(t, bin, dir, crashpoint.PublishBeforeCAS, hs.URL+"/hook", "1")
		if n := recv.total(); n != 0 {
			t.Fatalf("the receiver got %d deliveries before the crash; the crash point is past the side effect it should follow", n)
		}
		s := startServe(t, bin, dir)
		reviewID := sub.reviewID(t, s)
		const wait = 60 * time.Second
		testkit.WaitFor(t, wait, "the receiver to get the review's delivery", func() bool { return recv.total() > 0 })
		testkit.Eventually(t, wait, "the review to publish after the restart", jobPublished(t, s, reviewID))
		// Let a duplicate, if there were one, arrive before counting.
		deliveries := jobsOf(t, s, "webhook")
		for _, d := range deliveries {
			testkit.Eventually(t, wait, "the delivery to publish", jobPublished(t, s, d.ID))
		}
		s.stop()
		ids, most := recv.stats()
		t.Logf("publish-before-CAS: %d delivery jobs, receiver saw %d webhook-ids, at most %d receptions of one", len(deliveries), ids, most)
		if len(deliveries) != 1 || ids != 1 || most != 1 {
			t.Fatalf("%d delivery jobs, %d webhook-ids, at most %d receptions; want the review published exactly once", len(deliveries), ids, most)
		}
	})

	t.Run(crashpoint.PartsBeforeAdvance, func(t *testing.T) {
		t.Parallel()
		recv := &hookReceiver{}
		hs := httptest.NewServer(recv)
		defer hs.Close()
		dir := filepath.Join(t.TempDir(), "data")
		// Every part of the review finishes, the engine computes the
		// aggregate, and the process dies before the parent's advance.
		sub := crashReviewToSubscriber(t, bin, dir, crashpoint.PartsBeforeAdvance, hs.URL+"/hook", "2")
		if n := recv.total(); n != 0 {
			t.Fatalf("the receiver got %d deliveries before the crash; the review advanced before the crash point", n)
		}
		s := startServe(t, bin, dir)
		review := struct{ ID string }{sub.reviewID(t, s)}
		var before struct {
			State string `json:"state"`
		}
		if _, _, err := s.do("GET", "/v1/jobs/"+review.ID+"?region=us", nil, &before); err != nil {
			t.Fatal(err)
		}
		if before.State != "accepted" && before.State != "validated" && before.State != "published" {
			t.Fatalf("review is %s at restart", before.State)
		}
		const wait = 60 * time.Second
		var parent struct {
			State   string `json:"state"`
			History []struct {
				Outcome string `json:"outcome"`
				Why     string `json:"why"`
			} `json:"history"`
		}
		testkit.Eventually(t, wait, "the review to publish after the restart", func() error {
			if _, _, err := s.do("GET", "/v1/jobs/"+review.ID+"?region=us", nil, &parent); err != nil {
				t.Fatal(err)
			}
			if parent.State != "published" {
				return fmt.Errorf("review %s is %s", review.ID, parent.State)
			}
			return nil
		})
		testkit.WaitFor(t, wait, "the receiver to get the review's delivery", func() bool { return recv.total() > 0 })
		deliveries := jobsOf(t, s, "webhook")
		for _, d := range deliveries {
			testkit.Eventually(t, wait, "the delivery to publish", jobPublished(t, s, d.ID))
		}
		s.stop()
		aggregations := 0
		for _, h := range parent.History {
			if strings.HasPrefix(h.Why, "aggregated ") {
				aggregations++
			}
		}
		ids, most := recv.stats()
		t.Logf("parts-before-advance: review was %s at restart; %d aggregation records, %d delivery jobs, %d webhook-ids, at most %d receptions of one",
			before.State, aggregations, len(deliveries), ids, most)
		if aggregations != 1 || len(deliveries) != 1 || ids != 1 || most != 1 {
			t.Fatalf("%d aggregation records, %d delivery jobs, %d webhook-ids, at most %d receptions; want the review advanced and published exactly once",
				aggregations, len(deliveries), ids, most)
		}
	})

	t.Run(crashpoint.SubscriberBeforeKey, func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "data")
		put := func(s *server, limit int) error {
			sub := map[string]any{"url": "http://127.0.0.1:9/hook", "topics": []string{"*"}, "rate": map[string]int{"limit": limit}}
			_, _, err := s.do("PUT", "/v1/subscribers/ci?region=us", sub, nil)
			return err
		}
		s := startServe(t, bin, dir)
		if err := put(s, 10); err != nil {
			t.Fatal(err)
		}
		before := subscriberKey(t, s)
		s.stop()
		// The update's save commits; the process dies before its key.
		crashed(t, bin, dir, crashpoint.SubscriberBeforeKey, func(s *server) {
			if err := put(s, 40); err == nil {
				t.Fatal("the update was acknowledged although the process died before its key")
			}
		})
		s = startServe(t, bin, dir)
		settled := subscriberKey(t, s)
		if err := put(s, 40); err != nil {
			t.Fatal(err)
		}
		want := subscriberKey(t, s)
		s.stop()
		if settled == before || settled != want {
			t.Fatalf("key at the restart %s; before the crash %s; the stored subscriber's %s", settled, before, want)
		}
	})
}

// subscriberKey is subscriber ci's limit key as GET /v1/limits shows its
// configuration (the pacing fields, not the live state), as JSON.
func subscriberKey(t *testing.T, s *server) string {
	t.Helper()
	var k struct {
		Shape     string   `json:"shape"`
		PerSecond *float64 `json:"per_second"`
		Rate      *float64 `json:"rate"`
		Period    string   `json:"period"`
		Burst     float64  `json:"burst"`
		Windows   []any    `json:"windows"`
	}
	if _, _, err := s.do("GET", "/v1/limits/subscriber:ci?region=us", nil, &k); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(k)
	return string(b)
}

// crashReviewToSubscriber runs `ratelane serve` in dir until it crashes at
// point, having first declared acme's subscriber "ci" at hookURL and
// submitted a one-part review of change published to it, under an
// idempotency key. It returns the submission, whose id (reviewID) a test
// reads once it has restarted the server.
func crashReviewToSubscriber(t *testing.T, bin, dir, point, hookURL, change string) *crashSubmission {
	t.Helper()
	c := &crashSubmission{body: map[string]any{"region": "us", "tenant": "acme", "repo": "acme/app", "change": change, "provider": "rules",
		"diff":            "diff --git a/app.go b/app.go\n--- a/app.go\n+++ b/app.go\n@@ -1,3 +1,4 @@\n package app\n \n+// TODO: handle retries\n func Run() {}\n",
		"publish":         map[string]string{"kind": "webhook", "target": "ci"},
		"idempotency_key": "crash-review-" + change}}
	crashed(t, bin, dir, point, func(s *server) {
		sub := map[string]any{"url": hookURL, "topics": []string{"*"}, "tenant": "acme"}
		if _, _, err := s.do("PUT", "/v1/subscribers/ci?region=us", sub, nil); err != nil {
			t.Fatal(err)
		}
		var review struct {
			ID string `json:"id"`
		}
		status, _, err := s.do("POST", "/v1/reviews", c.body, &review)
		switch {
		case err == nil:
			c.id = review.ID
		case status != 0:
			t.Fatal(err)
		default:
			// No answer at all: the review's part leases in its insert's
			// write (InsertLeaser) and can reach the crash point before
			// the answer is written. The insert committed (the crash point
			// is past it, and crashed checks the process died there), so
			// reviewID learns the id as a client would: by retrying.
			t.Logf("POST /v1/reviews got no answer before the crash (%v); the id is read after the restart", err)
		}
	})
	return c
}

// crashSubmission is the review crashReviewToSubscriber submitted.
type crashSubmission struct {
	body map[string]any
	id   string // "" until known
}

// reviewID returns the submitted review's id, asking the restarted server s
// by the same submission when the crashed one did not answer: its
// idempotency key makes that a replay of the stored review, never a second
// review.
func (c *crashSubmission) reviewID(t *testing.T, s *server) string {
	t.Helper()
	if c.id != "" {
		return c.id
	}
	var review struct {
		ID string `json:"id"`
	}
	if _, _, err := s.do("POST", "/v1/reviews", c.body, &review); err != nil {
		t.Fatal(err)
	}
	var l listAnswer
	if _, _, err := s.do("GET", "/v1/jobs?region=us&tenant=acme&limit=500&kind=review", nil, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Jobs) != 1 || l.Jobs[0].ID != review.ID {
		t.Fatalf("the resubmission answered review %s; the store holds %d reviews %+v, want that one only", review.ID, len(l.Jobs), l.Jobs)
	}
	c.id = review.ID
	return c.id
}

// jobPublished is a testkit.Eventually check that job id is published.
func jobPublished(t *testing.T, s *server, id string) func() error {
	return func() error {
		var j jobAnswer
		if _, _, err := s.do("GET", "/v1/jobs/"+id+"?region=us", nil, &j); err != nil {
			t.Fatal(err)
		}
		if j.State != "published" {
			return fmt.Errorf("job %s is %s", id, j.State)
		}
		return nil
	}
}

// hookReceiver is a loopback webhook receiver that counts receptions by
// webhook-id and accepts them all.
type hookReceiver struct{ webhookIDs }

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.add(r.Header.Get("webhook-id"))
	w.WriteHeader(http.StatusNoContent)
}
