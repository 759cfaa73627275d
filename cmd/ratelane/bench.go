package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/ratelane/ratelane/internal/bench"
)

func init() {
	register("bench", "run an end-to-end benchmark workload (throughput, paced, fairness, flood, adapt, all)", runBench)
}

// runBench runs `ratelane bench <workload> [flags]`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: ratelane bench <throughput|paced|fairness|flood|adapt|all> [flags]")
		fs.PrintDefaults()
		fmt.Fprint(stderr, benchMetricsHelp)
	}
	var o bench.Options
	var asJSON bool
	fs.StringVar(&o.Store, "store", "sqlite", "store: sqlite (a temporary file) or postgres")
	fs.StringVar(&o.PostgresURL, "postgres-url", "", "PostgreSQL URL for --store postgres (a schema per workload, dropped afterwards)")
	fs.DurationVar(&o.Duration, "duration", 60*time.Second, "upper bound of each run of a workload")
	fs.BoolVar(&o.Smoke, "smoke", false, "shrink every workload to a few seconds (CI)")
	fs.IntVar(&o.Runs, "runs", 1, "run each workload this many times and report each metric's median (JSON adds \"runs\": every run's value; the table shows min–max)")
	fs.BoolVar(&asJSON, "json", false, "print one JSON object instead of a table")
	// The workload may come before or after the flags.
	var name string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return usageError{err.Error()}
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if name == "" {
		fs.Usage()
		return usageError{"name a workload"}
	}
	if o.Runs < 1 {
		return usageError{fmt.Sprintf("--runs %d: want 1 or more", o.Runs)}
	}
	names := []string{name}
	if name == "all" {
		names = bench.Workloads
	}
	var results []bench.Result
	for _, n := range names {
		if !asJSON {
			fmt.Fprintf(stderr, "running %s...\n", n)
		}
		r, err := bench.Run(ctx, n, o)
		if err != nil {
			var ue error = err
			if r.Workload == "" {
				ue = usageError{err.Error()}
			}
			return fmt.Errorf("%s: %w", n, ue)
		}
		results = append(results, r)
	}
	if asJSON {
		return bench.WriteJSON(stdout, results, name == "all")
	}
	return bench.WriteTable(stdout, results)
}

// benchMetricsHelp lists the stable JSON metric names of each workload
// (docs/benchmarks.md describes them).
const benchMetricsHelp = `
JSON metrics (one object per workload; under its name with "all"):
  throughput  jobs_per_second insert_jobs_per_second enqueue_to_start_p50_ms enqueue_to_start_p99_ms
  paced       goodput goodput_min rate_limited_share rate_limited_share_after_first_second
              duplicates makespan_seconds makespan_ratio
  fairness    jain_index heavy_share light_share_min backlogged_starts
  flood       interactive_p50_ms interactive_p99_ms interactive_max_ms goodput rate_limited_share duplicates
  adapt       goodput rate_limited_share converge_seconds goodput_phaseN rate_limited_share_phaseN
              converge_seconds_changeN
`
