package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/review"
	"github.com/ratelane/ratelane/webhooks"
)

func init() {
	register("serve", "run the engine and the HTTP API (embedded SQLite store by default)", helpOK(runServe))
	register("migrate", "create or upgrade every region's store, then exit", helpOK(runMigrate))
	register("version", "print the version (also ratelane --version)", helpOK(runVersion))
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", "Print ratelane's version and the Go version it was built with.", stderr)
	if _, err := parseArgs(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ratelane %s (%s)\n", ratelane.Version, runtime.Version())
	return nil
}

// serverFlags are the flags serve and migrate share.
type serverFlags struct {
	data        string
	addr        string
	regions     string
	postgres    multiFlag
	synchronous string
	workers     int
	lanes       string
	config      string
	logFormat   string
	// allowPrivate opens loopback and private webhook targets.
	allowPrivate bool
	// ui serves the dashboard under /ui/.
	ui bool
	// providers is the config file's providers section; batchLane its
	// batch lane settings, for every region.
	providers map[string][]providerConfig
	batchLane review.BatchConfig
	// sqliteHold is the config file's batch_lane.sqlite_hold for every
	// SQLite region (zero: the library's default).
	sqliteHold time.Duration
	// sqliteSyncDefer is the config file's batch_lane.sqlite_sync_defer,
	// as written: a retired key, accepted with a warning at start-up and
	// otherwise ignored (warnRetired).
	sqliteSyncDefer string
	// sqliteGapCheckpoint is the config file's
	// batch_lane.sqlite_gap_checkpoint for every SQLite region, as the
	// library reads it (zero: the default, 1,000 frames; negative: off).
	sqliteGapCheckpoint int
	// sqliteGapCheckpointOnWriter is set when the config file's
	// batch_lane.sqlite_gap_checkpoint_beside is false: every SQLite
	// region's gap checkpoints run on the writer's connection.
	sqliteGapCheckpointOnWriter bool
	// sqliteWriterNice is the config file's batch_lane.sqlite_writer_nice
	// for every SQLite region (zero: off).
	sqliteWriterNice int
}

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func parseServerFlags(name string, args []string, stderr io.Writer) (*serverFlags, error) {
	fs := commandFlags(name, stderr)
	f := &serverFlags{}
	fs.StringVar(&f.data, "data", "./ratelane-data", "data directory: SQLite files, control.db, admin.key")
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "HTTP listen address")
	fs.StringVar(&f.regions, "regions", "us,eu", "comma-separated regions this node serves")
	fs.Var(&f.postgres, "postgres-url", "PostgreSQL URL for every region (one schema each), or REGION=URL; repeatable")
	fs.StringVar(&f.synchronous, "synchronous", "FULL", "SQLite durability: FULL (survives power loss) or NORMAL (survives crashes)")
	fs.IntVar(&f.workers, "workers", ratelane.DefaultWorkers, "jobs run at once per region")
	fs.StringVar(&f.lanes, "lanes", "", "comma-separated lanes this node serves: interactive, batch or interactive,batch (the default); "+
		"run the batch lane in a node of its own at a lower priority (nice) beside an interactive-only one (docs/operations.md)")
	fs.StringVar(&f.config, "config", "", "JSON config file (see docs/configuration.md); flags override it")
	fs.StringVar(&f.logFormat, "log-format", "json", "log format: json or text")
	fs.BoolVar(&f.allowPrivate, "allow-private-targets", false,
		"let webhook deliveries reach loopback and private (RFC 1918, fc00::/7) addresses; link-local and cloud metadata stay refused (tests, demos, single-tenant installs only)")
	fs.BoolVar(&f.ui, "ui", true, "serve the web dashboard under /ui/ (sign in with an API key); --ui=false turns it off")
	if err := parseNoArgs(fs, args); err != nil {
		return nil, err
	}
	// newLogger would read any other value as json: a typo must not pass
	// for a choice.
	if f.logFormat != "json" && f.logFormat != "text" {
		return nil, usageError{fmt.Sprintf("--log-format %q: want json or text", f.logFormat)}
	}
	// A bad level is the user's typo, as --log-format's: a usage error
	// (exit 2) here rather than the store's refusal at open (exit 1).
	if s := strings.ToUpper(f.synchronous); s != "FULL" && s != "NORMAL" {
		return nil, usageError{fmt.Sprintf("--synchronous %q: want FULL or NORMAL", f.synchronous)}
	}
	return f, nil
}

