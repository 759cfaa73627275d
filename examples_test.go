//go:build unix

package ratelane_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
)

// TestExamples runs examples/go-worker and examples/node-worker end to end,
// as real processes, against a real `ratelane serve` and an upstream that
// answers the first request of each run 429 with Retry-After: 1. It checks
// what the issue asks of an external worker: every job is published, the
// limited job's history records the rate_limited attempt with the delay
// ratelane parsed from the raw headers, and no upstream call happened while
// the key was paused.
//
// The Node.js half needs node and npm on PATH; it runs `npm ci` in
// examples/node-worker when node_modules is missing (the npm registry must
// be reachable then). Without node it skips locally and fails when CI=true.
func TestExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and runs subprocesses; skipped under -short")
	}
	bin, ratelaneBin, workerBin := buildGoWorker(t)

	rl := startRatelane(t, ratelaneBin)
	up := newScriptedUpstream(t)
	// Worker keys lease only their own tenant's jobs, so both keys are the
	// shop tenant's; the admin key is used for nothing but creating them.
	producerKey := rl.createKey(t, "shop", "producer")
	workerKey := rl.createKey(t, "shop", "worker")
	const jobs = 4

	// The Go worker runs twice: reporting each outcome on its own route,
	// and with BATCH_REPORT=1 every lease's outcomes (the 429 among them)
	// in one POST /v1/leases/complete.
	for _, batch := range []bool{false, true} {
		name, limitKey := "go", "upstream:go"
		if batch {
			name, limitKey = "go batch report", "upstream:go-batch"
		}
		t.Run(name, func(t *testing.T) {
			// Each run has its own limit key, so one run's pause never holds
			// up the other.
			env := []string{"RATELANE_URL=" + rl.url, "RATELANE_REGION=eu", "LIMIT_KEY=" + limitKey,
				"UPSTREAM_URL=" + up.srv.URL, "WAIT_SECONDS=2"}
			if batch {
				env = append(env, "BATCH_REPORT=1")
			}
			since := up.arm()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, workerBin, "-mode", "producer", "-n", strconv.Itoa(jobs))
			cmd.Env = append(os.Environ(), append(env, "RATELANE_API_KEY="+producerKey)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go-worker -mode producer: %v\n%s", err, stderr.Bytes())
			}
			ids := strings.Fields(string(out))
			if len(ids) != jobs {
				t.Fatalf("producer printed %d job ids, want %d: %q", len(ids), jobs, out)
			}

			// One job at a time, so that every upstream call after the 429 was
			// leased after it was reported: a call in the paused second would be
			// a lease the pause should have refused.
			w := startProc(t, "go-worker", bin, workerBin, nil,
				append(env, "RATELANE_API_KEY="+workerKey, "CONCURRENCY=1", "MAX_JOBS="+strconv.Itoa(jobs)))
			w.waitExit(t, 60*time.Second)
			checkRun(t, rl, producerKey, up, since, ids)
			checkSIGTERM(t, "go-worker", bin, workerBin, nil, append(env, "RATELANE_API_KEY="+workerKey, "WAIT_SECONDS=1"))
		})
	}

	t.Run("node", func(t *testing.T) {
		node := requireNode(t)
		dir, err := filepath.Abs(filepath.Join("examples", "node-worker"))
		if err != nil {
			t.Fatal(err)
		}
		npmCI(t, dir)
		env := []string{"RATELANE_URL=" + rl.url, "RATELANE_REGION=eu", "LIMIT_KEY=upstream:node",
			"UPSTREAM_URL=" + up.srv.URL, "WAIT_SECONDS=2"}
		since := up.arm()

		prod := startProc(t, "producer.js", dir, node, []string{"producer.js"},
			append(env, "RATELANE_API_KEY="+producerKey, "HOST=127.0.0.1", "PORT=0"))
		addr := prod.waitLine(t, regexp.MustCompile(`producer listening on (http://\S+)`), 20*time.Second)
		var ids []string
		for i := range jobs {
			id, replayed := postOrder(t, addr, fmt.Sprintf("node-%d", i))
			if replayed {
				t.Fatalf("first POST /orders of order node-%d was a replay", i)
			}
			ids = append(ids, id)
		}
		// A client retrying an order gets the same job back, not a second one.
		if id, replayed := postOrder(t, addr, "node-0"); id != ids[0] || !replayed {
			t.Fatalf("retried order node-0: job %s replayed=%v, want job %s replayed=true", id, replayed, ids[0])
		}

		w := startProc(t, "worker.js", dir, node, []string{"worker.js"},
			append(env, "RATELANE_API_KEY="+workerKey, "CONCURRENCY=1", "MAX_JOBS="+strconv.Itoa(jobs)))
		w.waitExit(t, 60*time.Second)
		checkRun(t, rl, producerKey, up, since, ids)
		checkSIGTERM(t, "worker.js", dir, node, []string{"worker.js"}, append(env, "RATELANE_API_KEY="+workerKey, "WAIT_SECONDS=1"))

		if err := syscall.Kill(prod.cmd.Process.Pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		prod.waitExit(t, 15*time.Second)
	})
}

