// Command ratelane is the ratelane server and command-line client: it serves
// the engine and the HTTP API, migrates stores, and talks to a server for
// jobs, dead letters, limits and keys. This package is wiring only: flags and
// configuration in, calls into the library out.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/bench"
)

// command is one subcommand. Each file of this package registers its own in
// an init function, so subcommands can be added without touching main.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	commands[name] = command{summary, run}
}

// usageError is an error caused by the command line; it exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	// `bench batch-isolation --sim child` runs this executable as its
	// simulators' process; it returns at once otherwise.
	bench.ServeSimChildIfAsked()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-version", "--version":
		args = []string{"version"}
	case "help":
		// help CMD [VERB] is CMD [VERB] -h.
		if len(args) == 1 {
			usage(stdout)
			return 0
		}
		args = append(args[1:len(args):len(args)], "-h")
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "ratelane: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if err := cmd.run(ctx, args[1:], stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "ratelane %s: %v\n", args[0], err)
		var ue usageError
		if errors.As(err, &ue) || errors.Is(err, ratelane.ErrUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "ratelane: a durable, rate-aware job queue and outbound dispatcher")
	fmt.Fprintln(w, "\nUsage: ratelane <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'ratelane help <command>' or 'ratelane <command> -h' for a command's flags.")
	fmt.Fprintln(w, "\nEnvironment: "+envServer+" (server URL, default "+defaultServer+"), "+envAPIKey+" (API key of the client commands).")
	fmt.Fprintln(w, "Exit status: 0 success, 1 failure (the server refused, a job or review failed), 2 usage error.")
}
