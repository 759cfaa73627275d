package deptest

import (
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestOutcomeExampleNeedsNoInternal: the example of an OutcomeHandler
// written outside the module (example_outcome_test.go, issue 11's "a user
// can write an OutcomeHandler outside the module") imports only what a
// program outside the module can: the standard library, the root package
// and rltype. It sits in the module's external test package, which could
// import internal packages without the compiler saying so; this says so.
func TestOutcomeExampleNeedsNoInternal(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../../example_outcome_test.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Imports) == 0 {
		t.Fatal("example_outcome_test.go imports nothing")
	}
	for _, spec := range f.Imports {
		path, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			t.Fatal(err)
		}
		standard := !strings.Contains(strings.Split(path, "/")[0], ".")
		if !standard && path != mod && path != mod+"/rltype" {
			t.Errorf("example_outcome_test.go imports %s; a program outside the module has only the standard library, %s and %s/rltype", path, mod, mod)
		}
	}
}
