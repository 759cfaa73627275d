package deptest

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// jobWriters are the methods of the store contract (and of its drivers)
// that change a job: only engine.Jobs, the one writer of job state, may
// call them, so that admission, metrics and publication happen in one
// place. Reads (Get, List, Stats, Backlog...) are anyone's.
var jobWriters = []string{
	"Insert", "Lease", "Heartbeat", "Finish", "Publish", "Advance",
	"Cancel", "Redrive", "Delete", "Expired", "ExpireDeadlines", "Prune",
	"ClaimTick",         // inserts the tick's job
	"ClaimPublish",      // writes the job's publication claim
	"InsertWithObjects", // inserts jobs (with the objects they reference)
}

// extensionJobWriters write job state like jobWriters but belong to an
// optional store interface, not to store.Store (FinishLease:
// store.FinishLeaser, a finish and a lease in one write).
var extensionJobWriters = []string{"FinishLease"}

// writesJobs reports whether a store method of that name writes job state.
func writesJobs(name string) bool {
	return slices.Contains(jobWriters, name) || slices.Contains(extensionJobWriters, name)
}

// notJobWriters are the other methods of the store contract: reads, and
// writes of what is not a job (limit keys, documents, schedules' own rows,
// the batch lane's manifests). Every method of store.Store is in one list
// or the other (TestStoreMethodsClassified), so a new method that writes
// a job cannot slip past TestOneJobWriter unnamed.
var notJobWriters = []string{
	"Region", "Migrate", "Close", "Get", "List", "ReadyParents", "PartsOf", "Stats", "OldestReady", "Backlog",
	"UpsertLimit", "DeclareLimit", "GetLimit", "LimitConfigs", "ListLimits",
	"PutObject", "PutObjectIf", "GetObject", "GetObjects", "ListObjects", "DeleteObject",
	"CreateSchedule", "GetSchedule", "ListSchedules", "UpdateSchedule", "DeleteSchedule", "DueSchedules",
	"ScheduleTickOf", "ListScheduleTicks",
	"CreateBatch", "AbandonBatch", "GetBatch", "ListBatches", "SetBatchState", "BatchItems", "PlanBatchChunk", "SaveBatchChunk",
	"BatchChunks", "SettleBatchItem", "SettleBatchItems", "GetBatchHead", "PutObjects",
}

// writerAllowed are the packages that may call jobWriters: the engine
// (engine.Jobs and its loops) and the store itself (drivers, the shared
// conformance suite).
func writerAllowed(path string) bool {
	return under(path, mod+"/internal/engine") || under(path, mod+"/internal/store")
}

// exported is what `go list -export` says of one package.
type exported struct {
	ImportPath string
	Dir        string
	Export     string
	GoFiles    []string
	Module     *struct{ Path string }
}

// TestOneJobWriter type-checks every non-test file of the module outside
// the engine and the store and fails on any use (call or method value) of
// a store method that writes job state, however the store was reached (a
// store.Store field, a driver type, an embedded store, engine.Jobs.Store()).
// Tests may still seed fixtures through a store directly.
func TestOneJobWriter(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the module")
	}
	bad := jobWriterUses(t, mod+"/...")
	for _, b := range bad {
		t.Errorf("%s: only engine.Jobs writes job state; go through it (add a method there if one is missing)", b)
	}
}

