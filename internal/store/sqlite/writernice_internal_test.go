//go:build linux

package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// threadNice is thread tid's nice (Linux's getpriority returns 20 - nice).
func threadNice(t *testing.T, tid int) int {
	t.Helper()
	p, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	if err != nil {
		t.Fatalf("getpriority %d: %v", tid, err)
	}
	return 20 - p
}

// niceThreads is the process's threads whose nice is n.
func niceThreads(t *testing.T, n int) map[int]bool {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]bool{}
	for _, d := range tasks {
		tid, _ := strconv.Atoi(d.Name())
		if p, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid); err == nil && 20-p == n {
			out[tid] = true
		}
	}
	return out
}

// TestWriterNiceThread: with WriterNice every write runs on one OS thread, that
// thread has the nice and no other thread of the process does, and the
// thread ends with the store (its priority never reaches another
// goroutine).
func TestWriterNiceThread(t *testing.T) {
	// Threads already at nice 7 are not the store's: an earlier store's
	// writer that ran on the main thread, which Go parks for good with its
	// nice (below).
	before := niceThreads(t, 7)
	s := OpenTest(t, Config{WriterNice: 7})
	ctx := context.Background()
	// Churn Go's threads meanwhile: goroutines that block in system calls
	// and yield, so that an unlocked writer, parked between writes, is
	// resumed on other threads.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				os.ReadFile("/proc/self/stat")
				runtime.Gosched()
			}
		}()
	}
	var tids []int // appended by the writer goroutine only
	for i := range 200 {
		err := s.write(ctx, func(tx *writeTx) error {
			tids = append(tids, syscall.Gettid())
			_, err := s.exec(tx, `CREATE TABLE IF NOT EXISTS nice_probe (n INTEGER)`)
			if err == nil {
				_, err = s.exec(tx, `INSERT INTO nice_probe (n) VALUES (?)`, i)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	w := tids[0]
	for i, tid := range tids {
		if tid != w {
			t.Fatalf("write %d ran on thread %d, write 0 on %d: the writer is not locked to its thread", i, tid, w)
		}
	}
	if n := threadNice(t, w); n != 7 {
		t.Fatalf("writer thread %d has nice %d, want 7", w, n)
	}
	for tid := range niceThreads(t, 7) {
		if tid != w && !before[tid] {
			t.Errorf("thread %d, not the writer's, has the writer's nice", tid)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Go ends a thread whose goroutine returns locked to it, just after
	// the writer's last deferred call (close(s.done)) that Close waited
	// for; the process's main thread it parks for good instead (it runs no
	// goroutine again), which cannot be told from outside.
	if w == os.Getpid() {
		t.Logf("the writer ran on the main thread, which Go parks rather than ends: its end not checked")
		return
	}
	dir := filepath.Join("/proc/self/task", strconv.Itoa(w))
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer thread %d outlived Close: its nice may reach other goroutines", w)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWriterNiceRefused: when the OS refuses the nice, Open fails naming
// the field and leaves nothing running (TestMain's leak check).
func TestWriterNiceRefused(t *testing.T) {
	// A nice below the process's needs CAP_SYS_NICE, which the tests may
	// well have (root): the refusal is made instead.
	defer func(f func(int) error) { writerNiceHook = f }(writerNiceHook)
	writerNiceHook = func(n int) error {
		runtime.LockOSThread()
		return syscall.EPERM
	}
	_, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "us.db"), Region: "us", WriterNice: -5})
	if err == nil || !errors.Is(err, syscall.EPERM) || !strings.Contains(err.Error(), "WriterNice -5") {
		t.Fatalf("Open = %v, want an EPERM naming WriterNice -5", err)
	}
}

// TestWriterNiceValidate: the nice's range.
func TestWriterNiceValidate(t *testing.T) {
	for _, n := range []int{-21, 20, 100} {
		_, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "us.db"), Region: "us", WriterNice: n})
		if err == nil || !strings.Contains(err.Error(), "WriterNice must be from -20 to 19") {
			t.Errorf("WriterNice %d: Open = %v, want the range error", n, err)
		}
	}
}
