//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
)

// A walkthrough is a sequence of shell blocks in README.md or docs/*.md
// that a reader runs, in order, against a fresh `ratelane serve`. The docs
// mark them explicitly, so prose examples (placeholders, PostgreSQL URLs,
// `make` targets) are not forced to run:
//
//	<!-- walkthrough NAME serve -->   before a ```sh block holding one
//	                                  `ratelane serve [flags]` line
//	<!-- walkthrough NAME -->         before each ```sh block to run
//
// TestWalkthroughs builds the binary once, puts it on PATH as `ratelane`
// (what README's `go install` does), and for every walkthrough starts the
// serve line as written in an empty temporary directory (so
// ./ratelane-data is the default data dir the docs read), adding only
// `--addr` on a free loopback port. It then runs the walkthrough's blocks,
// concatenated, as one `bash -e -o pipefail` script in that directory. The
// only substitutions are environment variables the docs themselves read
// with a default: RATELANE_URL (the server) and RECEIVER_ADDR (a webhook
// receiver). A walkthrough passes when the script exits 0 and its output
// shows what the docs promise (walkthroughExpect).
var walkthroughMarker = regexp.MustCompile(`^<!--\s*walkthrough\s+([A-Za-z0-9_-]+)(\s+serve)?\s*-->\s*$`)

// walkthroughExpect lists, per "file#name", what the output must show: the
// promise the prose around the blocks makes. A walkthrough the docs mark
// but this table does not name still has to exit 0.
var walkthroughExpect = map[string][]*regexp.Regexp{
	// README's first job is of a kind nothing handles on a fresh server: the
	// API's job view and `ratelane jobs get` must say so, not wait silently.
	"README.md#quickstart": {
		regexp.MustCompile(`(?m)^warning: nothing handles kind "summarize" in region eu`),
		regexp.MustCompile(`"waiting_for":\{[^\n]*"summary":"nothing handles kind \\"summarize\\""`),
		regexp.MustCompile(`(?m)^waiting for:\s+nothing handles kind "summarize"`),
		regexp.MustCompile(`(?m)^predicted start:\s+never, until something handles its kind`),
		regexp.MustCompile(`(?m)^set openai:gpt-4o-mini: rate`),
		// ... and once a worker leases the kind, the job completes.
		regexp.MustCompile(`(?m)^state:\s+published$`),
	},
	// The webhooks walkthrough's delivery reaches its loopback receiver.
	"docs/webhooks.md#first-delivery": {
		regexp.MustCompile(`"state":"published"`),
		regexp.MustCompile(`"created":1`),
		regexp.MustCompile(`\{"accepted":1,"duplicates":0\}`),
	},
}

// walkthrough is one marked sequence of blocks of one file.
type walkthrough struct {
	file, name string
	serve      []string // the serve line's arguments after "ratelane serve"
	script     strings.Builder
	blocks     int
}

// parseWalkthroughs reads the marked blocks of one Markdown file.
func parseWalkthroughs(t *testing.T, root, file string) []*walkthrough {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*walkthrough{}
	var order []*walkthrough
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		m := walkthroughMarker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		name, isServe := m[1], m[2] != ""
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```sh" {
			t.Fatalf("%s:%d: a walkthrough marker must be followed directly by a ```sh block", file, i+1)
		}
		var body []string
		j := i + 2
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, lines[j])
		}
		if j == len(lines) {
			t.Fatalf("%s:%d: unterminated walkthrough block", file, i+1)
		}
		w := byName[name]
		if w == nil {
			w = &walkthrough{file: file, name: name}
			byName[name] = w
			order = append(order, w)
		}
		if isServe {
			if w.serve != nil || w.blocks > 0 {
				t.Fatalf("%s:%d: walkthrough %s: the serve block comes first, once", file, i+1, name)
			}
			w.serve = serveArgs(t, file, i+1, body)
		} else {
			if w.serve == nil {
				t.Fatalf("%s:%d: walkthrough %s has no serve block before its first block", file, i+1, name)
			}
			fmt.Fprintf(&w.script, "# %s:%d\n%s\n", file, i+3, strings.Join(body, "\n"))
			w.blocks++
		}
		i = j
	}
	return order
}

