package schedule_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/schedule"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// childEnv carries the store path to the child process of
// TestKill9DuringClaims.
const childEnv = "RATELANE_SCHEDULE_KILL_CHILD"

// killTicks is how many ticks are due when the child starts.
const killTicks = 600

var killNow = t0.Add((killTicks - 1) * time.Second)

// TestKill9DuringClaims kills a producer with SIGKILL while it claims a
// long catch-up, three times, at whatever point it has reached (inside a
// claim's transaction, between claims), and checks after each kill that
// every claimed tick has exactly one job and no job lacks its tick; then a
// fresh producer finishes, and every tick was enqueued exactly once.
func TestKill9DuringClaims(t *testing.T) {
	if path := os.Getenv(childEnv); path != "" {
		runKillChild(t, path)
		return
	}
	if testing.Short() {
		t.Skip("starts child processes")
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "us.db")
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sc := storetest.NewSchedule("acme", "per-second")
	sc.Cron, sc.Every, sc.Anchor = "", time.Second, t0
	sc.Missed, sc.CatchUpMax, sc.MaxLate = store.MissedCatchUp, schedule.MaxCatchUp, 24*time.Hour
	sc.Template, sc.Kind = json.RawMessage(`{"kind":"report.build","limit_keys":["reports"]}`), "report.build"
	if err := st.CreateSchedule(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	last := int64(0)
	for round := range 3 {
		cmd := exec.Command(exe, "-test.run", "^TestKill9DuringClaims$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
		// Kill once the child made some progress (or at once if it has
		// finished already: then the kill finds nothing to interrupt).
		testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("the child of round %d to claim ticks", round), func() bool {
			select {
			case <-exited:
				return true
			default:
			}
			got, err := st.GetSchedule(context.Background(), sc.ID)
			if err != nil {
				t.Fatal(err)
			}
			return got.Produced >= last+40+int64(round)*13
		})
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		last = checkLedger(t, st, sc.ID)
		t.Logf("round %d: killed after %d ticks", round, last)
	}
	// A fresh producer finishes the catch-up.
	jobs, _ := engine.NewJobs(engine.JobsConfig{Store: st})
	p, _ := schedule.New(schedule.Config{Store: st, Jobs: jobs, Regions: []string{"us"}})
	if _, err := p.RunOnce(context.Background(), killNow); err != nil {
		t.Fatal(err)
	}
	if n := checkLedger(t, st, sc.ID); n != killTicks {
		t.Fatalf("%d ticks enqueued after the kills and a finishing poll, want %d", n, killTicks)
	}
}

// checkLedger checks that the schedule, its ledger and its jobs agree, and
// returns how many ticks were enqueued.
func checkLedger(t *testing.T, st store.Store, id string) int64 {
	t.Helper()
	ctx := context.Background()
	sc, err := st.GetSchedule(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ticks, err := st.ListScheduleTicks(ctx, id, store.MaxListLimit)
	if err != nil {
		t.Fatal(err)
	}
	jobs := producedJobs(t, st)
	if int64(len(jobs)) != sc.Produced || int64(len(ticks)) != sc.Produced {
		t.Fatalf("%d jobs, %d ledger entries, produced %d: a tick was lost or duplicated", len(jobs), len(ticks), sc.Produced)
	}
	byKey := map[string]string{}
	for _, j := range jobs {
		if _, dup := byKey[j.IdempotencyKey]; dup {
			t.Fatalf("two jobs for %s", j.IdempotencyKey)
		}
		byKey[j.IdempotencyKey] = j.ID
	}
	for _, tk := range ticks {
		if byKey[schedule.TickKey(id, tk.Tick)] != tk.JobID {
			t.Fatalf("ledger tick %s names job %s, which is not the tick's job", tk.Tick, tk.JobID)
		}
	}
	if want := t0.Add(time.Duration(sc.Produced) * time.Second); !sc.NextAt.Equal(want) && sc.Produced < killTicks {
		t.Fatalf("next tick %s after %d ticks, want %s", sc.NextAt, sc.Produced, want)
	}
	return sc.Produced
}

// runKillChild is the child: one poll that claims every due tick, until
// the parent kills it.
func runKillChild(t *testing.T, path string) {
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	jobs, _ := engine.NewJobs(engine.JobsConfig{Store: st})
	p, _ := schedule.New(schedule.Config{Store: st, Jobs: jobs, Regions: []string{"us"}})
	if _, err := p.RunOnce(context.Background(), killNow); err != nil {
		t.Fatal(err)
	}
}
