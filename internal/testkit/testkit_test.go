package testkit_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratelane/ratelane/internal/testkit"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as testing.T's does, without failing the real test.
type fatalRecorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.msg = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// failure runs f on a recorder in its own goroutine and returns what it
// failed with ("" when it returned).
func failure(t *testing.T, f func(testing.TB)) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msg
}

func TestWaitForSeesTheCondition(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ready := start.Add(3 * time.Second)
		msg := failure(t, func(tb testing.TB) {
			testkit.WaitFor(tb, 10*time.Second, "the clock", func() bool { return !time.Now().Before(ready) })
		})
		if msg != "" {
			t.Fatalf("WaitFor failed: %s", msg)
		}
		// Polls back off to 50 ms, no more: the condition is seen soon after it holds.
		if d := time.Since(ready); d > 50*time.Millisecond {
			t.Fatalf("condition seen %v after it held, want within the 50 ms poll", d)
		}
	})
}

func TestWaitForTimesOut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		msg := failure(t, func(tb testing.TB) {
			testkit.WaitFor(tb, 5*time.Second, "nothing", func() bool { return false })
		})
		if msg != "timed out after 5s waiting for nothing" {
			t.Fatalf("message = %q", msg)
		}
		if d := time.Since(start); d < 5*time.Second || d > 5*time.Second+50*time.Millisecond {
			t.Fatalf("gave up after %v, want 5s", d)
		}
	})
}

func TestEventuallyReportsTheLastError(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		n := 0
		msg := failure(t, func(tb testing.TB) {
			testkit.Eventually(tb, time.Second, "the job to publish", func() error {
				n++
				return fmt.Errorf("job j1 is waiting (check %d)", n)
			})
		})
		want := fmt.Sprintf("timed out after 1s waiting for the job to publish: job j1 is waiting (check %d)", n)
		if msg != want || n < 2 {
			t.Fatalf("message = %q after %d checks, want %q", msg, n, want)
		}
		if msg := failure(t, func(tb testing.TB) {
			testkit.Eventually(tb, time.Second, "x", func() error { return nil })
		}); msg != "" {
			t.Fatalf("a check that holds failed: %s", msg)
		}
	})
}

// TestUntil: Until returns nil once the check holds, and the check's last
// error once the deadline passes, failing no test either way (it is for
// goroutines and benchmarks).
func TestUntil(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		n := 0
		if err := testkit.Until(time.Second, func() error {
			if n++; n < 3 {
				return fmt.Errorf("check %d", n)
			}
			return nil
		}); err != nil || n != 3 {
			t.Fatalf("Until = %v after %d checks, want nil after 3", err, n)
		}
		start := time.Now()
		n = 0
		err := testkit.Until(2*time.Second, func() error { n++; return fmt.Errorf("check %d", n) })
		if want := fmt.Sprintf("check %d", n); err == nil || err.Error() != want {
			t.Fatalf("Until = %v, want the last check's error %q", err, want)
		}
		if d := time.Since(start); d < 2*time.Second || d > 2*time.Second+50*time.Millisecond {
			t.Fatalf("gave up after %v, want 2s", d)
		}
	})
}

func TestRecv(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ch := make(chan int, 1)
		go func() {
			time.Sleep(time.Second)
			ch <- 7
		}()
		var got int
		if msg := failure(t, func(tb testing.TB) { got = testkit.Recv(tb, ch, 2*time.Second, "seven") }); msg != "" || got != 7 {
			t.Fatalf("Recv = %d, %q; want 7", got, msg)
		}
		signal := make(chan struct{})
		close(signal)
		if msg := failure(t, func(tb testing.TB) { testkit.Recv(tb, signal, time.Second, "a closed signal") }); msg != "" {
			t.Fatalf("a closed signal channel: %s", msg)
		}
		msg := failure(t, func(tb testing.TB) { testkit.Recv(tb, make(chan struct{}), time.Second, "the handler to start") })
		if msg != "timed out after 1s waiting for the handler to start" {
			t.Fatalf("message = %q", msg)
		}
	})
}

func TestClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		c := testkit.NewClock(t0)
		time.Sleep(time.Second)
		if got := c.Now(); !got.Equal(t0) {
			t.Fatalf("a standing clock moved to %v", got)
		}
		c.Add(2 * time.Second)
		if got := c.Now(); !got.Equal(t0.Add(2 * time.Second)) {
			t.Fatalf("after Add(2s): %v", got)
		}
		c.Run()
		time.Sleep(time.Second)
		if got := c.Now(); !got.Equal(t0.Add(3 * time.Second)) {
			t.Fatalf("running a second: %v, want t0+3s", got)
		}
		c.Freeze()
		time.Sleep(time.Second)
		if got := c.Now(); !got.Equal(t0.Add(3 * time.Second)) {
			t.Fatalf("frozen: %v, want t0+3s", got)
		}
		c.Set(t0)
		if got := c.Now(); !got.Equal(t0) {
			t.Fatalf("after Set(t0): %v", got)
		}
		r := testkit.NewRunningClock()
		r.Add(time.Hour)
		time.Sleep(time.Second)
		if got := time.Until(r.Now()); got != time.Hour {
			t.Fatalf("a running clock with Add(1h) reads real time + %v", got)
		}
	})
}

// TestPostgresSchema: the names are fresh, and the schema a test created
// is gone when the test ends.
func TestPostgresSchema(t *testing.T) {
	t.Parallel()
	// Skip here too: the subtest's skip would leave the names empty and
	// fail the checks below on a machine without PostgreSQL.
	testkit.PostgresURL(t)
	ctx := context.Background()
	var url, a, b string
	t.Run("inner", func(t *testing.T) {
		url, a = testkit.PostgresSchema(t, "rl_testkit_")
		_, b = testkit.PostgresSchema(t, "rl_testkit_")
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{a}.Sanitize()+"; CREATE TABLE "+pgx.Identifier{a, "t"}.Sanitize()+" (x int)"); err != nil {
			t.Fatal(err)
		}
	})
	if a == b || !strings.HasPrefix(a, "rl_testkit_") || len(a) != len("rl_testkit_")+12 {
		t.Fatalf("schemas %q and %q; want two distinct rl_testkit_ names with 12 hex digits", a, b)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", a).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s: %d left after its test (%v), want dropped", a, n, err)
	}
}
