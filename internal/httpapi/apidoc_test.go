package httpapi

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/auth"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/api.md and docs/openapi.json from the route table")

// TestAPIDocUpToDate keeps docs/api.md generated from the same route table
// that serves the API, GET /v1 and the OpenAPI document. Run
// `go test ./internal/httpapi -run APIDoc -update` after changing a route.
func TestAPIDocUpToDate(t *testing.T) {
	e := newEnv(t, withWebhooks(t), withReviews(newFakeReviews("us")))
	got := renderAPIDoc(e.srv.discoveryDoc())
	checkDoc(t, "api.md", got, "APIDoc")
}

// checkDoc fails unless docs/name holds got, or writes got there under
// -update; run names the test to run with -update.
func checkDoc(t *testing.T, name, got, run string) {
	t.Helper()
	path := "../../docs/" + name
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
		t.Fatalf("docs/%s is out of date with the route table; run: go test ./internal/httpapi -run %s -update", name, run)
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
	fmt.Fprintf(&b, "\n## Reserved job kinds\n\n"+
		"These kinds are built in: ratelane creates and runs their jobs itself (their payloads name a subscriber, a review or a diff, "+
		"and their handlers act with ratelane's credentials: a subscriber's signing secret, a GitHub token). "+
		"`POST /v1/jobs` and `Client.Insert` refuse them, and `POST /v1/leases` refuses to lease them, with "+
		"422 `reserved-kind` naming the `kind` (or `kinds`) field, for every role; the outcome routes answer 404 for their jobs. "+
		"Every kind that starts with `%s` is reserved too, for future built-in kinds. "+
		"Each built-in handler also checks that what its payload names belongs to the job's tenant and region, and ends the job "+
		"`terminal` (`permanent_error`) otherwise.\n\n| kind | created by |\n| --- | --- |\n", d.ReservedPrefix)
	for _, k := range d.ReservedKinds {
		fmt.Fprintf(&b, "| `%s` | %s |\n", k.Name, k.Owner)
	}
	fmt.Fprintf(&b, "\n## Tenants\n\n"+
		"A key sees, changes and triggers only its own tenant's jobs, events, deliveries and reviews (admin keys: every tenant's). "+
		"Another tenant's id is answered exactly like an unknown one (404), on every route, the worker outcome routes included, "+
		"whatever lease token is sent. A webhook delivery's `result` holds only the answer's status and timing; "+
		"the bounded last failed answer is shown to admin keys alone (`GET /v1/deliveries/{id}/response`).\n\n"+
		"What a request creates belongs to the tenant it names, which only admin keys may do; a request that names none acts for "+
		"its key's own tenant, for every role and on every route: jobs, reviews, events, subscribers and the tenant filter of "+
		"`GET /v1/events/{id}/deliveries`. The admin key `ratelane serve` makes at first start is of tenant `%s`, so an "+
		"operator's walkthrough with it sees one tenant; to act for another tenant, name it (`tenant`) or use that tenant's key.\n", auth.AdminTenant)
	fmt.Fprintf(&b, "\n## Other refusals\n\n"+
		"- A job `cost` below 1, above one of its keys' burst or window limit, or above 1e12 is refused (400 `invalid-request` "+
		"naming `cost`): such a job could never start, and on a shared key it would hold every tenant's jobs behind it.\n"+
		"- A subscriber `url` whose host is a literal link-local, cloud metadata (169.254.169.254, fd00:ec2::254, 100.100.100.200, "+
		"their IPv4-mapped forms) or unspecified address, or a numeric host in a non-canonical spelling, is refused (400 naming `url`) "+
		"whatever `--allow-private-targets` says: those addresses hold the host's cloud credentials. Other internal addresses are "+
		"refused when a delivery connects (the delivery ends `permanent_error`).\n"+
		"- `GET /readyz` answers 503 naming the region when a store cannot be read; `ratelane serve` refuses to start on a damaged store.\n")
	fmt.Fprintf(&b, "\n## Not found and conflict\n\n"+
		"A 404 `not-found` names what is missing and its id (\"schedule 0193... does not exist, or this API key's tenant or regions "+
		"cannot see it\"): an unknown id, another tenant's (read exactly alike), one outside the key's regions, or one deleted while "+
		"the request ran. Do not retry it unchanged; check the id and the `region` parameter. "+
		"A 409 `conflict` names the resource too and says why: its state does not allow the request (a final job cancelled, a live "+
		"job redriven, a review without findings yet, a delivery in progress, a schedule name taken), or it changed between the "+
		"request's read and its guarded write (another request, a worker or the scheduler wrote it first). Nothing of the request "+
		"was saved: GET the resource to see its state, and send the request again if it still applies. "+
		"The worker outcome routes answer a lost lease with 409 `lease-lost` instead. "+
		"Routes that act on one resource:\n\n| route | 404 and 409 name |\n| --- | --- |\n")
	for _, c := range d.Capabilities {
		if c.Resource != "" {
			fmt.Fprintf(&b, "| %s `%s` | %s |\n", c.Method, c.Path, c.Resource)
		}
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

// TestOpenAPIUpToDate keeps docs/openapi.json, the document CI lints with
// Redocly CLI (tools/openapi), equal to what GET /v1/openapi.json serves.
// Run `go test ./internal/httpapi -run OpenAPIUpToDate -update` after
// changing a route.
func TestOpenAPIUpToDate(t *testing.T) {
	e := newEnv(t, withWebhooks(t), withReviews(newFakeReviews("us")), func(c *Config) { c.Version = "dev" })
	raw, err := json.MarshalIndent(e.srv.openAPI(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got := string(raw) + "\n"
	checkDoc(t, "openapi.json", got, "OpenAPIUpToDate")
}
