package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/bench"
	"github.com/ratelane/ratelane/internal/testkit"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them (a
// serve, demo or bench run that does not stop everything it started).
func TestMain(m *testing.M) {
	bench.ServeSimChildIfAsked() // the test binary is also the bench's simulator child
	goleak.VerifyTestMain(m)
}

// TestTopLevel covers what the command does before a subcommand runs:
// --version, help CMD [VERB], no command at all and an unknown one; and
// values the library would read as "the default" but a person did not mean
// (demo --events 0).
func TestTopLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--version"}, 0, "ratelane " + ratelane.Version},
		{[]string{"version"}, 0, "ratelane " + ratelane.Version},
		{[]string{"version", "extra"}, 2, "takes no arguments"},
		{[]string{"help"}, 0, "Commands:"},
		{[]string{"--help"}, 0, "Commands:"},
		{[]string{"help", "enqueue"}, 0, "Usage: ratelane enqueue"},
		{[]string{"help", "jobs"}, 0, "Verbs:"},
		{[]string{"help", "jobs", "ls"}, 0, "Usage: ratelane jobs ls"},
		{[]string{"help", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{}, 2, "Commands:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"jobs", "ls", "-o", "xml"}, 2, `want table, json or yaml, not "xml"`},
		{[]string{"demo", "--events", "0"}, 2, "--events 0: want 1 to 100000"},
		{[]string{"demo", "--subscribers", "0"}, 2, "--subscribers 0: want 1 to 1000"},
		{[]string{"demo", "--duration", "0s"}, 2, "--duration 0s: want a positive duration"},
		// -h on a command with its own flag set is a success (helpOK), as on
		// the API verbs (TestHelpExitsZero).
		{[]string{"serve", "-h"}, 0, "-postgres-url"},
		{[]string{"migrate", "-h"}, 0, "-postgres-url"},
		{[]string{"upstream", "-h"}, 0, "-over-limit"},
		{[]string{"demo", "-h"}, 0, "-subscribers"},
		{[]string{"bench", "-h"}, 0, "Usage: ratelane bench"},
		{[]string{"bench", "paced", "-h"}, 0, "Usage: ratelane bench"},
	} {
		code, out := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("ratelane %q: exit %d, want %d and %q in:\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
}

// freeAddr returns a loopback address with a port free at the time of asking.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// waitServing polls the discovery document until the server answers.
func waitServing(t *testing.T, url string, exited <-chan error, log *testkit.Buffer) {
	t.Helper()
	testkit.Eventually(t, 60*time.Second, "ratelane serve to answer at "+url, func() error {
		select {
		case err := <-exited:
			t.Fatalf("ratelane serve exited: %v\n%s", err, log.String())
		default:
		}
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return fmt.Errorf("%v; its log:\n%s", err, log.String())
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz answers %d; its log:\n%s", resp.StatusCode, log.String())
		}
		return nil
	})
}
