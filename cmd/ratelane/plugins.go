package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/review"
	"github.com/ratelane/ratelane/webhooks"
)

// This file composes the plug-ins: the binary is the one place that links
// them (the library links none). Their commands join the binary's own, and
// ratelane serve hands them to the client it runs.

// stdinReader is what plug-in commands read as standard input; tests
// replace it.
var stdinReader io.Reader = os.Stdin

func init() {
	for _, p := range []ratelane.Commander{review.New(review.Config{}), webhooks.New(webhooks.Config{})} {
		for _, c := range p.Commands() {
			run := c.Run
			register(c.Name, c.Summary, func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return run(ctx, args, stdinReader, stdout, stderr)
			})
		}
	}
}

// registerReviews enables reviews in every served region: a region the
// config file's providers section names gets exactly the providers listed
// there (the first is its default); every other region the offline rules
// provider (profile "rules"), so a server reviews with no network. Every
// region's batch lane gets batch (the config file's batch_lane). A bad
// entry is an error naming the config file and the field.
func registerReviews(cfg *ratelane.Config, section map[string][]providerConfig, batch review.BatchConfig, keys keySource, file string) error {
	served := make([]string, 0, len(cfg.Regions))
	for _, r := range cfg.Regions {
		served = append(served, r.Name)
	}
	configured, err := buildProviders(section, served, keys)
	if err != nil {
		return fmt.Errorf("config %s: %w", file, err)
	}
	rc := review.Config{Regions: map[string]review.RegionConfig{}}
	for _, r := range cfg.Regions {
		if ps, ok := configured[r.Name]; ok {
			rc.Regions[r.Name] = review.RegionConfig{Providers: ps, Batch: batch}
			continue
		}
		p, err := review.NewProvider(review.Profile{Name: "rules", Kind: "rules", Region: r.Name})
		if err != nil {
			continue // a region name the client will refuse with its own message
		}
		rc.Regions[r.Name] = review.RegionConfig{Providers: []review.Provider{p}, Batch: batch}
	}
	cfg.Plugins = append(cfg.Plugins, review.New(rc))
	return nil
}
