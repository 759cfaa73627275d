package deptest

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/ratelane/ratelane"

// pkg is what `go list -json` says of one package.
type pkg struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Deps       []string
}

// list runs `go list -deps -json` over patterns and returns every package
// seen (the patterns' and their dependencies) by import path.
func list(t *testing.T, patterns ...string) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Standard,Imports,Deps"}, patterns...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// under reports whether path is the package dir or below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// llmSDKs are the module paths of LLM provider SDKs.
var llmSDKs = []string{"github.com/openai/openai-go", "github.com/anthropics/anthropic-sdk-go"}

func isLLM(path string) bool {
	for _, m := range llmSDKs {
		if strings.HasPrefix(path, m) {
			return true
		}
	}
	return false
}

// rootLLMExceptions are the module packages through which the root package
// links an LLM SDK today: reviews still live in the root (issue 11 item 3
// moves them into a plug-in and empties this list). The test fails if any
// other package starts pulling an SDK into the core.
var rootLLMExceptions = []string{mod + "/internal/review/provider"}

// TestLayering encodes the intended import graph.
func TestLayering(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	pkgs := list(t, mod+"/...")
	inModule := func(p string) bool { return under(p, mod) }

	// allowOnly fails when a module package of deps is not in allowed.
	allowOnly := func(name string, allowed ...string) {
		t.Helper()
		p, ok := pkgs[name]
		if !ok {
			t.Fatalf("package %s not listed", name)
		}
		for _, d := range p.Deps {
			dp := pkgs[d]
			if dp.Standard {
				continue
			}
			if !inModule(d) {
				t.Errorf("%s depends on %s outside the module; it may use only the standard library and %v", name, d, allowed)
				continue
			}
			if !slices.Contains(allowed, d) {
				t.Errorf("%s depends on %s; it may depend only on %v", name, d, allowed)
			}
		}
	}
	vocab, job := mod+"/rltype", mod+"/internal/job"
	admission, st := mod+"/internal/admission", mod+"/internal/store"
	// The public vocabulary imports only the standard library.
	allowOnly(vocab)
	// internal/job is rltype's alias and nothing more.
	allowOnly(job, vocab)
	// admission and the store contract sit on the vocabulary only.
	allowOnly(admission, vocab, job)
	allowOnly(st, vocab, job, admission)
	// The batch client is a leaf the batch lane is wired onto: it may link
	// the LLM SDKs but, within the module, only the header parsers (and
	// their vocabulary), never the engine, the store or the API.
	if p, ok := pkgs[mod+"/internal/llmbatch"]; ok {
		allowed := []string{mod + "/internal/ratelimit", vocab}
		for _, d := range p.Deps {
			if inModule(d) && !slices.Contains(allowed, d) {
				t.Errorf("internal/llmbatch depends on %s; within the module it may depend only on %v", d, allowed)
			}
		}
	}

	for name, p := range pkgs {
		if !inModule(name) {
			continue
		}
		deps := p.Deps
		has := func(dir string) bool {
			return slices.ContainsFunc(deps, func(d string) bool { return under(d, dir) })
		}
		// Drivers implement the store contract; they never import the engine.
		if under(name, st+"/sqlite") || under(name, st+"/postgres") {
			if has(mod + "/internal/engine") {
				t.Errorf("store driver %s imports the engine", name)
			}
		}
		// Nothing imports the binary; only the composition level imports
		// the root package, and only the root and the binary the HTTP API.
		if has(mod + "/cmd") {
			t.Errorf("%s imports the binary's package", name)
		}
		composition := name == mod || under(name, mod+"/cmd") || under(name, mod+"/examples") ||
			name == mod+"/internal/bench" || name == mod+"/internal/demo"
		if !composition && slices.Contains(deps, mod) {
			t.Errorf("%s imports the root package; only cmd, examples, internal/bench and internal/demo may", name)
		}
		// The dashboard is a client of the API's handler (every data request
		// goes through it with the session's key), so it sits just above it.
		apiClient := under(name, mod+"/internal/httpapi") || under(name, mod+"/internal/dashboard")
		if !composition && has(mod+"/internal/httpapi") && !apiClient {
			t.Errorf("%s imports the HTTP API; only the dashboard, the root package and above may", name)
		}
		// The engine and everything below it link no LLM SDK.
		if under(name, mod+"/internal/engine") || under(name, st) || name == admission || name == job || name == vocab {
			if slices.ContainsFunc(deps, isLLM) {
				t.Errorf("%s links an LLM SDK", name)
			}
		}
	}

	// The core library imports no LLM SDK, except through the known
	// exceptions (reviews, still in the root).
	root := pkgs[mod]
	for _, d := range root.Deps {
		dp := pkgs[d]
		if !inModule(d) || !slices.ContainsFunc(dp.Imports, isLLM) {
			continue
		}
		if !slices.Contains(rootLLMExceptions, d) {
			t.Errorf("the root package links an LLM SDK through %s; only %v may (and issue 11 item 3 removes them)", d, rootLLMExceptions)
		}
	}
	for _, e := range rootLLMExceptions {
		if !slices.Contains(root.Deps, e) {
			t.Errorf("%s no longer reaches the root package: remove it from rootLLMExceptions", e)
		}
	}
}
