package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane"
)

// Where the batch-isolation workload's batch lane runs (Options.BatchNode).
const (
	// BatchNodeInProcess serves both lanes in the bench's one Client, as
	// a single node does (the default).
	BatchNodeInProcess = "in"
	// BatchNodeProcess serves the batch lane in a child process of the
	// bench's own executable (a batch-only Client, Config.Lanes) on the
	// same store, at a lower OS priority (Options.BatchNice); the bench's
	// Client serves the interactive lane only.
	BatchNodeProcess = "process"
)

// BatchNodeEnv, set in a process's environment, makes ServeSimChildIfAsked
// serve a batch-only node instead of running the program: its value is
// the node's batchNodeConfig as JSON.
const BatchNodeEnv = "RATELANE_BENCH_BATCH_NODE"

// batchNodeConfig is what the batch node needs to join the bench's
// region: its store and the simulators its review providers call.
type batchNodeConfig struct {
	Region        ratelane.Region `json:"region"`
	DataDir       string          `json:"data_dir"`
	LLM           string          `json:"llm"`
	Batch         string          `json:"batch"`
	BatchPieces   int             `json:"batch_pieces"`
	BatchCPUs     int             `json:"batch_cpus"`
	BatchYieldMax time.Duration   `json:"batch_yield_max"`
}

// serveBatchNode runs a batch-only Client of cfg (JSON) until in reaches
// its end: one line on out once it has started, then a graceful stop.
func serveBatchNode(cfgJSON string, in io.Reader, out io.Writer) error {
	var bc batchNodeConfig
	if err := json.Unmarshal([]byte(cfgJSON), &bc); err != nil {
		return fmt.Errorf("%s: %w", BatchNodeEnv, err)
	}
	rv, err := batchLaneReviews(bc.LLM, bc.Batch, nil)
	if err != nil {
		return err
	}
	ctx := context.Background()
	c, err := ratelane.NewClient(ctx, ratelane.Config{Regions: []ratelane.Region{bc.Region}, DataDir: bc.DataDir, Workers: 16,
		Plugins: []ratelane.Plugin{rv}, Registry: prometheus.NewRegistry(), Lanes: []ratelane.Lane{ratelane.LaneBatch},
		BatchPieces: bc.BatchPieces, BatchCPUs: bc.BatchCPUs, BatchYieldMax: bc.BatchYieldMax,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		_ = c.Close()
		return err
	}
	if _, err := fmt.Fprintf(out, "{\"ready\":true}\n"); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	stop, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return errors.Join(c.Stop(stop), c.Close())
}

// batchNode is a running batch-only child process.
type batchNode struct {
	*selfChild
}

// startBatchNode starts this executable as a batch-only node of region r
// (see BatchNodeEnv) at nice (0: the bench's own priority) and waits for
// it to have started.
func startBatchNode(bc batchNodeConfig, nice int) (*batchNode, error) {
	b, err := json.Marshal(bc)
	if err != nil {
		return nil, err
	}
	// Niced at once (before it opens the store) and again once it has
	// started (startSelf): Linux keeps a nice per thread, and a thread
	// inherits its creator's, so every thread the Go runtime had made by
	// then is set and those it makes later inherit the setting.
	sc, err := startSelf("batch node", BatchNodeEnv+"="+string(b), nice, batchNodeGrace, func(line string) error {
		if !strings.Contains(line, `"ready":true`) {
			return errors.New("not ready")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &batchNode{selfChild: sc}, nil
}

// cpuSeconds is the node's CPU time so far (procCPUSeconds).
func (n *batchNode) cpuSeconds() (float64, bool) { return procCPUSeconds(n.cmd.Process.Pid) }

// batchNodeGrace is how long a closed batch node has to stop gracefully
// and exit before it is killed.
const batchNodeGrace = 10 * time.Second

// close ends the node: its stdin closes (it stops gracefully and exits),
// and a kill follows if it has not within batchNodeGrace.
func (n *batchNode) close() error { return n.selfChild.close(batchNodeGrace) }
