package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// writeCollector reports the write counts of the regions whose store
// counts them (store.WriteCounter: the SQLite driver), read at each
// scrape: they are two atomic loads, so unlike the stats they need no
// cache.
type writeCollector struct {
	writes, txs, wait, behind *prometheus.Desc
	sources                   regionSources[store.WriteCounter]
}

func newWriteCollector() *writeCollector {
	return &writeCollector{
		writes: prometheus.NewDesc("ratelane_store_writes_total",
			"Guarded writes the region's store committed (SQLite). Divided by ratelane_store_transactions_total it is the group commit's yield.",
			[]string{"region"}, nil),
		txs: prometheus.NewDesc("ratelane_store_transactions_total",
			"Transactions (each one fsync) the region's store committed (SQLite): every write queued at the moment goes into one.",
			[]string{"region"}, nil),
		wait: prometheus.NewDesc("ratelane_store_write_wait_seconds",
			"Time from a store write's call until the region's single writer started it, by the lane that made it (SQLite). Interactive writes go first: their wait is at most the batch-lane write running when they arrived.",
			[]string{"region", "lane"}, nil),
		behind: prometheus.NewDesc("ratelane_store_write_behind",
			"For each store write, how many writes of the other lane the region's single writer ran between its call and its commit (SQLite). Interactive writes should stay at most 1.",
			[]string{"region", "lane"}, nil),
	}
}

// Describe sends the collector's descriptors.
func (c *writeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.writes
	ch <- c.txs
	ch <- c.wait
	ch <- c.behind
}

// Collect reports each region's counts.
func (c *writeCollector) Collect(ch chan<- prometheus.Metric) {
	c.sources.each(func(r string, src store.WriteCounter) {
		wc := src.WriteCounts()
		ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(wc.Writes), r)
		ch <- prometheus.MustNewConstMetric(c.txs, prometheus.CounterValue, float64(wc.Transactions), r)
		for _, lane := range job.Lanes {
			lw, ok := wc.Lanes[lane]
			if !ok {
				continue
			}
			ch <- constHistogram(c.wait, lw.Wait, r, string(lane))
			ch <- constHistogram(c.behind, lw.Behind, r, string(lane))
		}
	})
}

// constHistogram reports h as a Prometheus histogram.
func constHistogram(d *prometheus.Desc, h store.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Buckets[i]
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets, labels...)
}
