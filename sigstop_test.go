//go:build unix

package ratelane_test

import (
	"bytes"
	"context"
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

// TestStoppedWorkerIsFenced is RELIABILITY.md T4(b): an external worker
// (examples/go-worker, a real process) is SIGSTOPped while it holds a job's
// lease, in the middle of its upstream call, and stays stopped past the
// lease. The server recovers the lease, a second worker process runs the
// job and publishes it; then the first worker is continued (SIGCONT) and
// its late heartbeat and completion are refused (409, counted in
// ratelane_api_requests_total) and change nothing: the job stays published
// with one success. The test proves each fault happened: the first
// worker's upstream call really started before the stop, the lease was
// recovered (a lease_expired attempt in the history), the upstream saw the
// job twice, and at least one late write was refused.
func TestStoppedWorkerIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and runs subprocesses; skipped under -short")
	}
	t.Parallel()
	bin, ratelaneBin, workerBin := buildGoWorker(t)
	rl := startRatelane(t, ratelaneBin)
	producerKey := rl.createKey(t, "shop", "producer")
	workerKey := rl.createKey(t, "shop", "worker")

	// The upstream holds the first call open until the test has stopped
	// its caller, then answers it (into a socket nobody reads until
	// SIGCONT); later calls answer at once.
	up := &holdingUpstream{arrived: make(chan struct{}), release: make(chan struct{}), calls: map[string]int{}}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	t.Cleanup(up.unblock)

	env := []string{"RATELANE_URL=" + rl.url, "RATELANE_REGION=eu", "LIMIT_KEY=upstream:sigstop", "UPSTREAM_URL=" + srv.URL,
		"WAIT_SECONDS=1", "LEASE_SECONDS=2", "CONCURRENCY=1"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod := exec.CommandContext(ctx, workerBin, "-mode", "producer", "-n", "1")
	prod.Env = append(os.Environ(), append(env, "RATELANE_API_KEY="+producerKey)...)
	out, err := prod.Output()
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	id := strings.TrimSpace(string(out))

	a := startProc(t, "worker-a", bin, workerBin, nil, append(env, "RATELANE_API_KEY="+workerKey, "MAX_JOBS=1"))
	select {
	case <-up.arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("worker A never called the upstream\n%s", a.out.String())
	}
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, a.cmd.Process.Pid)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT)
		}
	})
	up.unblock()

	// The lease (2 s, no more heartbeats) runs out and the server's reaper
	// recovers it.
	waitJob(t, rl.url, producerKey, id, "its lease to be recovered", 60*time.Second, func(j exampleJob) bool {
		return countHistory(j, "lease_expired") == 1
	})
	b := startProc(t, "worker-b", bin, workerBin, nil, append(env, "RATELANE_API_KEY="+workerKey, "MAX_JOBS=1"))
	b.waitExit(t, 60*time.Second)
	published := waitJob(t, rl.url, producerKey, id, "worker B to publish it", 30*time.Second, func(j exampleJob) bool {
		return j.State == "published"
	})

	refusedBefore := refusedLate(t, rl)
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	a.waitLine(t, regexp.MustCompile(`"msg":"report failed".*409|"msg":"heartbeat failed".*409`), 30*time.Second)
	var refused int
	testkit.Eventually(t, testkit.Timeout, "a late write of worker A to be refused", func() error {
		if refused = refusedLate(t, rl); refused <= refusedBefore {
			return fmt.Errorf("409 count %d -> %d; worker A's output:\n%s", refusedBefore, refused, a.out.String())
		}
		return nil
	})

	// The late writes changed nothing.
	var final exampleJob
	if status := doJSON(t, http.MethodGet, rl.url+"/v1/jobs/"+id+"?region=eu", producerKey, "", &final); status != http.StatusOK {
		t.Fatalf("GET job: %d", status)
	}
	if final.State != "published" || countHistory(final, "success") != 1 || countHistory(final, "lease_expired") != 1 ||
		len(final.History) != len(published.History) {
		t.Fatalf("job after the late writes = %s, history %+v; want published with one success and one recovery, as before (%d records)",
			final.State, final.History, len(published.History))
	}
	if n := metricValue(t, rl, recoveredMetric); n < 1 {
		t.Fatalf("ratelane_leases_recovered_total = %d, want at least 1", n)
	}
	if n := up.count(id); n != 2 {
		t.Fatalf("the upstream saw the job %d times, want 2 (worker A's stopped call and worker B's)", n)
	}
	t.Logf("late writes of the stopped worker refused: %d", refused-refusedBefore)
}

// waitStopped waits until every thread of pid is stopped. kill(2) only
// queues SIGSTOP: each thread stops the next time it runs, so a thread
// already woken by the upstream's answer (the network poller) could read it
// and report the job before the process is really stopped. Releasing the
// upstream only after this makes the fault the test injects certain.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("every thread of process %d to stop after SIGSTOP", pid), func() bool {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("threads of %d: %v (%d found)", pid, err, len(tasks))
		}
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			// The state follows the command name in parentheses: "pid (comm) T ...".
			i := bytes.LastIndexByte(b, ')')
			if err != nil || i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				return false
			}
		}
		return true
	})
}

// holdingUpstream answers 200, holding the first call until unblock.
type holdingUpstream struct {
	arrived, release chan struct{}
	once, relOnce    sync.Once
	mu               sync.Mutex
	calls            map[string]int
}

func (u *holdingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	u.calls[r.Header.Get("Idempotency-Key")]++
	first := u.calls[r.Header.Get("Idempotency-Key")] == 1
	u.mu.Unlock()
	if first {
		u.once.Do(func() { close(u.arrived) })
		<-u.release
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{}`)
}

func (u *holdingUpstream) unblock() { u.relOnce.Do(func() { close(u.release) }) }

func (u *holdingUpstream) count(id string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[id]
}

func countHistory(j exampleJob, outcome string) int {
	n := 0
	for _, h := range j.History {
		if h.Outcome == outcome {
			n++
		}
	}
	return n
}

func waitJob(t *testing.T, base, key, id, what string, timeout time.Duration, cond func(exampleJob) bool) exampleJob {
	t.Helper()
	var j exampleJob
	testkit.Eventually(t, timeout, what, func() error {
		j = exampleJob{}
		if status := doJSON(t, http.MethodGet, base+"/v1/jobs/"+id+"?region=eu", key, "", &j); status != http.StatusOK {
			t.Fatalf("GET job %s: %d", id, status)
		}
		if !cond(j) {
			return fmt.Errorf("job %s: %+v", id, j)
		}
		return nil
	})
	return j
}

// lateRefusal matches the API's counter of lease-lost answers to an
// external worker's outcome or heartbeat.
var lateRefusal = regexp.MustCompile(`(?m)^ratelane_api_requests_total\{route="POST /v1/jobs/\{id\}/(?:complete|fail|rate-limited|heartbeat)",status="409"\} (\d+)`)

var recoveredMetric = regexp.MustCompile(`(?m)^ratelane_leases_recovered_total (\d+)`)

// refusedLate reads the 409 answers to outcome and heartbeat routes from
// the server's /metrics.
func refusedLate(t *testing.T, rl *ratelaneServer) int {
	t.Helper()
	return metricValue(t, rl, lateRefusal)
}

// metricValue sums the values re captures in the server's /metrics.
func metricValue(t *testing.T, rl *ratelaneServer, re *regexp.Regexp) int {
	t.Helper()
	body := testkit.CallWant(t, nil, http.MethodGet, rl.url+"/metrics", rl.adminKey, nil, http.StatusOK, nil)
	n := 0
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}
