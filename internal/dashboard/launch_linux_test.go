package dashboard_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
)

// groupProcAttr starts the browser in a process group of its own, killed
// with the test process (Pdeathsig, as chromedp sets it), so that a failed
// launch's children can be killed with it.
func groupProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills the process group led by pid: what a failed launch forked.
func killGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// TestLaunchKillsAFailedLaunch launches a "browser" that never prints a
// DevTools URL and forks a child: every attempt times out, and after each
// both processes are gone.
func TestLaunchKillsAFailedLaunch(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "fake-chromium")
	script := "#!/bin/sh\nsleep 300 &\necho \"$$ $!\" >> " + filepath.Join(dir, "pids") + "\nwait\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := launch(t, exe, t.TempDir, 500*time.Millisecond, 2); err == nil {
		b.close()
		t.Fatal("launch of a browser that never answers did not fail")
	} else if !strings.Contains(err.Error(), "websocket url timeout reached") {
		t.Fatalf("launch failed with %v, want chromedp's websocket url timeout", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Fields(string(b))
	if len(pids) != 4 {
		t.Fatalf("pids %q: want 2 attempts, each a shell and its child", pids)
	}
	for _, p := range pids {
		pid, _ := strconv.Atoi(p)
		testkit.WaitFor(t, 10*time.Second, "process "+p+" of a failed launch to be gone", func() bool {
			return gone(pid)
		})
	}
}

// gone reports whether pid has exited: no such process, or a zombie
// waiting for a parent (init, here) to reap it.
func gone(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return os.IsNotExist(err)
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
