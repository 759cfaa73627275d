package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/engine"
)

// TestExampleConfigLoads loads deploy/ratelane.example.json through the
// config loader serve uses and opens a client with it (paths moved to a
// temporary directory), so the example cannot drift from what the binary
// accepts: an unknown or misspelt field fails here as it would at start-up.
func TestExampleConfigLoads(t *testing.T) {
	f, err := parseServerFlags("serve", []string{"--config", "../../deploy/ratelane.example.json"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := f.clientConfig(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	if f.addr != "0.0.0.0:8080" || cfg.DataDir != "/var/lib/ratelane" || cfg.Workers != 16 || len(cfg.Regions) != 2 ||
		len(cfg.Limits) != 2 || cfg.InteractiveBudget != 30*time.Second || cfg.BatchBudget != 24*time.Hour {
		t.Fatalf("example config read as addr %s, %+v", f.addr, cfg)
	}
	if f.batchLane.PollInterval != time.Minute || f.batchLane.MinTurnaround != time.Hour {
		t.Fatalf("example batch_lane read as %+v", f.batchLane)
	}
	dir := t.TempDir()
	cfg.DataDir = dir
	for i := range cfg.Regions {
		cfg.Regions[i].SQLitePath = filepath.Join(dir, cfg.Regions[i].Name+".db")
	}
	// The providers section too, as serve registers it: the example's
	// declared rpm becomes the requests key of us's reviews.
	if ps := f.providers["us"]; len(ps) != 2 {
		t.Fatalf("example providers.us read as %+v, want 2 providers", ps)
	}
	if err := registerBuiltins(&cfg, f); err != nil {
		t.Fatalf("example providers: %v", err)
	}
	c, err := ratelane.NewClient(context.Background(), cfg)
	if err != nil {
		t.Fatalf("the example config does not open: %v", err)
	}
	limits, err := c.Limits(context.Background(), "us")
	if err != nil {
		t.Fatal(err)
	}
	declared := false
	for _, l := range limits {
		declared = declared || l.Name == "openai-compatible:qwen2.5-coder" && l.PerStart
	}
	if !declared {
		t.Errorf("the example provider's rpm declared no per-start requests key in us: %+v", limits)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBatchLaneCPUs: the config file's batch_lane.cpus sets the library's
// BatchCPUs (the batch lane's CPU governor) and batch_lane.cpu_share its
// BatchCPUShare (the batch pacer); absent leaves each 0 (the library's
// default), -1 turns either off, and a count below -1 or a share outside
// (0, 1) other than -1 stops start-up naming the field.
func TestBatchLaneCPUs(t *testing.T) {
	for _, c := range []struct {
		body      string
		want      int
		wantShare float64
		wantErr   string
	}{
		{`{"batch_lane": {"cpus": 1}}`, 1, 0, ""},
		{`{"batch_lane": {"poll_interval": "1m"}}`, 0, 0, ""},
		{`{"batch_lane": {"cpus": -1}}`, -1, 0, ""},
		{`{"batch_lane": {"cpus": -2}}`, 0, 0, "batch_lane.cpus"},
		{`{"batch_lane": {"cpu_share": 0.25}}`, 0, 0.25, ""},
		{`{"batch_lane": {"cpu_share": 1}}`, 0, 0, "batch_lane.cpu_share"},
		{`{"batch_lane": {"cpu_share": -0.5}}`, 0, 0, "batch_lane.cpu_share"},
		{`{"batch_lane": {"cpu_share": -1}}`, 0, -1, ""},
	} {
		cfg, err := configFromFile(t, c.body)
		if configOK(t, c.body, err, c.wantErr) && (cfg.BatchCPUs != c.want || cfg.BatchCPUShare != c.wantShare) {
			t.Errorf("%s: BatchCPUs %d, BatchCPUShare %v; want %d, %v", c.body, cfg.BatchCPUs, cfg.BatchCPUShare, c.want, c.wantShare)
		}
	}
}

// TestBatchLaneThreadPolicy: batch_lane.thread_policy "idle" sets the
// library's BatchThreadPolicy, pins BatchCPUs (cpus, or its default for
// the Ps the process started with) and raises GOMAXPROCS by it for each
// region; idle with the governor off, or another policy, stops start-up
// naming the field. Absent leaves both alone.
func TestBatchLaneThreadPolicy(t *testing.T) {
	procs := startProcs()
	t.Cleanup(func() { runtime.GOMAXPROCS(procs) })
	for _, c := range []struct {
		body      string
		wantCPUs  int
		wantProcs int
		wantErr   string
	}{
		{`{"batch_lane": {"thread_policy": "idle", "cpus": 1}}`, 1, procs + 1, ""},
		{`{"batch_lane": {"thread_policy": "idle"}}`, engine.DefaultBatchCPUs(procs), procs + engine.DefaultBatchCPUs(procs), ""},
		{`{"batch_lane": {"thread_policy": "idle", "cpus": 1}, "regions": [{"Name": "us"}, {"Name": "eu"}]}`, 1, procs + 2, ""},
		{`{"batch_lane": {"cpus": 1}}`, 1, procs, ""},
		{`{"batch_lane": {"thread_policy": "idle", "cpus": -1}}`, 0, procs, "batch_lane.thread_policy"},
		{`{"batch_lane": {"thread_policy": "realtime"}}`, 0, procs, "batch_lane.thread_policy"},
	} {
		runtime.GOMAXPROCS(procs)
		cfg, err := configFromFile(t, c.body)
		if !configOK(t, c.body, err, c.wantErr) {
			continue
		}
		wantPolicy := ""
		if c.wantProcs != procs {
			wantPolicy = engine.BatchThreadsIdle
		}
		if cfg.BatchCPUs != c.wantCPUs || runtime.GOMAXPROCS(0) != c.wantProcs || cfg.BatchThreadPolicy != wantPolicy {
			t.Errorf("%s: BatchCPUs %d, GOMAXPROCS %d, BatchThreadPolicy %q; want %d, %d, %q", c.body, cfg.BatchCPUs, runtime.GOMAXPROCS(0), cfg.BatchThreadPolicy, c.wantCPUs, c.wantProcs, wantPolicy)
		}
	}
}

// configFromFile is the library config `serve --config` makes of a config
// file holding body, or the error that stops start-up.
func configFromFile(t *testing.T, body string) (ratelane.Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ratelane.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := parseServerFlags("serve", []string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return f.clientConfig(slog.New(slog.DiscardHandler))
}

// TestBatchLaneSQLiteHold: the config file's batch_lane.sqlite_hold sets
// every served region's SQLiteBatchHold (the SQLite writer's hold of a
// batch-lane transaction for interactive work); absent leaves the
// library's default (0), "0s" turns the hold off (negative in the
// library, whose zero is its default), and a bad or negative duration
// stops start-up naming the field.
func TestBatchLaneSQLiteHold(t *testing.T) {
	checkRegionValues(t, "SQLiteBatchHold", func(r ratelane.Region) time.Duration { return r.SQLiteBatchHold }, []regionDuration{
		{`{"batch_lane": {"sqlite_hold": "5ms"}}`, 5 * time.Millisecond, ""},
		{`{"batch_lane": {"sqlite_hold": "5ms"}, "regions": [{"Name": "us"}, {"Name": "eu"}]}`, 5 * time.Millisecond, ""},
		{`{"batch_lane": {"sqlite_hold": "0s"}}`, -1, ""},
		{`{"batch_lane": {"cpus": 1}}`, 0, ""},
		{`{"batch_lane": {"sqlite_hold": "-1ms"}}`, 0, "batch_lane.sqlite_hold"},
		{`{"batch_lane": {"sqlite_hold": "soon"}}`, 0, "batch_lane.sqlite_hold"},
	})
}

// regionValue is a config file's body and the value every served region
// should take from it, or the error naming the field.
type regionValue[T comparable] struct {
	body    string
	want    T
	wantErr string
}

// regionDuration is a regionValue of a duration field.
type regionDuration = regionValue[time.Duration]

// checkRegionValues serves each case's config for regions us and eu and
// checks that both take its value (get reads the Region's field, named
// field).
// usEUFlags parses serve's flags for regions us and eu with a config
// file holding body.
func usEUFlags(t *testing.T, body string) *serverFlags {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ratelane.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := parseServerFlags("serve", []string{"--config", path, "--regions", "us,eu"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func checkRegionValues[T comparable](t *testing.T, field string, get func(ratelane.Region) T, cases []regionValue[T]) {
	t.Helper()
	for _, c := range cases {
		f := usEUFlags(t, c.body)
		cfg, err := f.clientConfig(slog.New(slog.DiscardHandler))
		if !configOK(t, c.body, err, c.wantErr) {
			continue
		}
		if len(cfg.Regions) != 2 {
			t.Fatalf("%s: regions %+v; want us and eu", c.body, cfg.Regions)
		}
		for _, r := range cfg.Regions {
			if got := get(r); got != c.want {
				t.Errorf("%s: region %s %s %v; want %v", c.body, r.Name, field, got, c.want)
			}
		}
	}
}

// TestServeLanes: --lanes and the config file's lanes set Config.Lanes,
// the flag overriding the file; an unknown lane stops start-up.
func TestServeLanes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelane.json")
	if err := os.WriteFile(path, []byte(`{"lanes": ["batch"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args    []string
		want    []ratelane.Lane
		wantErr string
	}{
		{nil, nil, ""},
		{[]string{"--lanes", "interactive"}, []ratelane.Lane{ratelane.LaneInteractive}, ""},
		{[]string{"--lanes", "interactive, batch"}, []ratelane.Lane{ratelane.LaneInteractive, ratelane.LaneBatch}, ""},
		{[]string{"--config", path}, []ratelane.Lane{ratelane.LaneBatch}, ""},
		{[]string{"--config", path, "--lanes", "interactive"}, []ratelane.Lane{ratelane.LaneInteractive}, ""},
		{[]string{"--lanes", "bulk"}, nil, `unknown lane "bulk"`},
	} {
		f, err := parseServerFlags("serve", c.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := f.clientConfig(slog.New(slog.DiscardHandler))
		if configOK(t, fmt.Sprint(c.args), err, c.wantErr) && !slices.Equal(cfg.Lanes, c.want) {
			t.Errorf("%v: Lanes %v, want %v", c.args, cfg.Lanes, c.want)
		}
	}
}

// configOK checks clientConfig's error against wantErr (a substring the
// error must hold; "" for none) and reports whether the config is worth
// comparing: no error was wanted and none came.
func configOK(t *testing.T, what string, err error, wantErr string) bool {
	t.Helper()
	switch {
	case wantErr != "":
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: error %v, want one naming %s", what, err, wantErr)
		}
		return false
	case err != nil:
		t.Errorf("%s: %v", what, err)
		return false
	}
	return true
}

// TestBatchLaneSQLiteSyncDeferRetired: the config file's retired
// batch_lane.sqlite_sync_defer (and a region's SQLiteBatchSyncDefer) still
// start, whatever they hold, with one warning each naming the key at
// start-up, and set nothing: every region's SQLiteBatchSyncDefer stays
// zero unless the file set the region's own field, which the library
// ignores.
func TestBatchLaneSQLiteSyncDeferRetired(t *testing.T) {
	for _, c := range []struct {
		body     string
		warnings int
	}{
		{`{"batch_lane": {"sqlite_sync_defer": "5ms"}}`, 1},
		{`{"batch_lane": {"sqlite_sync_defer": "soon"}}`, 1},
		{`{"batch_lane": {"sqlite_sync_defer": "5ms"}, "regions": [{"Name": "us"}, {"Name": "eu", "SQLiteBatchSyncDefer": 5000000}]}`, 2},
		{`{"batch_lane": {"cpus": 1}}`, 0},
	} {
		f := usEUFlags(t, c.body)
		var log bytes.Buffer
		cfg, err := f.clientConfig(slog.New(slog.NewTextHandler(&log, nil)))
		if err != nil {
			t.Errorf("%s: %v; want the retired key accepted", c.body, err)
			continue
		}
		if got := strings.Count(log.String(), "level=WARN"); got != c.warnings {
			t.Errorf("%s: %d warnings, want %d:\n%s", c.body, got, c.warnings, log.String())
		}
		if c.warnings > 0 && !strings.Contains(log.String(), "sqlite_sync_defer") {
			t.Errorf("%s: the warning does not name the key:\n%s", c.body, log.String())
		}
		for _, r := range cfg.Regions {
			//lint:ignore SA1019 the retired field must stay unset by the retired key
			if d := r.SQLiteBatchSyncDefer; r.Name == "us" && d != 0 {
				t.Errorf("%s: region us SQLiteBatchSyncDefer %v; want 0: the key sets nothing", c.body, d)
			}
		}
	}
}

// TestBatchLaneSQLiteGapCheckpoint: the config file's
// batch_lane.sqlite_gap_checkpoint sets every served region's
// SQLiteGapCheckpoint (WAL checkpoints between transactions once the WAL
// holds that many frames); absent leaves the library's default (0, which
// it reads as 1,000), 0 or a negative count turns them off (-1), a
// region's own value wins, and a value that is not a whole number stops
// start-up naming the field.
func TestBatchLaneSQLiteGapCheckpoint(t *testing.T) {
	checkRegionValues(t, "SQLiteGapCheckpoint", func(r ratelane.Region) int { return r.SQLiteGapCheckpoint }, []regionValue[int]{
		{`{"batch_lane": {"sqlite_gap_checkpoint": 1000}}`, 1000, ""},
		{`{"batch_lane": {"sqlite_gap_checkpoint": 500}, "regions": [{"Name": "us", "SQLiteGapCheckpoint": 500}, {"Name": "eu"}]}`, 500, ""},
		{`{"batch_lane": {"sqlite_gap_checkpoint": 0}}`, -1, ""},
		{`{"batch_lane": {"sqlite_gap_checkpoint": -5}}`, -1, ""},
		{`{"batch_lane": {"cpus": 1}}`, 0, ""},
		{`{"regions": [{"Name": "us", "SQLiteGapCheckpoint": -1}, {"Name": "eu", "SQLiteGapCheckpoint": -1}]}`, -1, ""},
		{`{"batch_lane": {"sqlite_gap_checkpoint": "1000"}}`, 0, "batch_lane.sqlite_gap_checkpoint"},
	})
}

// TestBatchLaneSQLiteWriterNice: the config file's
// batch_lane.sqlite_writer_nice sets every served region's
// SQLiteWriterNice; absent leaves it off, and a value out of range or not
// a whole number stops start-up naming the field.
func TestBatchLaneSQLiteWriterNice(t *testing.T) {
	checkRegionValues(t, "SQLiteWriterNice", func(r ratelane.Region) int { return r.SQLiteWriterNice }, []regionValue[int]{
		{`{"batch_lane": {"sqlite_writer_nice": 5}}`, 5, ""},
		{`{"batch_lane": {}}`, 0, ""},
		{`{"batch_lane": {"sqlite_writer_nice": -21}}`, 0, "batch_lane.sqlite_writer_nice"},
		{`{"batch_lane": {"sqlite_writer_nice": 20}}`, 0, "batch_lane.sqlite_writer_nice"},
		{`{"batch_lane": {"sqlite_writer_nice": "-10"}}`, 0, "batch_lane.sqlite_writer_nice"},
	})
}

// TestBatchLaneSQLiteGapCheckpointBeside: the config file's
// batch_lane.sqlite_gap_checkpoint_beside false sets every served
// region's SQLiteGapCheckpointOnWriter; true or absent leaves the gap
// checkpoints beside the writer (the default), and a value that is not a
// boolean stops start-up naming the field.
func TestBatchLaneSQLiteGapCheckpointBeside(t *testing.T) {
	checkRegionValues(t, "SQLiteGapCheckpointOnWriter", func(r ratelane.Region) bool { return r.SQLiteGapCheckpointOnWriter }, []regionValue[bool]{
		{`{"batch_lane": {"sqlite_gap_checkpoint": 1000, "sqlite_gap_checkpoint_beside": true}}`, false, ""},
		{`{"batch_lane": {"sqlite_gap_checkpoint": 1000}}`, false, ""},
		{`{"batch_lane": {"sqlite_gap_checkpoint_beside": false}}`, true, ""},
		{`{"batch_lane": {"sqlite_gap_checkpoint_beside": "yes"}}`, false, "batch_lane.sqlite_gap_checkpoint_beside"},
	})
}

// TestServeFlagValues checks that serve and migrate take --log-format
// json or text and --synchronous FULL or NORMAL (any case), and refuse
// anything else as a usage error (exit 2) naming the flag: newLogger would
// read any other format as json, and the store would refuse the level only
// at open (exit 1).
func TestServeFlagValues(t *testing.T) {
	for _, c := range []struct {
		flag, value string
		wantErr     string
	}{
		{"--log-format", "json", ""},
		{"--log-format", "text", ""},
		{"--log-format", "xml", `--log-format "xml": want json or text`},
		{"--log-format", "TEXT", `--log-format "TEXT": want json or text`},
		{"--synchronous", "FULL", ""},
		{"--synchronous", "normal", ""},
		{"--synchronous", "bogus", `--synchronous "bogus": want FULL or NORMAL`},
		{"--synchronous", "OFF", `--synchronous "OFF": want FULL or NORMAL`},
	} {
		for _, cmd := range []string{"serve", "migrate"} {
			_, err := parseServerFlags(cmd, []string{c.flag, c.value}, io.Discard)
			var ue usageError
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("%s %s %s: %v", cmd, c.flag, c.value, err)
			case c.wantErr != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("%s %s %s: error %v, want a usage error naming %s", cmd, c.flag, c.value, err, c.wantErr)
			}
		}
	}
}