// requireNode returns node's path. CI has node, so there a missing node is
// a failure; a developer without it gets a skip that says why.
func requireNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		return node
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("node is not on PATH and CI=true: the Node.js example must run in CI (%v)", err)
	}
	t.Skip("node is not on PATH; install Node.js >= 20 to run the Node.js example (CI=true makes this a failure)")
	return ""
}

// npmCI installs the Node.js example's locked dependencies when they are
// missing, from the npm registry.
func npmCI(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "express", "package.json")); err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
}

// buildGoWorker returns a fresh directory (the worker processes run in it)
// and the paths of `ratelane` and examples/go-worker, each built once per
// test binary (buildOnce), for the tests that run the Go worker as a real
// process against a real server.
func buildGoWorker(t *testing.T) (dir, ratelaneBin, workerBin string) {
	t.Helper()
	return t.TempDir(), buildRatelane(t, ""), buildOnce(t, "./examples/go-worker", "")
}

// ratelaneServer is a `ratelane serve` process.
type ratelaneServer struct {
	url, adminKey string
}

func startRatelane(t *testing.T, bin string) *ratelaneServer {
	t.Helper()
	admin := "rl_" + randomString(8, "abcdefghijklmnopqrstuvwxyz0123456789") + "_" +
		randomString(43, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
	// Port 0 and the "serving" line, rather than a port picked beforehand
	// that another process could take in between.
	p := startProc(t, "ratelane", t.TempDir(), bin,
		[]string{"serve", "--data", t.TempDir(), "--addr", "127.0.0.1:0", "--regions", "eu", "--log-format", "text"},
		[]string{"RATELANE_ADMIN_KEY=" + admin})
	url := p.waitLine(t, regexp.MustCompile(`ratelane: serving (http://\S+)`), 30*time.Second)
	testkit.Eventually(t, testkit.Timeout, url+"/readyz to answer 200", func() error { return ready(url) })
	return &ratelaneServer{url: url, adminKey: admin}
}

// ready is nil when the server at url answers its readiness probe with 200.
func ready(url string) error {
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func (s *ratelaneServer) createKey(t *testing.T, tenant, role string) string {
	t.Helper()
	var out struct {
		Secret string `json:"secret"`
	}
	body := fmt.Sprintf(`{"tenant":%q,"role":%q,"regions":["eu"],"name":"examples-test-%s"}`, tenant, role, role)
	if status := doJSON(t, http.MethodPost, s.url+"/v1/keys", s.adminKey, body, &out); status != http.StatusCreated || out.Secret == "" {
		t.Fatalf("POST /v1/keys %s: status %d", role, status)
	}
	return out.Secret
}

// exampleJob is the part of GET /v1/jobs/{id} the test checks.
type exampleJob struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
	History []struct {
		Outcome string `json:"outcome"`
		Delay   int64  `json:"delay_ns"`
		Why     string `json:"why"`
	} `json:"history"`
}

// checkRun checks one example's run: every job published; exactly one
// upstream 429 since the run began, for one of its jobs, whose history
// holds a rate_limited attempt delayed by the 1 s the upstream asked for;
// no upstream call in the second after that 429; and each job met a 200.
func checkRun(t *testing.T, rl *ratelaneServer, key string, up *scriptedUpstream, since int, ids []string) {
	t.Helper()
	reqs := up.requestsSince(since)
	var limited *upstreamRequest
	ok := map[string]int{}
	for i, r := range reqs {
		switch r.status {
		case http.StatusTooManyRequests:
			if limited != nil {
				t.Fatalf("two 429s in one run: %+v", reqs)
			}
			limited = &reqs[i]
		case http.StatusOK:
			ok[r.jobID]++
		}
	}
	if limited == nil {
		t.Fatalf("the upstream answered no 429 (requests %+v)", reqs)
	}
	for _, r := range reqs {
		t.Logf("upstream: %+8v after the 429: job %s answered %d", r.at.Sub(limited.at).Round(time.Millisecond), r.jobID, r.status)
	}
	for _, r := range reqs {
		if r.at.After(limited.at) && r.at.Before(limited.at.Add(time.Second)) {
			t.Errorf("upstream call for job %s came %v after the 429, while the key was paused for 1s",
				r.jobID, r.at.Sub(limited.at))
		}
	}
	sawLimited := false
	for _, id := range ids {
		var j exampleJob
		if status := doJSON(t, http.MethodGet, rl.url+"/v1/jobs/"+id+"?region=eu", key, "", &j); status != http.StatusOK {
			t.Fatalf("GET /v1/jobs/%s: status %d", id, status)
		}
		if j.State != "published" {
			t.Errorf("job %s is %s %s, want published", id, j.State, j.Reason)
		}
		if ok[id] != 1 {
			t.Errorf("job %s met %d upstream 200s, want 1", id, ok[id])
		}
		if id != limited.jobID {
			continue
		}
		sawLimited = true
		found := false
		for _, h := range j.History {
			if h.Outcome == "rate_limited" {
				found = true
				if time.Duration(h.Delay) != time.Second {
					t.Errorf("job %s's rate_limited attempt was delayed %v (%s), want the upstream's Retry-After: 1",
						id, time.Duration(h.Delay), h.Why)
				}
			}
		}
		if !found {
			t.Errorf("job %s met the 429 but its history has no rate_limited attempt: %+v", id, j.History)
		}
	}
	if !sawLimited {
		t.Errorf("the 429 went to job %s, which is not one of this run's jobs %v", limited.jobID, ids)
	}
}

// checkSIGTERM starts an idle worker (no jobs left) and checks that SIGTERM
// ends it with status 0 within its long poll plus a margin.
func checkSIGTERM(t *testing.T, name, dir, bin string, args, env []string) {
	t.Helper()
	w := startProc(t, name+" (SIGTERM)", dir, bin, args, env)
	w.waitLine(t, regexp.MustCompile(`worker started`), 20*time.Second)
	if err := syscall.Kill(w.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	w.waitExit(t, 10*time.Second)
}

func postOrder(t *testing.T, base, orderID string) (string, bool) {
	t.Helper()
	var out struct {
		JobID    string `json:"job_id"`
		Replayed bool   `json:"replayed"`
	}
	if status := doJSON(t, http.MethodPost, base+"/orders", "", fmt.Sprintf(`{"order_id":%q,"sku":"X-1"}`, orderID), &out); status != http.StatusAccepted || out.JobID == "" {
		t.Fatalf("POST /orders %s: status %d, job %q", orderID, status, out.JobID)
	}
	return out.JobID, out.Replayed
}

// doJSON sends a request with a 10 s timeout and decodes a JSON answer.
func doJSON(t *testing.T, method, url, key, body string, out any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 == 2 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	} else if resp.StatusCode/100 != 2 {
		t.Logf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode
}

func randomString(n int, alphabet string) string {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// scriptedUpstream plays a rate-limited service: after arm, the next
// request is answered 429 with Retry-After: 1, the rest 200. It records
// when each request arrived, for which job (the workers send the job id as
// Idempotency-Key) and what it answered.
type scriptedUpstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	armed bool
	reqs  []upstreamRequest
}

type upstreamRequest struct {
	at     time.Time
	jobID  string
	status int
}

func newScriptedUpstream(t *testing.T) *scriptedUpstream {
	u := &scriptedUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		status := http.StatusOK
		if u.armed {
			u.armed, status = false, http.StatusTooManyRequests
		}
		u.reqs = append(u.reqs, upstreamRequest{at: time.Now(), jobID: r.Header.Get("Idempotency-Key"), status: status})
		u.mu.Unlock()
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, `{}`)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// arm makes the next request a 429 and returns the index of the requests
// that follow, for requestsSince.
func (u *scriptedUpstream) arm() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.armed = true
	return len(u.reqs)
}

func (u *scriptedUpstream) requestsSince(i int) []upstreamRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamRequest(nil), u.reqs[i:]...)
}

