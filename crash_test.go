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
)

// crashChildEnv makes the test binary act as a worker process.
const crashChildEnv = "RATELANE_CRASH_CHILD_DIR"

// TestCrashChild is the worker process of TestKill9Recovery; it does
// nothing unless started by it.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("run by TestKill9Recovery as a subprocess")
	}
	cfg := ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}, Workers: 32, LeaseFor: 2 * time.Second}
	cfg.Handle("crash", ratelane.WorkFunc(func(ctx context.Context, j *ratelane.Job, _ struct{}) (any, error) {
		time.Sleep(5 * time.Millisecond)
		return map[string]string{"id": j.ID}, nil
	}))
	c, err := ratelane.NewClient(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
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
	waitPublished(t, producer, 200, 20*time.Second)
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	if n := countState(t, producer, job.StatePublished); n > total-1000 {
		t.Fatalf("only %d jobs were unfinished at the kill; the test needs over 1,000", total-n)
	}

	startChild(t, "TestCrashChild", crashChildEnv, dir) // killed by its cleanup
	waitPublished(t, producer, total, 60*time.Second)
	checkPublishedOnce(t, producer, total)
	producer.Close()
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
	n := 0
	for _, h := range j.History {
		if h.Outcome == job.ClassSuccess {
			n++
		}
	}
	return n
}

func countState(t *testing.T, c *ratelane.Client, state ratelane.State) int {
	t.Helper()
	n, after := 0, ""
	for {
		page, err := c.List(context.Background(), "us", ratelane.ListParams{State: state, After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		n += len(page)
		if len(page) < 1000 {
			return n
		}
		after = page[len(page)-1].ID
	}
}

func waitPublished(t *testing.T, c *ratelane.Client, want int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := countState(t, c, job.StatePublished)
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d published after %v", n, want, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkPublishedOnce(t *testing.T, c *ratelane.Client, total int) {
	t.Helper()
	if n := countState(t, c, job.StatePublished); n != total {
		t.Fatalf("%d of %d published", n, total)
	}
	page, err := c.List(context.Background(), "us", ratelane.ListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range page {
		full, err := c.Job(context.Background(), "us", j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if n := successes(full); n != 1 {
			t.Fatalf("job %s recorded %d successes: %s", j.ID, n, fmt.Sprint(full.History))
		}
	}

}
