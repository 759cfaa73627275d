package httpapi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedClientRoundTrip builds the TypeScript client generated from
// docs/openapi.json (tools/openapi: openapi-typescript + openapi-fetch,
// type-checked by tsc) and runs one enqueue -> lease -> complete round
// trip with it against this server on loopback. It needs
// `npm ci` in tools/openapi; under CI=true its absence fails the test.
func TestGeneratedClientRoundTrip(t *testing.T) {
	dir, err := filepath.Abs("../../tools/openapi")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openapi-fetch")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("tools/openapi has no node_modules; run npm ci there: %v", err)
		}
		t.Skip("run npm ci in tools/openapi to test the generated client")
	}
	if testing.Short() {
		t.Skip("runs npm")
	}
	e := newEnv(t)
	npm := func(script string) string {
		cmd := exec.Command("npm", "run", "--silent", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "RATELANE_URL="+e.hs.URL, "RATELANE_API_KEY="+adminKey, "RATELANE_REGION=us")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("npm run %s: %v\n%s", script, err, out)
		}
		return string(out)
	}
	npm("build")
	if out := npm("roundtrip"); !strings.Contains(out, "round trip ok") || !strings.Contains(out, "published") {
		t.Fatalf("round trip output: %s", out)
	}
}
