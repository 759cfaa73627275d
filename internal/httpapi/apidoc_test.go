package httpapi

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/api.md from the route table")

// TestAPIDocUpToDate keeps docs/api.md generated from the same route table
// that serves the API, GET /v1 and the OpenAPI document. Run
// `go test ./internal/httpapi -run APIDoc -update` after changing a route.
func TestAPIDocUpToDate(t *testing.T) {
	e := newEnv(t, withWebhooks(t), withReviews(newFakeReviews("us")))
	got := renderAPIDoc(e.srv.discoveryDoc())
	const path = "../../docs/api.md"
	if *updateDocs {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Fatalf("docs/api.md is out of date with the route table; run: go test ./internal/httpapi -run APIDoc -update")
	}
}

func renderAPIDoc(d discovery) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# HTTP API (v1)\n\n<!-- Generated from internal/httpapi's route table by TestAPIDocUpToDate; do not edit by hand. -->\n\n")
	fmt.Fprintf(&b, "The same table serves the API, the discovery document (`GET /v1`) and the OpenAPI 3.1 document (`GET /v1/openapi.json`).\n\n")
	fmt.Fprintf(&b, "- **Authentication:** %s.\n- **Errors:** %s.\n\n", d.Authentication, d.Errors)
	vars := make([]string, 0, len(d.Variables))
	for k := range d.Variables {
		vars = append(vars, k)
	}
	sort.Strings(vars)
	fmt.Fprintf(&b, "Examples use these shell variables:\n\n")
	for _, k := range vars {
		fmt.Fprintf(&b, "- `$%s`: %s\n", k, d.Variables[k])
	}
	fmt.Fprintf(&b, "\n## Endpoints\n\n| method | path | role | summary |\n| --- | --- | --- | --- |\n")
	for _, c := range d.Capabilities {
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", c.Method, c.Path, c.Role, strings.ReplaceAll(c.Summary, "|", "\\|"))
	}
	for _, c := range d.Capabilities {
		fmt.Fprintf(&b, "\n### %s %s\n\n%s (role: %s)\n\n", c.Method, c.Path, c.Summary, c.Role)
		for _, p := range c.Parameters {
			enum := ""
			if len(p.Enum) > 0 {
				enum = " (one of " + strings.Join(p.Enum, ", ") + ")"
			}
			fmt.Fprintf(&b, "- %s `%s`: %s%s\n", p.In, p.Name, p.Description, enum)
		}
		if len(c.Parameters) > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "```sh\n%s\n```\n", c.Example)
	}
	return b.String()
}
