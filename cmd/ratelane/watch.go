package main

// This file is --watch: a list verb redrawn every interval until
// interrupted (or --count redraws, which bounds it in scripts and tests).

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"
)

// watchFlags are --watch and --count.
type watchFlags struct {
	every time.Duration
	count int
}

func addWatchFlags(fs *flag.FlagSet) *watchFlags {
	wf := &watchFlags{}
	fs.DurationVar(&wf.every, "watch", 0, "redraw every `INTERVAL` (e.g. 2s) until interrupted; 0 prints once")
	fs.IntVar(&wf.count, "count", 0, "with --watch: stop after N redraws (0: until interrupted)")
	return wf
}

// loop runs once, or with --watch redraws until ctx ends (Ctrl-C, which
// is a success: the operator stopped watching) or --count redraws. A
// failed redraw ends the watch with its error, so the exit status says so.
func (wf *watchFlags) loop(ctx context.Context, verb string, stdout io.Writer, once func() error) error {
	if wf.every < 0 || wf.count < 0 {
		return usageError{"--watch and --count must not be negative"}
	}
	if wf.every == 0 {
		if wf.count != 0 {
			return usageError{"--count needs --watch"}
		}
		return once()
	}
	if wf.every < 100*time.Millisecond {
		return usageError{"--watch must be at least 100ms, e.g. 2s"}
	}
	for n := 1; ; n++ {
		// Clear the screen and home the cursor, then a header line like
		// watch(1)'s, so each redraw replaces the last one on a terminal.
		fmt.Fprintf(stdout, "\x1b[H\x1b[2JEvery %s: ratelane %s    %s\n\n", wf.every, verb, time.Now().UTC().Format("2006-01-02 15:04:05Z"))
		if err := once(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if wf.count > 0 && n >= wf.count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wf.every):
		}
	}
}
