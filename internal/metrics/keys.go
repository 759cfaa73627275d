package metrics

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
)

// KeySource is what the per-key collector reads from one region: its limit
// keys and the cost waiting on them. Every store.Store is one.
type KeySource interface {
	ListLimits(ctx context.Context) ([]admission.State, error)
	Backlog(ctx context.Context, lane job.Lane, keys []string) (map[string]int64, error)
}

// TopKeys is how many limit keys per region get their own series: those
// with the most waiting cost. The others are summed into key="_other", so
// a region with a hundred thousand subscriber keys still exports at most
// TopKeys+1 series per metric, and an operator can graph the subscribers
// that are backed up.
const TopKeys = 20

// KeysCacheTTL is how long one read of the keys serves scrapes: summing
// each key's backlog is a query per key.
const KeysCacheTTL = 10 * time.Second

// otherKey labels the keys outside the top TopKeys.
const otherKey = "_other"

// keyCollector reports per-key waiting cost, in-flight leases and pause.
type keyCollector struct {
	waiting, inFlight, paused *prometheus.Desc

	mu      sync.Mutex
	sources map[string]KeySource
	now     func() time.Time
	readAt  time.Time
	snap    map[string][]keyRow
}

// keyRow is one exported key (or the _other aggregate) of a region.
type keyRow struct {
	key      string
	waiting  int64
	inFlight int
	paused   time.Duration
}

func newKeyCollector() *keyCollector {
	labels := []string{"region", "key"}
	return &keyCollector{
		waiting: prometheus.NewDesc("ratelane_limit_key_waiting_cost",
			"Cost of the jobs waiting on a limit key (waiting or retry_scheduled), for the keys with the most; the rest are summed as key=\"_other\".", labels, nil),
		inFlight: prometheus.NewDesc("ratelane_limit_key_in_flight",
			"Leases in flight on a limit key, for the same keys as ratelane_limit_key_waiting_cost.", labels, nil),
		paused: prometheus.NewDesc("ratelane_limit_key_paused_seconds",
			"Seconds until a limit key's 429 pause ends, 0 when not paused (for _other: the longest).", labels, nil),
		sources: map[string]KeySource{}, now: time.Now,
	}
}

func (c *keyCollector) add(region string, src KeySource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources[region] = src
	c.snap = nil
}

// Describe sends the collector's descriptors.
func (c *keyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.waiting
	ch <- c.inFlight
	ch <- c.paused
}

// Collect reports the cached rows, reading the stores when they are stale.
// A region whose keys cannot be read is left out (ratelane_store_up says
// why).
func (c *keyCollector) Collect(ch chan<- prometheus.Metric) {
	for region, rows := range c.snapshot() {
		for _, r := range rows {
			ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(r.waiting), region, r.key)
			ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(r.inFlight), region, r.key)
			ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, r.paused.Seconds(), region, r.key)
		}
	}
}

func (c *keyCollector) snapshot() map[string][]keyRow {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.snap != nil && now.Sub(c.readAt) < KeysCacheTTL {
		return c.snap
	}
	snap := make(map[string][]keyRow, len(c.sources))
	for region, src := range c.sources {
		ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
		rows, err := readKeys(ctx, src, now)
		cancel()
		if err == nil {
			snap[region] = rows
		}
	}
	c.snap, c.readAt = snap, now
	return snap
}

// readKeys reads one region's keys and keeps the TopKeys with the most
// waiting cost, folding the rest into one _other row.
func readKeys(ctx context.Context, src KeySource, now time.Time) ([]keyRow, error) {
	states, err := src.ListLimits(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(states))
	for i, k := range states {
		names[i] = k.Name
	}
	// The batch lane's backlog counts both lanes: everything waiting.
	backlog, err := src.Backlog(ctx, job.LaneBatch, names)
	if err != nil {
		return nil, err
	}
	rows := make([]keyRow, len(states))
	for i, k := range states {
		rows[i] = keyRow{key: k.Name, waiting: backlog[k.Name], inFlight: k.InFlight, paused: max(0, k.PausedUntil.Sub(now))}
	}
	slices.SortFunc(rows, func(a, b keyRow) int {
		return cmp.Or(cmp.Compare(b.waiting, a.waiting), cmp.Compare(a.key, b.key))
	})
	if len(rows) <= TopKeys {
		return rows, nil
	}
	other := keyRow{key: otherKey}
	for _, r := range rows[TopKeys:] {
		other.waiting += r.waiting
		other.inFlight += r.inFlight
		other.paused = max(other.paused, r.paused)
	}
	return append(rows[:TopKeys:TopKeys], other), nil
}