// fileConfig is the JSON config file: everything a flag can say, plus limits.
type fileConfig struct {
	Data    string            `json:"data"`
	Addr    string            `json:"addr"`
	Regions []ratelane.Region `json:"regions"`
	Workers int               `json:"workers"`
	// Lanes is --lanes: the lanes this node serves (empty: both).
	Lanes             []string         `json:"lanes"`
	Limits            []ratelane.Limit `json:"limits"`
	DefaultLimit      ratelane.Limit   `json:"default_limit"`
	InteractiveBudget string           `json:"interactive_budget"`
	BatchBudget       string           `json:"batch_budget"`
	// AllowPrivateTargets is --allow-private-targets.
	AllowPrivateTargets bool `json:"allow_private_targets"`
	// Providers are the review providers of each region (providers.go).
	Providers map[string][]providerConfig `json:"providers"`
	// BatchLane tunes the batch lane of every region's reviews.
	BatchLane batchLaneConfig `json:"batch_lane"`
}

// batchLaneConfig is the config file's batch_lane section (durations such
// as "1m"; empty keeps the default).
type batchLaneConfig struct {
	// PollInterval is the wait between polls of a running provider batch
	// (default 1m).
	PollInterval string `json:"poll_interval"`
	// Turnaround is how long one provider batch is expected to take: no
	// item is sent closer to its deadline, and the intake predicts a
	// manifest's completion in rounds of it (default 1h).
	Turnaround string `json:"turnaround"`
	// CPUs is the batch lane's CPU governor in every region
	// (ratelane.Config.BatchCPUs): at most this many pieces of batch-lane
	// work that compute (review batch handlers, aggregations, sweep
	// passes) at once; webhook deliveries and other kinds that wait take
	// no turn. 0: the default, half the CPUs and at least one; -1: off.
	CPUs int `json:"cpus"`
	// CPUShare is the batch pacer in every region
	// (ratelane.Config.BatchCPUShare): while interactive work is about,
	// the batch lane's computing pieces run about this share of wall
	// time. 0: the default, 0.1; -1: off; otherwise more than 0 and
	// less than 1.
	CPUShare float64 `json:"cpu_share"`
	// ThreadPolicy is the batch lane's use of OS threads in every region
	// (ratelane.Config.BatchThreadPolicy): empty, the default, normal
	// threads; "idle" (Linux) its computing pieces on SCHED_IDLE threads,
	// with GOMAXPROCS raised by cpus (pinned at its default when 0) for
	// each region, so that the interactive lane keeps every core's P.
	// Needs cpus on.
	ThreadPolicy string `json:"thread_policy"`
	// SQLiteHold is how long each SQLite region's writer may keep a
	// transaction of batch-lane writes open while interactive work is in
	// flight (ratelane.Region.SQLiteBatchHold): empty keeps the default
	// (10ms), "0s" turns the hold off.
	SQLiteHold string `json:"sqlite_hold"`
	// SQLiteSyncDefer is retired: it has no effect, and start-up warns
	// when it is set (ratelane.Region.SQLiteBatchSyncDefer is deprecated;
	// docs/configuration.md). It is still read so that a config file
	// that sets it starts.
	SQLiteSyncDefer string `json:"sqlite_sync_defer"`
	// SQLiteGapCheckpoint is each SQLite region's
	// ratelane.Region.SQLiteGapCheckpoint: the WAL frames at which the
	// store checkpoints between transactions while no interactive work
	// is in flight, instead of inside whichever commit crosses SQLite's
	// autocheckpoint. Absent: the default (1,000); 0 or negative: off.
	SQLiteGapCheckpoint *int `json:"sqlite_gap_checkpoint"`
	// SQLiteGapCheckpointBeside says where each SQLite region's gap
	// checkpoints run: true or absent beside the writer, on a connection
	// of their own (the default); false on the writer's connection
	// (ratelane.Region.SQLiteGapCheckpointOnWriter).
	SQLiteGapCheckpointBeside *bool `json:"sqlite_gap_checkpoint_beside"`
	// SQLiteWriterNice is each SQLite region's
	// ratelane.Region.SQLiteWriterNice: the writer locked to one OS thread
	// of this nice, -20 to 19 (negative needs CAP_SYS_NICE; Linux). 0:
	// off (the default).
	SQLiteWriterNice int `json:"sqlite_writer_nice"`
}

