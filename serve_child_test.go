package ratelane_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
)

// buildRatelane returns the path of cmd/ratelane built with the given
// build tags, built once per test binary (buildOnce).
func buildRatelane(t *testing.T, tags string) string {
	t.Helper()
	return buildOnce(t, "./cmd/ratelane", tags)
}

// built is one binary the package's tests run, built at most once.
type built struct {
	once sync.Once
	path string
	err  error
}

var (
	// builds holds the binaries built so far, keyed by package and tags.
	builds sync.Map // string -> *built
	// buildDir is where they go; TestMain removes it after the tests.
	buildDir struct {
		sync.Mutex
		path string
	}
)

// buildOnce builds pkg (a path from the module root) with the given build
// tags the first time any test asks for it and returns the binary's path;
// later callers, and callers racing the first, wait for that one build.
// Every `go build` after the first is still a full link of the binary
// (the go build cache keeps compiled packages, not linked programs): on a
// loaded 2-core machine each cmd/ratelane link cost tens of seconds, and
// five tests linked the same one. The tests run the binaries and never
// change them, so one copy serves them all; each test still gets its own
// data and working directories.
func buildOnce(t *testing.T, pkg, tags string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg+"|"+tags, &built{})
	b := v.(*built)
	b.once.Do(func() { b.path, b.err = goBuild(pkg, tags) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// goBuild builds pkg with tags into a fresh file under buildDir.
func goBuild(pkg, tags string) (string, error) {
	buildDir.Lock()
	if buildDir.path == "" {
		dir, err := os.MkdirTemp("", "ratelane-test-bin-")
		if err != nil {
			buildDir.Unlock()
			return "", err
		}
		buildDir.path = dir
	}
	dir := buildDir.path
	buildDir.Unlock()
	out, err := os.MkdirTemp(dir, "")
	if err != nil {
		return "", err
	}
	out = filepath.Join(out, path.Base(pkg))
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if b, err := exec.CommandContext(ctx, "go", append(args, pkg)...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s (tags %q): %v\n%s", pkg, tags, err, b)
	}
	return out, nil
}

// removeBuilds deletes what goBuild made; TestMain calls it after the tests.
func removeBuilds() {
	buildDir.Lock()
	defer buildDir.Unlock()
	if buildDir.path != "" {
		os.RemoveAll(buildDir.path)
	}
}

// server is one `ratelane serve` child process.
type server struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string // set once it serves
	stderr *testkit.Buffer
	done   chan struct{} // closed when it exited
	code   int
}

const testAdminKey = "rl_crashtst_0123456789abcdefghijABCDEFGHIJ0123456789abcdefgh"

// startServe runs `bin serve` on dir (region us, a free loopback port)
// with extra environment, and waits until it serves or exits.
func startServe(t *testing.T, bin, dir string, env ...string) *server {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--data", dir, "--regions", "us", "--addr", "127.0.0.1:0",
		"--allow-private-targets", "--log-format", "text")
	cmd.Env = append(append(os.Environ(), "RATELANE_ADMIN_KEY="+testAdminKey), env...)
	s := &server{t: t, cmd: cmd, stderr: &testkit.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = s.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	startCmd(t, cmd)
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "ratelane: serving "); ok {
				serving <- strings.Fields(rest)[0]
			}
		}
		io.Copy(io.Discard, stdout)
		// Wait only after stdout is drained (os/exec's rule for pipes).
		cmd.Wait()
		s.code = cmd.ProcessState.ExitCode()
		close(s.done)
	}()
	// Runs before startCmd's cleanup (LIFO): the second Wait then returns
	// at once instead of racing this one.
	t.Cleanup(func() { cmd.Process.Kill(); <-s.done })
	select {
	case s.url = <-serving:
	case <-s.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("ratelane serve did not start in 60 s; stderr:\n%s", s.stderr)
	}
	return s
}

// wait waits for the process to exit and returns its status.
func (s *server) wait(timeout time.Duration) int {
	s.t.Helper()
	select {
	case <-s.done:
		return s.code
	case <-time.After(timeout):
		s.t.Fatalf("ratelane serve still runs after %v; stderr:\n%s", timeout, s.stderr)
		return 0
	}
}

// stop ends the process as an operator would (SIGINT) and waits.
func (s *server) stop() {
	s.t.Helper()
	s.cmd.Process.Signal(os.Interrupt)
	s.wait(60 * time.Second)
}

// do sends one admin request and decodes a JSON answer into out (if set).
// A transport error (the process died mid-request) is returned, not fatal.
func (s *server) do(method, path string, body, out any) (int, http.Header, error) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, resp.Header, err
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, resp.Header, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, nil
}

// TestServeRefusesCorruptStore is item 6 end to end: random bytes over the
// header of a region's SQLite file, and `ratelane serve` and
// `ratelane migrate` exit 1 with a message naming the file and the remedy,
// instead of serving it.
func TestServeRefusesCorruptStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := buildRatelane(t, "")
	dir := t.TempDir()
	c, err := ratelane.NewClient(context.Background(), ratelane.Config{DataDir: dir, Regions: []ratelane.Region{{Name: "us"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Insert(context.Background(), ratelane.InsertParams{Kind: "k", Region: "us", LimitKeys: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	path := filepath.Join(dir, "us.db")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5, 0x5a, 0x13, 0x37}, 64), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, sub := range []string{"serve", "migrate"} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(ctx, bin, sub, "--data", dir, "--regions", "us", "--addr", "127.0.0.1:0").CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("ratelane %s on a damaged store: %v, want exit 1\n%s", sub, err, out)
		}
		for _, want := range []string{path, "damaged", "restore", "backup", `region "us"`} {
			if !strings.Contains(string(out), want) {
				t.Errorf("ratelane %s: message does not say %q:\n%s", sub, want, out)
			}
		}
		if strings.Contains(string(out), "serving") {
			t.Errorf("ratelane %s served a damaged store:\n%s", sub, out)
		}
	}
}

// TestServeFileModes starts `ratelane serve` on a fresh data directory
// (the admin key generated, not given) with the umask of the test process
// (usually 022) and checks every file it creates.
func TestServeFileModes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := buildRatelane(t, "")
	dir := filepath.Join(t.TempDir(), "data")
	cmd := exec.Command(bin, "serve", "--data", dir, "--regions", "us", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "RATELANE_ADMIN_KEY=")
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = io.Discard
	startCmd(t, cmd)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "ratelane: serving") {
	}
	go io.Copy(io.Discard, stdout)
	want := map[string]os.FileMode{
		dir: 0o700, "us.db": 0o600, "us.db-wal": 0o600, "us.db-shm": 0o600,
		"control.db": 0o600, "admin.key": 0o600,
	}
	for name, mode := range want {
		p := name
		if name != dir {
			p = filepath.Join(dir, name)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := fi.Mode().Perm(); got != mode {
			t.Errorf("%s: mode %o, want %o", name, got, mode)
		}
	}
}
