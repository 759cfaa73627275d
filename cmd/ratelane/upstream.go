package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/upstream"
)

func init() {
	register("upstream", "run the rate-limited upstream simulator alone (webhook receivers, LLM providers)", helpOK(runUpstream))
}

// upstreamFlags are the simulator's flags.
type upstreamFlags struct {
	addr      string
	routes    multiFlag
	overLimit string
	headers   string
	transient float64
	latency   time.Duration
	jitter    time.Duration
	secrets   multiFlag
	config    string
	seed      uint64
}

func parseUpstreamFlags(args []string, stderr io.Writer) (*upstreamFlags, error) {
	fs := commandFlags("upstream", stderr)
	f := &upstreamFlags{}
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8090", "listen address (port 0 picks a free one)")
	fs.Var(&f.routes, "route", "a route NAME=RATE[:BURST] (token bucket, requests/s) or NAME (unlimited); repeatable")
	fs.StringVar(&f.overLimit, "over-limit", "429-seconds", "answer past the limit: 429-seconds, 429-date, 429-ms, 429-none, 503, 503-date or 503-none")
	fs.StringVar(&f.headers, "headers", "", "rate-limit headers: none, x-ratelimit, ratelimit, ratelimit-legacy, anthropic (default: each endpoint's own)")
	fs.Float64Var(&f.transient, "transient-rate", 0, "probability 0..1 of a random 500/502/504")
	fs.DurationVar(&f.latency, "latency", 0, "fixed latency of every answer")
	fs.DurationVar(&f.jitter, "jitter", 0, "random extra latency, uniform in [0, jitter)")
	fs.Var(&f.secrets, "secret", "a Standard Webhooks secret (whsec_...) every webhook route verifies; repeatable")
	fs.StringVar(&f.config, "config", "", "JSON file: {\"ROUTE\": RouteConfig, ...} (see internal/upstream); flags add to it")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the random faults and jitter")
	if err := parseNoArgs(fs, args); err != nil {
		return nil, err
	}
	return f, nil
}

// simulatorConfig turns the flags into the simulator's configuration.
func (f *upstreamFlags) simulatorConfig() (upstream.Config, error) {
	cfg := upstream.Config{Addr: f.addr, Seed: f.seed, Routes: map[string]upstream.RouteConfig{}}
	if f.config != "" {
		b, err := os.ReadFile(f.config)
		if err != nil {
			return cfg, err
		}
		if err := json.Unmarshal(b, &cfg.Routes); err != nil {
			return cfg, fmt.Errorf("config %s: %w", f.config, err)
		}
	}
	for _, r := range f.routes {
		name, rc, err := parseRoute(r)
		if err != nil {
			return cfg, err
		}
		cfg.Routes[name] = rc
	}
	for name, rc := range cfg.Routes {
		rc.OverLimit = upstream.OverLimit(f.overLimit)
		rc.Headers = upstream.HeaderStyle(f.headers)
		rc.TransientRate = max(rc.TransientRate, f.transient)
		if f.latency > 0 || f.jitter > 0 {
			rc.Latency = upstream.Latency{Fixed: f.latency, Jitter: f.jitter}
		}
		rc.Secrets = append(rc.Secrets, f.secrets...)
		cfg.Routes[name] = rc
	}
	return cfg, nil
}

// parseRoute parses NAME=RATE[:BURST] or NAME.
func parseRoute(s string) (string, upstream.RouteConfig, error) {
	name, spec, limited := strings.Cut(s, "=")
	if !limited {
		return name, upstream.RouteConfig{}, nil
	}
	rateS, burstS, hasBurst := strings.Cut(spec, ":")
	rate, err := strconv.ParseFloat(rateS, 64)
	if err != nil || rate <= 0 {
		return "", upstream.RouteConfig{}, usageError{fmt.Sprintf("--route %q: want NAME=RATE[:BURST] with RATE > 0", s)}
	}
	rc := upstream.RouteConfig{Rate: rate}
	if hasBurst {
		if rc.Burst, err = strconv.Atoi(burstS); err != nil || rc.Burst < 1 {
			return "", upstream.RouteConfig{}, usageError{fmt.Sprintf("--route %q: BURST must be a positive integer", s)}
		}
	}
	return name, rc, nil
}

func runUpstream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseUpstreamFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, err := f.simulatorConfig()
	if err != nil {
		return err
	}
	srv, err := upstream.New(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintf(stdout, "upstream simulator: %s (stats: %s/_stats; Ctrl-C stops)\n", srv.URL(), srv.URL())
	names := make([]string, 0, len(cfg.Routes))
	for name := range cfg.Routes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(stdout, "  %-12s webhook %s  llm %s\n", name, srv.RouteURL(name), srv.LLMBaseURL(name))
	}
	<-ctx.Done()
	rep, _ := json.Marshal(srv.Stats())
	fmt.Fprintf(stdout, "%s\n", rep)
	return nil
}