// proc is a subprocess in its own process group, killed (the whole group:
// npm and node may start children) when the test ends. Its combined output
// is kept and logged if the test fails.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testkit.Buffer
	done chan struct{}
	err  error
}

func startProc(t *testing.T, name, dir, bin string, args, env []string) *proc {
	t.Helper()
	p := &proc{name: name, out: &testkit.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.WaitDelay = 5 * time.Second // a grandchild holding the pipes open does not hang Wait
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not exit 10s after SIGKILL", name)
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, p.out.String())
		}
	})
	return p
}

// waitExit waits for the process to exit and fails unless it exited 0.
func (p *proc) waitExit(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("%s: %v\n%s", p.name, p.err, p.out.String())
		}
	case <-time.After(timeout):
		t.Fatalf("%s still running after %v\n%s", p.name, timeout, p.out.String())
	}
}

// waitLine waits for an output line matching re and returns its first group.
func (p *proc) waitLine(t *testing.T, re *regexp.Regexp, timeout time.Duration) string {
	t.Helper()
	var line string
	testkit.Eventually(t, timeout, fmt.Sprintf("%s to print %q", p.name, re), func() error {
		sc := bufio.NewScanner(strings.NewReader(p.out.String()))
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				line = m[0]
				if len(m) > 1 {
					line = m[1]
				}
				return nil
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited (%v) before printing %q\n%s", p.name, p.err, re, p.out.String())
		default:
		}
		return fmt.Errorf("its output so far:\n%s", p.out.String())
	})
	return line
}
