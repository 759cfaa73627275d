package ratelane_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// crashChildEnv makes the test binary act as a worker process.
const crashChildEnv = "RATELANE_CRASH_CHILD_DIR"

// TestCrashChild is the worker process of TestKill9Recovery; it does
// nothing unless started by it.
func TestCrashChild(t *testing.T) {
	dir := childDir(t, crashChildEnv, "TestKill9Recovery")
	// LeaseFor 10 s, not 2, for TestWebhookCrashChild's reason: under
	// `make test`'s parallel -race load a live child's finish can land more
	// than 2 s after its lease, and a job recovered while it was not held
	// at the kill fails checkPublishedOnce.
	cfg := ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}, Workers: 32, LeaseFor: 10 * time.Second}
	cfg.Handle("crash", ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, _ struct{}) (any, error) {
		time.Sleep(5 * time.Millisecond)
		return map[string]string{"id": j.ID}, nil
	}))
	startClient(t, cfg)
	select {} // until killed
}

// TestKill9Recovery is invariants 1 and 2 across a real crash: kill -9 a
// worker process with over 1,000 jobs unfinished, restart it, and every job
// ends published, with exactly one recorded success each.
func TestKill9Recovery(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	t.Parallel()
	dir := t.TempDir()
	const total = 2000
	producer, err := ratelane.NewClient(context.Background(), ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}})
	if err != nil {
		t.Fatal(err)
	}
	var ps []ratelane.InsertParams
	for i := range total {
		ps = append(ps, ratelane.InsertParams{Kind: "crash", Region: "us", LimitKeys: []string{"k" + strconv.Itoa(i%10)}})
	}
	if _, err := producer.InsertMany(context.Background(), ps); err != nil {
		t.Fatal(err)
	}

	child := startChild(t, "TestCrashChild", crashChildEnv, dir)
	waitPublished(t, producer, 200, time.Minute)
	held := kill9(t, producer, child)
	if n := countState(t, producer, job.StatePublished); n > total-1000 {
		t.Fatalf("only %d jobs were unfinished at the kill; the test needs over 1,000", total-n)
	}
	// 32 workers were busy: the kill must have left leases behind, or no
	// lease recovery was tested.
	if len(held) == 0 {
		t.Fatal("no job was running at the kill: the crash hit no lease")
	}

	startChild(t, "TestCrashChild", crashChildEnv, dir) // killed by its cleanup
	waitPublished(t, producer, total, 3*time.Minute)
	t.Logf("leases held at the kill and recovered once each: %d", checkPublishedOnce(t, producer, total, held))
	producer.Close()
}

// kill9 kills the child with SIGKILL, checks that it died of that signal
// (it was running, not already gone: the fault happened), and returns the
// ids of the jobs it left running: the leases the crash abandoned. The
// child is dead, so the store's running set is exactly what it held.
func kill9(t *testing.T, c *ratelane.Client, child *exec.Cmd) map[string]bool {
	t.Helper()
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill the child: %v", err)
	}
	_ = child.Wait()
	ws, ok := child.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed by SIGKILL mid-work: %v", child.ProcessState)
	}
	held := map[string]bool{}
	for _, j := range allJobs(t, c, ratelane.ListParams{State: job.StateRunning}) {
		held[j.ID] = true
	}
	return held
}