// warnRetired logs one warning for each retired setting the config file
// sets, naming it: batch_lane.sqlite_sync_defer (and a region's
// SQLiteBatchSyncDefer) have no effect since session 35, and an existing
// config that sets them must still start.
func (f *serverFlags) warnRetired(logger *slog.Logger, regions []ratelane.Region) {
	if f.sqliteSyncDefer != "" {
		logger.Warn("config: batch_lane.sqlite_sync_defer has no effect and is ignored: the batch lane's deferred fsyncs were retired (they did not reduce fsyncs); remove the key",
			"key", "batch_lane.sqlite_sync_defer", "config", f.config)
	}
	for _, r := range regions {
		//lint:ignore SA1019 the retired field is read only to warn that it has no effect
		if r.SQLiteBatchSyncDefer != 0 {
			logger.Warn("config: a region's SQLiteBatchSyncDefer has no effect and is ignored: the batch lane's deferred fsyncs were retired (they did not reduce fsyncs); remove the field",
				"key", "regions[].SQLiteBatchSyncDefer", "region", r.Name, "config", f.config)
		}
	}
}

// clientConfig turns flags (and the config file) into the library's Config.
func (f *serverFlags) clientConfig(logger *slog.Logger) (ratelane.Config, error) {
	cfg := ratelane.Config{DataDir: f.data, Workers: f.workers, Logger: logger}
	if f.config != "" {
		if err := f.applyFile(&cfg); err != nil {
			return cfg, err
		}
	}
	if f.lanes != "" {
		cfg.Lanes = nil // the flag overrides the file
		for _, l := range strings.Split(f.lanes, ",") {
			if l = strings.TrimSpace(l); l != "" {
				cfg.Lanes = append(cfg.Lanes, ratelane.Lane(l))
			}
		}
	}
	for _, l := range cfg.Lanes {
		if !slices.Contains(ratelane.Lanes, l) {
			return cfg, usageError{fmt.Sprintf("--lanes (or the config's lanes): unknown lane %q; want interactive or batch (both: interactive,batch)", l)}
		}
	}
	if len(cfg.Regions) == 0 {
		for _, name := range strings.Split(f.regions, ",") {
			if name = strings.TrimSpace(name); name != "" {
				cfg.Regions = append(cfg.Regions, ratelane.Region{Name: name, Synchronous: strings.ToUpper(f.synchronous)})
			}
		}
	}
	f.warnRetired(logger, cfg.Regions)
	for i := range cfg.Regions {
		cfg.Regions[i].SQLiteBatchHold = cmp.Or(cfg.Regions[i].SQLiteBatchHold, f.sqliteHold)
		cfg.Regions[i].SQLiteGapCheckpoint = cmp.Or(cfg.Regions[i].SQLiteGapCheckpoint, f.sqliteGapCheckpoint)
		cfg.Regions[i].SQLiteGapCheckpointOnWriter = cfg.Regions[i].SQLiteGapCheckpointOnWriter || f.sqliteGapCheckpointOnWriter
		cfg.Regions[i].SQLiteWriterNice = cmp.Or(cfg.Regions[i].SQLiteWriterNice, f.sqliteWriterNice)
	}
	for _, p := range f.postgres {
		region, url, scoped := strings.Cut(p, "=")
		if !scoped || strings.Contains(region, "://") {
			region, url = "", p
		}
		matched := false
		for i := range cfg.Regions {
			if region == "" || cfg.Regions[i].Name == region {
				cfg.Regions[i].PostgresURL, matched = url, true
			}
		}
		if !matched {
			return cfg, usageError{fmt.Sprintf("--postgres-url names region %q, which is not served (--regions %s)", region, f.regions)}
		}
	}
	return cfg, nil
}

