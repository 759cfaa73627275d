package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/ratelane/ratelane/internal/demo"
)

func init() {
	register("demo", "fan shipment events out to 20 rate-limited webhook subscribers on a temporary store, end to end", helpOK(runDemo))
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := commandFlags("demo", stderr)
	cfg := demo.Config{}
	fs.IntVar(&cfg.Events, "events", 90, "shipment events; each goes to every subscriber (the 2/s subscriber takes about events/2 seconds)")
	fs.IntVar(&cfg.Subscribers, "subscribers", 20, "subscribers, with allowances from 2/s to 200/s")
	fs.DurationVar(&cfg.Duration, "duration", demo.Config{}.WithDefaults().Duration, "cap on the delivery phase")
	asJSON := fs.Bool("json", false, "print the closing figures as one JSON object on stdout (the live progress goes to stderr)")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	// The library reads 0 as "the default"; on the command line a 0 is a
	// mistake, not a request for 90 events.
	switch {
	case cfg.Events < 1 || cfg.Events > 100_000:
		return usageError{fmt.Sprintf("--events %d: want 1 to 100000", cfg.Events)}
	case cfg.Subscribers < 1 || cfg.Subscribers > 1000:
		return usageError{fmt.Sprintf("--subscribers %d: want 1 to 1000", cfg.Subscribers)}
	case cfg.Duration <= 0:
		return usageError{fmt.Sprintf("--duration %v: want a positive duration", cfg.Duration)}
	}
	// Progress goes where a person watches: stdout with the table, or
	// stderr under --json, so that stdout stays one JSON object.
	if *asJSON {
		cfg.Out, cfg.TTY = stderr, isTerminal(stderr)
	} else {
		cfg.Out, cfg.TTY = stdout, isTerminal(stdout)
	}
	res, err := demo.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(res); err != nil {
			return err
		}
	} else {
		demo.WriteTable(stdout, res)
	}
	if !res.OK() {
		return fmt.Errorf("%d lost, %d duplicated, %d terminal of %d deliveries (timed out: %v)",
			res.Lost, res.Duplicates, res.Terminal, res.Deliveries, res.TimedOut)
	}
	return nil
}

// isTerminal reports whether w is a character device (a terminal), where
// the progress can be redrawn in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