// jobWriterUses returns "file:line: pkg calls store method M" for each use
// of a jobWriters method of a package under internal/store by a module
// package matched by patterns and not writerAllowed.
func jobWriterUses(t *testing.T, patterns ...string) []string {
	t.Helper()
	exports, pkgs := exportData(t, patterns...)
	var check []exported
	for _, p := range pkgs {
		if p.Module != nil && p.Module.Path == mod && !writerAllowed(p.ImportPath) {
			check = append(check, p)
		}
	}
	if len(check) == 0 {
		t.Fatal("no module package to check: the check would pass vacuously")
	}
	fset := token.NewFileSet()
	imp := exportImporter(fset, exports)
	sp, err := imp.Import(mod + "/internal/store")
	if err != nil {
		t.Fatal(err)
	}
	storeIface := sp.Scope().Lookup("Store").Type().Underlying().(*types.Interface)
	var bad []string
	for _, p := range check {
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}, Types: map[ast.Expr]types.TypeAndValue{}}
		conf := types.Config{Importer: imp}
		if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", p.ImportPath, err)
		}
		for sel, s := range info.Selections {
			if s.Kind() != types.MethodVal && s.Kind() != types.MethodExpr {
				continue
			}
			fn := s.Obj()
			if fn.Pkg() == nil || !under(fn.Pkg().Path(), mod+"/internal/store") || !writesJobs(fn.Name()) {
				continue
			}
			bad = append(bad, fmt.Sprintf("%s: %s uses %s.%s", fset.Position(sel.Sel.Pos()), p.ImportPath, fn.Pkg().Name(), fn.Name()))
		}
		// A store passed as an interface of the package's own that has
		// a job-writing method (type Inserter interface{ Insert(...) })
		// would write around engine.Jobs with no store method named in
		// the package: declaring such an interface is the violation.
		seen := map[string]bool{} // one report per interface, not per use
		for e, tv := range info.Types {
			iface, ok := tv.Type.Underlying().(*types.Interface)
			if !tv.IsType() || !ok || types.Identical(tv.Type, sp.Scope().Lookup("Store").Type()) || !types.Implements(storeIface, iface) {
				continue
			}
			if ts := types.TypeString(iface, nil); seen[ts] {
				continue
			} else {
				seen[ts] = true
			}
			for m := range iface.Methods() {
				if writesJobs(m.Name()) {
					bad = append(bad, fmt.Sprintf("%s: %s declares an interface a store satisfies, with store method %s", fset.Position(e.Pos()), p.ImportPath, m.Name()))
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// TestStoreMethodsClassified fails for a method of store.Store that is in
// neither jobWriters nor notJobWriters (say which it is: one that changes a
// job belongs in jobWriters, so that only engine.Jobs calls it), and for a
// name in those lists that is no longer a method.
func TestStoreMethodsClassified(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the store package's export data")
	}
	storeIface := storeContract(t)
	methods := map[string]bool{}
	for m := range storeIface.Methods() {
		methods[m.Name()] = true
		if !slices.Contains(jobWriters, m.Name()) && !slices.Contains(notJobWriters, m.Name()) {
			t.Errorf("store.Store.%s is in neither jobWriters nor notJobWriters: does it change a job?", m.Name())
		}
	}
	for _, name := range slices.Concat(jobWriters, notJobWriters) {
		if !methods[name] {
			t.Errorf("%s is listed but store.Store has no such method", name)
		}
	}
}

// storeContract returns the store.Store interface type, from export data.
func storeContract(t *testing.T) *types.Interface {
	t.Helper()
	exports, _ := exportData(t, mod+"/internal/store")
	imp := exportImporter(token.NewFileSet(), exports)
	sp, err := imp.Import(mod + "/internal/store")
	if err != nil {
		t.Fatal(err)
	}
	return sp.Scope().Lookup("Store").Type().Underlying().(*types.Interface)
}

// exportData runs `go list -export -deps` over patterns and returns each
// package's export data file by import path, and the packages listed.
func exportData(t *testing.T, patterns ...string) (map[string]string, []exported) {
	t.Helper()
	pkgs := goList[exported](t, append([]string{"-export", "-deps",
		"-json=ImportPath,Dir,Export,GoFiles,Module"}, patterns...)...)
	exports := map[string]string{}
	for _, p := range pkgs {
		exports[p.ImportPath] = p.Export
	}
	return exports, pkgs
}

// exportImporter imports packages from the export data files of exports.
func exportImporter(fset *token.FileSet, exports map[string]string) types.Importer {
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
}

// TestOneJobWriterCatches runs the check over testdata/violator, which
// writes job state through a store four ways and declares an interface
// a store satisfies with Insert, so the check is known to fail
// on a violation (and not to flag a read).
func TestOneJobWriterCatches(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks a package")
	}
	bad := jobWriterUses(t, "./internal/deptest/testdata/violator")
	want := []string{" uses store.Insert", " uses sqlite.Cancel", " uses store.Redrive", " uses store.Advance", " uses store.ClaimPublish",
		" uses sqlite.FinishLease", " store method Insert"}
	if len(bad) != len(want) {
		t.Fatalf("got %d uses, want %d (%v): %q", len(bad), len(want), want, bad)
	}
	for _, w := range want {
		if !slices.ContainsFunc(bad, func(b string) bool { return strings.HasSuffix(b, w) }) {
			t.Errorf("no use of %s reported in %q", w, bad)
		}
	}
}