// serveArgs returns the flags of a serve block's single command line.
func serveArgs(t *testing.T, file string, line int, body []string) []string {
	t.Helper()
	var cmd []string
	for _, l := range body {
		if k := strings.Index(l, "#"); k >= 0 {
			l = l[:k]
		}
		if f := strings.Fields(l); len(f) > 0 {
			if cmd != nil {
				t.Fatalf("%s:%d: a serve block holds one command line", file, line)
			}
			cmd = f
		}
	}
	if len(cmd) < 2 || cmd[0] != "ratelane" || cmd[1] != "serve" {
		t.Fatalf("%s:%d: a serve block's command is `ratelane serve [flags]`, got %q", file, line, cmd)
	}
	for _, a := range cmd[2:] {
		if a == "--addr" || strings.HasPrefix(a, "--addr=") || strings.HasPrefix(a, "--data") {
			t.Fatalf("%s:%d: the serve block sets %s, which the test substitutes", file, line, a)
		}
	}
	return append([]string{}, cmd[2:]...)
}

func TestWalkthroughs(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the walkthroughs need %s on PATH (the docs use it): %v", tool, err)
		}
	}
	root := filepath.Join("..", "..")
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, filepath.ToSlash(rel))
	}
	sort.Strings(files[1:])
	var all []*walkthrough
	for _, f := range files {
		all = append(all, parseWalkthroughs(t, root, f)...)
	}
	found := map[string]bool{}
	for _, w := range all {
		found[w.file+"#"+w.name] = true
	}
	// Losing a marker must not turn this test into a no-op.
	for key := range walkthroughExpect {
		if !found[key] {
			t.Fatalf("walkthrough %s is no longer marked in the docs", key)
		}
	}

	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "ratelane"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, w := range all {
		t.Run(strings.ReplaceAll(w.file, "/", "_")+"#"+w.name, func(t *testing.T) {
			runWalkthrough(t, bin, w)
		})
	}
}

// runWalkthrough starts a fresh server for w and runs its script.
func runWalkthrough(t *testing.T, bin string, w *walkthrough) {
	if w.blocks == 0 {
		t.Fatalf("walkthrough %s#%s has a serve block and nothing to run", w.file, w.name)
	}
	dir := t.TempDir()
	addr, receiver := freeAddr(t), freeAddr(t)
	url := "http://" + addr
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"RATELANE_URL=" + url, "RECEIVER_ADDR=" + receiver}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RATELANE_") && !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "RECEIVER_") {
			env = append(env, kv)
		}
	}

	var serveLog testkit.Buffer
	serve := exec.Command(filepath.Join(bin, "ratelane"), append(append([]string{"serve"}, w.serve...), "--addr", addr)...)
	serve.Dir, serve.Env = dir, env
	serve.Stdout, serve.Stderr = &serveLog, &serveLog
	serve.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-serve.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-serve.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	waitServing(t, url, exited, &serveLog)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := "set -e -o pipefail\n" + w.script.String()
	sh := exec.CommandContext(ctx, "bash", "-c", script)
	sh.Dir, sh.Env = dir, env
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Blocks may start helpers in the background (a webhook receiver): end
	// the whole group, on timeout and after the script.
	sh.Cancel = func() error { return syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) }
	// A file, not a pipe: a helper left running in the background must not
	// hold the script's end open.
	outFile, err := os.OpenFile(filepath.Join(t.TempDir(), "output"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	sh.Stdout, sh.Stderr = outFile, outFile
	err = sh.Run()
	if sh.Process != nil {
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
	}
	outBytes, rerr := os.ReadFile(outFile.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	out := bytes.NewBuffer(outBytes)
	if err != nil {
		t.Fatalf("walkthrough %s#%s failed: %v\n--- script\n%s--- output\n%s--- serve log (tail)\n%s",
			w.file, w.name, err, script, out.String(), tail(serveLog.String(), 30))
	}
	for _, re := range walkthroughExpect[w.file+"#"+w.name] {
		if !re.Match(out.Bytes()) {
			t.Errorf("walkthrough %s#%s: output does not show %s\n--- output\n%s", w.file, w.name, re, out.String())
		}
	}
}

// apiKeyPattern matches an API key, which serve prints once at first start:
// a failing test shows the log without it.
var apiKeyPattern = regexp.MustCompile(`rl_[a-z0-9]+_[a-z0-9]+`)

// tail returns the last n lines of s, API keys redacted.
func tail(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		lines[i] = apiKeyPattern.ReplaceAllString(l, "rl_[redacted]")
	}
	return strings.Join(lines, "\n") + "\n"
}