func (f *serverFlags) applyFile(cfg *ratelane.Config) error {
	b, err := os.ReadFile(f.config)
	if err != nil {
		return err
	}
	var fc fileConfig
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fc); err != nil {
		return fmt.Errorf("config %s: %w", f.config, err)
	}
	if fc.Data != "" {
		cfg.DataDir = fc.Data
	}
	if fc.Addr != "" {
		f.addr = fc.Addr
	}
	if fc.Workers != 0 {
		cfg.Workers = fc.Workers
	}
	for _, l := range fc.Lanes {
		cfg.Lanes = append(cfg.Lanes, ratelane.Lane(l))
	}
	cfg.Regions, cfg.Limits, cfg.DefaultLimit = fc.Regions, fc.Limits, fc.DefaultLimit
	f.allowPrivate = f.allowPrivate || fc.AllowPrivateTargets
	f.providers = fc.Providers
	if fc.BatchLane.CPUs < -1 {
		return fmt.Errorf("config %s: batch_lane.cpus: want 0 (the default), -1 (off) or a positive count, not %d", f.config, fc.BatchLane.CPUs)
	}
	cfg.BatchCPUs = fc.BatchLane.CPUs
	if s := fc.BatchLane.CPUShare; s != 0 && s != -1 && !(s > 0 && s < 1) {
		return fmt.Errorf("config %s: batch_lane.cpu_share: want 0 (the default, 0.1), -1 (off) or a share between 0 and 1, not %v", f.config, s)
	}
	cfg.BatchCPUShare = fc.BatchLane.CPUShare
	switch fc.BatchLane.ThreadPolicy {
	case "":
	case engine.BatchThreadsIdle:
		procs, width, ok := engine.IdleThreadProcs(startProcs(), cfg.BatchCPUs, len(cfg.Regions))
		if !ok {
			return fmt.Errorf("config %s: batch_lane.thread_policy idle needs batch_lane.cpus on (0 or a positive count)", f.config)
		}
		// Spare Ps for the batch lane's idle threads, its governor's
		// width pinned so that it does not follow them.
		cfg.BatchCPUs, cfg.BatchThreadPolicy = width, engine.BatchThreadsIdle
		runtime.GOMAXPROCS(procs)
	default:
		return fmt.Errorf("config %s: batch_lane.thread_policy: want empty (normal threads) or %q, not %q", f.config, engine.BatchThreadsIdle, fc.BatchLane.ThreadPolicy)
	}
	if h := fc.BatchLane.SQLiteHold; h != "" {
		v, err := time.ParseDuration(h)
		if err != nil || v < 0 {
			return fmt.Errorf("config %s: batch_lane.sqlite_hold: want a duration such as 10ms, or 0s (off), not %q", f.config, h)
		}
		f.sqliteHold = cmp.Or(v, -1) // the library's zero is its default; the file's "0s" is off
	}
	f.sqliteSyncDefer = fc.BatchLane.SQLiteSyncDefer
	if n := fc.BatchLane.SQLiteGapCheckpoint; n != nil {
		// The library's zero is its default; the file's 0 stays off, as it
		// was before gap checkpoints were on by default.
		f.sqliteGapCheckpoint = *n
		if *n <= 0 {
			f.sqliteGapCheckpoint = -1
		}
	}
	if b := fc.BatchLane.SQLiteGapCheckpointBeside; b != nil {
		f.sqliteGapCheckpointOnWriter = !*b
	}
	if n := fc.BatchLane.SQLiteWriterNice; n < -20 || n > 19 {
		return fmt.Errorf("config %s: batch_lane.sqlite_writer_nice: want a nice from -20 to 19 (try -10; negative needs CAP_SYS_NICE), or 0 (off), not %d", f.config, n)
	}
	f.sqliteWriterNice = fc.BatchLane.SQLiteWriterNice
	for _, d := range []struct {
		field, s string
		dst      *time.Duration
	}{{"interactive_budget", fc.InteractiveBudget, &cfg.InteractiveBudget}, {"batch_budget", fc.BatchBudget, &cfg.BatchBudget},
		{"batch_lane.poll_interval", fc.BatchLane.PollInterval, &f.batchLane.PollInterval},
		{"batch_lane.turnaround", fc.BatchLane.Turnaround, &f.batchLane.MinTurnaround}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("config %s: %s: %w", f.config, d.field, err)
		}
		if v <= 0 && strings.HasPrefix(d.field, "batch_lane.") {
			return fmt.Errorf("config %s: %s: want a positive duration such as 1m, not %q", f.config, d.field, d.s)
		}
		*d.dst = v
	}
	return nil
}