// allJobs returns every job matching p, paging through List: checks that
// read only the first page would miss jobs past it.
func allJobs(t *testing.T, c *ratelane.Client, p ratelane.ListParams) []*ratelane.Job {
	t.Helper()
	p.Limit = 1000
	var out []*ratelane.Job
	for {
		page, err := c.List(context.Background(), "us", p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if len(page) < p.Limit {
			return out
		}
		p.After = page[len(page)-1].ID
	}
}

// checkRecovered checks, over every job in the store, that each lease held
// at the kill was recovered exactly once (one lease_expired attempt in its
// history) and that no other job was recovered. It returns how many were.
func checkRecovered(t *testing.T, c *ratelane.Client, held map[string]bool) int {
	t.Helper()
	n := 0
	for _, j := range allJobs(t, c, ratelane.ListParams{}) {
		n += recoveries(t, c, j.ID, held)
	}
	if n != len(held) {
		t.Fatalf("%d recoveries for %d leases held at the kill", n, len(held))
	}
	return n
}

// recoveries returns the job's lease recoveries, failing unless it has one
// exactly when its lease was held at the kill.
func recoveries(t *testing.T, c *ratelane.Client, id string, held map[string]bool) int {
	t.Helper()
	full, err := c.Job(context.Background(), "us", id)
	if err != nil {
		t.Fatal(err)
	}
	return recoveriesOf(t, full, held)
}

func recoveriesOf(t *testing.T, j *ratelane.Job, held map[string]bool) int {
	t.Helper()
	got := storetest.CountOutcome(j, job.ClassLeaseExpired)
	want := 0
	if held[j.ID] {
		want = 1
	}
	if got != want {
		t.Fatalf("job %s (%s, running at the kill: %v) has %d lease recoveries, want %d: %v", j.ID, j.Kind, held[j.ID], got, want, j.History)
	}
	return got
}

// childDir opens every child test (the kill -9 tests' worker processes,
// started by startChild or, for TestBatchKill9, its own command): the
// directory the parent test set in env, or, when env is unset (a plain
// `go test` run reaching the child test itself), a skip naming the parent.
func childDir(t *testing.T, env, parent string) string {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		t.Skip("run by " + parent + " as a subprocess")
	}
	return dir
}

// startChild re-runs this test binary as a worker process that runs only
// the named test, with env set to dir; t.Cleanup kills it if it still runs.
// The kill -9 tests of jobs, webhooks and reviews all start their workers
// this way.
func startChild(t *testing.T, test, env, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v=false")
	cmd.Env = append(os.Environ(), env+"="+dir)
	return startCmd(t, cmd)
}

// startCmd starts cmd (its stderr the test's, unless set) and kills it in
// t.Cleanup if it still runs; startChild and the `ratelane serve` children
// of the crash-point tests share it.
func startCmd(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	})
	return cmd
}

// successes counts the successful attempts recorded in a job's history.
func successes(j *ratelane.Job) int {
	return storetest.CountOutcome(j, job.ClassSuccess)
}

func countState(t *testing.T, c *ratelane.Client, state ratelane.State) int {
	t.Helper()
	return len(allJobs(t, c, ratelane.ListParams{State: state}))
}

// waitPublished waits until want jobs are published. Its timeout only
// bounds a hang: it is no speed target (those live in benchmarks), so it
// is generous enough for a -race run on a loaded 2-core machine.
func waitPublished(t *testing.T, c *ratelane.Client, want int, timeout time.Duration) {
	t.Helper()
	testkit.Eventually(t, timeout, fmt.Sprintf("%d jobs to publish", want), func() error {
		if n := countState(t, c, job.StatePublished); n < want {
			return fmt.Errorf("%d of %d published", n, want)
		}
		return nil
	})
}

// checkPublishedOnce checks every job in the store, page after page: all
// total of them published, each with exactly one recorded success, and
// each lease held at the kill recovered exactly once (see recoveries). It
// returns the number of recoveries.
func checkPublishedOnce(t *testing.T, c *ratelane.Client, total int, held map[string]bool) int {
	t.Helper()
	all := allJobs(t, c, ratelane.ListParams{})
	if len(all) != total {
		t.Fatalf("the store holds %d jobs, want %d", len(all), total)
	}
	recovered := 0
	for _, j := range all {
		full, err := c.Job(context.Background(), "us", j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if full.State != job.StatePublished {
			t.Fatalf("job %s is %s, want published", j.ID, full.State)
		}
		if n := successes(full); n != 1 {
			t.Fatalf("job %s recorded %d successes: %s", j.ID, n, fmt.Sprint(full.History))
		}
		recovered += recoveriesOf(t, full, held)
	}
	if recovered != len(held) {
		t.Fatalf("%d recoveries for %d leases held at the kill", recovered, len(held))
	}
	return recovered
}
