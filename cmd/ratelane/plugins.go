package main

import (
	"context"
	"io"
	"os"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/review"
)

// This file composes the plug-ins: the binary is the one place that links
// them (the library links none). Their commands join the binary's own, and
// ratelane serve hands them to the client it runs.

// stdinReader is what plug-in commands read as standard input; tests
// replace it.
var stdinReader io.Reader = os.Stdin

func init() {
	for _, p := range []ratelane.Commander{review.New(review.Config{})} {
		for _, c := range p.Commands() {
			run := c.Run
			register(c.Name, c.Summary, func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return run(ctx, args, stdinReader, stdout, stderr)
			})
		}
	}
}

// registerReviews enables reviews in every served region with the offline
// rules provider (profile "rules"), so a server reviews with no network.
// Provider profiles for OpenAI and Anthropic are configured through the
// library (package review) until the config file grows a section for them.
func registerReviews(cfg *ratelane.Config) {
	rc := review.Config{Regions: map[string]review.RegionConfig{}}
	for _, r := range cfg.Regions {
		p, err := review.NewProvider(review.Profile{Name: "rules", Kind: "rules", Region: r.Name})
		if err != nil {
			continue // a region name the client will refuse with its own message
		}
		rc.Regions[r.Name] = review.RegionConfig{Providers: []review.Provider{p}}
	}
	cfg.Plugins = append(cfg.Plugins, review.New(rc))
}