func newLogger(format string, w io.Writer) *slog.Logger {
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return slog.New(slog.NewJSONHandler(w, nil))
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseServerFlags("serve", args, stderr)
	if err != nil {
		return err
	}
	logger := newLogger(f.logFormat, stderr)
	cfg, err := f.clientConfig(logger)
	if err != nil {
		return err
	}
	if err := registerBuiltins(&cfg, f); err != nil {
		return err
	}
	client, err := ratelane.NewClient(ctx, cfg)
	if err != nil {
		return err
	}
	api, err := client.NewAPI(ctx, ratelane.APIConfig{AdminKey: os.Getenv("RATELANE_ADMIN_KEY"), Dashboard: f.ui})
	if err != nil {
		client.Close()
		return err
	}
	defer api.Close()
	if api.AdminKey != "" {
		fmt.Fprintln(stdout, api.AdminKey) // the bootstrap's own message: the key, once, and where it is kept
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		client.Close()
		return err
	}
	if err := client.Start(ctx); err != nil {
		ln.Close()
		client.Close()
		return err
	}
	fmt.Fprintf(stdout, "ratelane: serving http://%s (regions %s; data %s)\n", ln.Addr(), strings.Join(client.Regions(), ", "), cfg.DataDir)
	if f.ui {
		fmt.Fprintf(stdout, "ratelane: dashboard at http://%s/ui/ (sign in with an API key)\n", ln.Addr())
	}
	return serveUntilDone(ctx, ln, api, client, logger)
}

// serveUntilDone serves until ctx ends (SIGINT, SIGTERM), then stops
// accepting requests, drains the engine and closes the stores.
func serveUntilDone(ctx context.Context, ln net.Listener, api *ratelane.API, client *ratelane.Client, logger *slog.Logger) error {
	// WriteTimeout bounds ordinary answers; the dashboard's event streams
	// lift it for themselves, and Drain ends them (and long polls) when
	// Shutdown starts, so it does not wait on them.
	srv := &http.Server{Handler: api.Handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
	srv.RegisterOnShutdown(api.Drain)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	logger.Info("shutting down")
	shut, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv.Shutdown(shut)
	client.Stop(shut)
	if errors.Is(serveErr, http.ErrServerClosed) {
		return nil
	}
	return serveErr
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseServerFlags("migrate", args, stderr)
	if err != nil {
		return err
	}
	cfg, err := f.clientConfig(newLogger(f.logFormat, stderr))
	if err != nil {
		return err
	}
	client, err := ratelane.NewClient(ctx, cfg) // opening a store migrates it
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ratelane: migrated regions %s\n", strings.Join(client.Regions(), ", "))
	return client.Close()
}

// registerBuiltins enables ratelane's plug-ins: webhooks, delivering (the
// SSRF guard stays on unless --allow-private-targets or the config file's
// allow_private_targets says otherwise), and reviews, with the config
// file's providers.
func registerBuiltins(cfg *ratelane.Config, f *serverFlags) error {
	cfg.Plugins = append(cfg.Plugins, webhooks.New(webhooks.Config{Deliver: true, AllowPrivateTargets: f.allowPrivate}))
	return registerReviews(cfg, f.providers, f.batchLane, osKeys, f.config)
}

// startProcs is GOMAXPROCS as the process started: a config read again
// raises it from there, not from what an earlier read set
// (batch_lane.thread_policy).
var startProcs = sync.OnceValue(func() int { return runtime.GOMAXPROCS(0) })
