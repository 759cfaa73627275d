package metrics

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/store"
)

// writeCollector reports the write counts of the regions whose store
// counts them (store.WriteCounter: the SQLite driver), read at each
// scrape: they are two atomic loads, so unlike the stats they need no
// cache.
type writeCollector struct {
	writes, txs *prometheus.Desc

	mu      sync.Mutex
	sources map[string]store.WriteCounter
}

func newWriteCollector() *writeCollector {
	return &writeCollector{
		writes: prometheus.NewDesc("ratelane_store_writes_total",
			"Guarded writes the region's store committed (SQLite). Divided by ratelane_store_transactions_total it is the group commit's yield.",
			[]string{"region"}, nil),
		txs: prometheus.NewDesc("ratelane_store_transactions_total",
			"Transactions (each one fsync) the region's store committed (SQLite): every write queued at the moment goes into one.",
			[]string{"region"}, nil),
		sources: map[string]store.WriteCounter{},
	}
}

func (c *writeCollector) add(region string, src store.WriteCounter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources[region] = src
}

// Describe sends the collector's descriptors.
func (c *writeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.writes
	ch <- c.txs
}

// Collect reports each region's counts.
func (c *writeCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	regions := make([]string, 0, len(c.sources))
	for r := range c.sources {
		regions = append(regions, r)
	}
	sources := make(map[string]store.WriteCounter, len(c.sources))
	for r, s := range c.sources {
		sources[r] = s
	}
	c.mu.Unlock()
	sort.Strings(regions)
	for _, r := range regions {
		wc := sources[r].WriteCounts()
		ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(wc.Writes), r)
		ch <- prometheus.MustNewConstMetric(c.txs, prometheus.CounterValue, float64(wc.Transactions), r)
	}
}
