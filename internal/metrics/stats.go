package metrics

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// StatsSource is what the stats collector reads: one region's store.Stats.
// Every store.Store is one.
type StatsSource interface {
	Stats(ctx context.Context, now time.Time) (store.Stats, error)
}

// StatsCacheTTL is how long one read of the stores' stats serves scrapes,
// so that several Prometheus servers (or a fast scrape interval) do not
// turn into a query storm on the stores.
const StatsCacheTTL = 2 * time.Second

// statsTimeout bounds one read of one store, below Prometheus' default
// 10 s scrape timeout.
const statsTimeout = 5 * time.Second

// AddRegion makes scrapes report region's job counts, oldest ready ages and
// leases in flight, read from src (normally the region's store.Store), and,
// when src is also a KeySource (every store.Store is), the waiting cost,
// leases in flight and pause of its busiest limit keys, and, when src
// counts its writes (store.WriteCounter: the SQLite driver), its writes
// and transactions. Adding a region again replaces its source.
func (m *Metrics) AddRegion(region string, src StatsSource) {
	m.stats.add(region, src)
	if ks, ok := src.(KeySource); ok {
		m.keys.add(region, ks)
	}
	if wc, ok := src.(store.WriteCounter); ok {
		m.writes.sources.add(region, wc)
	}
}

// statsCollector reads store.Stats for every region on scrape, at most once
// per StatsCacheTTL, and reports them as gauges.
type statsCollector struct {
	jobs, oldest, inFlight, up *prometheus.Desc

	mu      sync.Mutex // held across a refresh, so concurrent scrapes share one
	sources map[string]StatsSource
	now     func() time.Time
	ttl     time.Duration
	readAt  time.Time
	snap    map[string]*store.Stats // nil value: the last read failed
}

func newStatsCollector() *statsCollector {
	return &statsCollector{
		jobs: prometheus.NewDesc("ratelane_jobs",
			"Jobs by region, lane and state.", []string{"region", "lane", "state"}, nil),
		oldest: prometheus.NewDesc("ratelane_oldest_ready_seconds",
			"Age of the oldest job that is ready to run (eligible and waiting) by region and lane; 0 when none. Alert when it nears the lane's latency budget.",
			[]string{"region", "lane"}, nil),
		inFlight: prometheus.NewDesc("ratelane_leases_in_flight",
			"Jobs currently leased (running) by region.", []string{"region"}, nil),
		up: prometheus.NewDesc("ratelane_store_up",
			"1 when the last read of the region's store stats succeeded, else 0.", []string{"region"}, nil),
		sources: map[string]StatsSource{},
		now:     time.Now,
		ttl:     StatsCacheTTL,
	}
}

func (c *statsCollector) add(region string, src StatsSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources[region] = src
	c.readAt = time.Time{} // report the new region on the next scrape
}

// Describe sends the collector's descriptors.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobs
	ch <- c.oldest
	ch <- c.inFlight
	ch <- c.up
}

// Collect reports the cached stats, reading the stores first when the cache
// is older than its TTL. A store that fails is reported as
// ratelane_store_up 0 rather than failing the whole scrape.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.snapshot()
	regions := make([]string, 0, len(snap))
	for r := range snap {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	for _, region := range regions {
		st := snap[region]
		if st == nil {
			ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0, region)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1, region)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(st.Running), region)
		// Every known lane and state, zeros included, so series do not
		// appear and vanish as queues fill and drain; unknown ones are
		// ignored, keeping the label sets closed.
		for _, lane := range job.Lanes {
			for _, state := range job.States {
				ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue,
					float64(st.Counts[lane][state]), region, string(lane), string(state))
			}
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue,
				st.OldestReady[lane].Seconds(), region, string(lane))
		}
	}
}

func (c *statsCollector) snapshot() map[string]*store.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.snap != nil && !c.readAt.IsZero() && now.Sub(c.readAt) < c.ttl {
		return c.snap
	}
	snap := make(map[string]*store.Stats, len(c.sources))
	for region, src := range c.sources {
		ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
		st, err := src.Stats(ctx, now)
		cancel()
		if err != nil {
			snap[region] = nil
			continue
		}
		snap[region] = &st
	}
	c.snap, c.readAt = snap, now
	return snap
}
