package deptest

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	pkgs := map[string]pkg{}
	for _, p := range goList[pkg](t, append([]string{"-deps", "-json=ImportPath,Standard,Imports,Deps"}, patterns...)...) {
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// goList runs `go list` with args (one of them a -json flag) at the
// module's root and decodes the packages it prints, in its order.
func goList[P any](t *testing.T, args ...string) []P {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []P
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p P
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
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

// TestLayering encodes the intended import graph.
func TestLayering(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	pkgs := list(t, mod+"/...")
	inModule := func(p string) bool { return under(p, mod) }

	for _, l := range layers {
		for _, v := range l.check(pkgs) {
			t.Error(v)
		}
	}
	vocab := mod + "/rltype"
	job, admission, st := mod+"/internal/job", mod+"/internal/admission", mod+"/internal/store"
	httpapi := mod + "/internal/httpapi"
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
		// A plug-in sits on the root package: it binds to a Client's
		// regions through ratelane.Plugin.
		plugin := slices.ContainsFunc(publicPlugins, func(pl string) bool { return under(name, pl) })
		if !composition && !plugin && slices.Contains(deps, mod) {
			t.Errorf("%s imports the root package; only cmd, examples, internal/bench, internal/demo and plug-ins (%v) may", name, publicPlugins)
		}
		// The dashboard is a client of the API's handler (every data request
		// goes through it with the session's key), so it sits just above it.
		// Plug-ins' routes use only the mount point (internal/httpapi/mount),
		// which is below the server.
		apiClient := name == httpapi || under(name, mod+"/internal/dashboard")
		// (A plug-in reaches the server through the root package; it must
		// not import it itself.)
		importsAPI := slices.Contains(deps, httpapi)
		if plugin {
			importsAPI = slices.Contains(p.Imports, httpapi)
		}
		if !composition && importsAPI && !apiClient {
			t.Errorf("%s imports the HTTP API server; only the dashboard, the root package and above may (plug-ins mount routes through %s/mount)", name, httpapi)
		}
		if under(name, httpapi+"/mount") && slices.Contains(deps, httpapi) {
			t.Errorf("%s, the plug-in mount point, imports the server it is mounted into", name)
		}
		// The core never imports a plug-in: a program enables one by
		// handing it to Config.Plugins.
		core := name == mod || under(name, mod+"/internal/engine") || under(name, mod+"/internal/httpapi") ||
			under(name, st) || name == admission || name == job || name == vocab ||
			under(name, mod+"/internal/dashboard") || under(name, mod+"/internal/auth") || under(name, mod+"/internal/metrics")
		if core {
			for _, pl := range plugins {
				if has(pl) {
					t.Errorf("%s (core) imports the plug-in %s", name, pl)
				}
			}
		}
		// The engine and everything below it link no LLM SDK.
		if under(name, mod+"/internal/engine") || under(name, st) || name == admission || name == job || name == vocab {
			if slices.ContainsFunc(deps, isLLM) {
				t.Errorf("%s links an LLM SDK", name)
			}
		}
	}

	// The core library and its HTTP API link no LLM SDK: a program that
	// only wants a queue does not pay for reviews (before reviews became a
	// plug-in, `go list -deps .` listed 439 packages, 50 of them the OpenAI
	// and Anthropic SDKs).
	for _, core := range []string{mod, httpapi} {
		for _, d := range pkgs[core].Deps {
			if isLLM(d) {
				t.Errorf("%s links the LLM SDK package %s; LLM code belongs to a plug-in (%v)", core, d, plugins)
			}
		}
	}
	// The root package links no webhook code either: webhooks are a
	// plug-in (package webhooks), so a program that only wants a queue
	// does not link the delivery client, its SSRF guard or the routes
	// (before, `go list -deps .` listed 321 packages; after, 319).
	for _, d := range pkgs[mod].Deps {
		if under(d, mod+"/webhooks") || under(d, mod+"/internal/webhook") || d == "code.dny.dev/ssrf" {
			t.Errorf("the root package links %s; webhook code belongs to the webhooks plug-in", d)
		}
	}
	// That check can fail: the webhooks plug-in does link the code.
	if !slices.Contains(pkgs[mod+"/webhooks"].Deps, mod+"/internal/webhook") {
		t.Errorf("%s/webhooks does not link internal/webhook: the root's webhook check checks nothing", mod)
	}
	// The check above can fail: the review plug-in does link the SDKs.
	if !slices.ContainsFunc(pkgs[plugins[0]].Deps, isLLM) {
		t.Errorf("%s links no LLM SDK: the LLM check of the core checks nothing; point it at the package that does", plugins[0])
	}
}

// layer is a package of the core and the only module packages it may
// depend on (directly or not); outside the module only the standard
// library, unless thirdParty.
type layer struct {
	name       string
	allowed    []string
	thirdParty bool
}

// layers is the core's layering from the bottom up (API -> engine ->
// admission/store -> vocabulary): each package may depend only on the
// packages below it, so nothing below imports above. The API server and
// the root package are checked by TestLayering's other rules.
var layers = func() []layer {
	vocab, job := mod+"/rltype", mod+"/internal/job"
	admission, st, crash := mod+"/internal/admission", mod+"/internal/store", mod+"/internal/crashpoint"
	engine, auth := mod+"/internal/engine", mod+"/internal/auth"
	atomicfile, cpulabel := mod+"/internal/atomicfile", mod+"/internal/cpulabel"
	idle := mod + "/internal/idlethread"
	return []layer{
		// The public vocabulary imports only the standard library.
		{vocab, nil, false},
		// Durable file replacement is a standard-library leaf.
		{atomicfile, nil, false},
		// CPU-profile labels (a cpulabels build only) are a leaf too.
		{cpulabel, nil, false},
		// SCHED_IDLE threads for the batch lane: raw system calls of the
		// standard library, a leaf.
		{idle, nil, false},
		// internal/job is rltype's alias and nothing more.
		{job, []string{vocab}, false},
		// The header parsers sit on the vocabulary only.
		{mod + "/internal/ratelimit", []string{vocab}, false},
		// admission and the store contract sit on the vocabulary only.
		{admission, []string{vocab, job}, false},
		{st, []string{vocab, job, admission}, false},
		// The engine, the one writer, sits on the store; it never reaches
		// up to the API, metrics, schedules or the root package.
		{engine, []string{vocab, job, admission, crash, cpulabel, idle, st}, false},
		// Periodic producers (cron parsing) and metrics (Prometheus) sit on
		// the engine.
		{mod + "/internal/schedule", []string{vocab, job, admission, crash, cpulabel, idle, st, engine}, true},
		{mod + "/internal/metrics", []string{vocab, job, admission, crash, cpulabel, idle, st, engine}, true},
		// API keys and the plug-ins' mount point sit on the vocabulary.
		{auth, []string{vocab, job, atomicfile}, false},
		{mod + "/internal/httpapi/mount", []string{vocab, job, auth, atomicfile}, false},
	}
}()

// check returns a violation for each module package l.name depends on
// that is not in l.allowed, and, unless l.thirdParty, for each dependency
// outside the module that is not the standard library.
func (l layer) check(pkgs map[string]pkg) []string {
	p, ok := pkgs[l.name]
	if !ok {
		return []string{fmt.Sprintf("package %s not listed", l.name)}
	}
	var bad []string
	for _, d := range p.Deps {
		switch {
		case pkgs[d].Standard:
		case !under(d, mod):
			if !l.thirdParty {
				bad = append(bad, fmt.Sprintf("%s depends on %s outside the module; it may use only the standard library and %v", l.name, d, l.allowed))
			}
		case !slices.Contains(l.allowed, d):
			bad = append(bad, fmt.Sprintf("%s depends on %s; within the module it may depend only on %v", l.name, d, l.allowed))
		}
	}
	return bad
}

// TestLayersCatch: the layer rules fail on a graph that breaks them (the
// engine reaching up to metrics; the vocabulary linking a module outside
// the standard library) and pass on one that keeps them, so
// TestLayering's pass means something.
func TestLayersCatch(t *testing.T) {
	engine, metrics, st := mod+"/internal/engine", mod+"/internal/metrics", mod+"/internal/store"
	pkgs := map[string]pkg{
		engine:                {ImportPath: engine, Deps: []string{"context", st, metrics}},
		st:                    {ImportPath: st},
		metrics:               {ImportPath: metrics},
		"context":             {ImportPath: "context", Standard: true},
		mod + "/rltype":       {ImportPath: mod + "/rltype", Deps: []string{"github.com/x/y"}},
		"github.com/x/y":      {ImportPath: "github.com/x/y"},
		mod + "/internal/job": {ImportPath: mod + "/internal/job", Deps: []string{"context"}},
	}
	if got := (layer{engine, []string{st}, false}).check(pkgs); len(got) != 1 || !strings.Contains(got[0], metrics) {
		t.Errorf("engine -> metrics: violations %q, want one naming %s", got, metrics)
	}
	if got := (layer{mod + "/rltype", nil, false}).check(pkgs); len(got) != 1 || !strings.Contains(got[0], "github.com/x/y") {
		t.Errorf("rltype -> github.com/x/y: violations %q, want one naming it", got)
	}
	if got := (layer{mod + "/internal/job", nil, false}).check(pkgs); len(got) != 0 {
		t.Errorf("job -> context: violations %q, want none", got)
	}
	if got := (layer{mod + "/rltype", nil, true}).check(pkgs); len(got) != 0 {
		t.Errorf("rltype -> github.com/x/y with third-party modules allowed: violations %q, want none", got)
	}
	for _, l := range layers {
		if got := l.check(map[string]pkg{}); len(got) != 1 {
			t.Errorf("a layer missing from the graph (%s) gives %q, want it reported", l.name, got)
		}
	}
}

// plugins are the plug-in packages: the core imports none of them. The
// first is the review plug-in, the one that links the LLM SDKs.
var plugins = []string{mod + "/review", mod + "/internal/review", mod + "/webhooks", mod + "/internal/webhook"}

// publicPlugins are the plug-ins' public packages, the ones a program
// hands to Config.Plugins: they sit on the root package.
var publicPlugins = []string{mod + "/review", mod + "/webhooks"}
