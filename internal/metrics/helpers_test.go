package metrics

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// These helpers stand in for prometheus/testutil, which would add a
// dependency (kylelemons/godebug) to go.mod for a few lines of code.

// value returns the value of a single counter, gauge or untyped metric.
func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ms := collect(c)
	if len(ms) != 1 {
		t.Fatalf("collected %d metrics, want 1", len(ms))
	}
	var m dto.Metric
	if err := ms[0].Write(&m); err != nil {
		t.Fatal(err)
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	t.Fatalf("unsupported metric %v", ms[0].Desc())
	return 0
}

func collect(c prometheus.Collector) []prometheus.Metric {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var ms []prometheus.Metric
	for m := range ch {
		ms = append(ms, m)
	}
	return ms
}

// scrape renders the gathered series of the families names, family by
// family in that order, one a line.
func scrape(t *testing.T, reg prometheus.Gatherer, names ...string) string {
	t.Helper()
	var lines []string
	for _, name := range names {
		lines = append(lines, series(t, reg, name)...)
	}
	return strings.Join(lines, "\n")
}

// wantScrape fails t unless scrape(names) is exactly the lines want.
func wantScrape(t *testing.T, reg prometheus.Gatherer, names []string, want ...string) {
	t.Helper()
	if got, want := scrape(t, reg, names...), strings.Join(want, "\n"); got != want {
		t.Errorf("scrape:\n%s\nwant\n%s", got, want)
	}
}

// series renders the gathered series of one family as sorted
// `name{label="value",...} value` lines.
func series(t *testing.T, reg prometheus.Gatherer, name string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			lines = append(lines, fmt.Sprintf("%s{%s} %v", name, strings.Join(labels, ","), v))
		}
	}
	sort.Strings(lines)
	return lines
}
