package bench

import (
	"encoding/json"
	"testing"
	"time"
)

func TestBenchMedian(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, 5, 1}, 5},
	} {
		xs := append([]float64(nil), tc.xs...)
		if got := Median(xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
		for i := range xs {
			if xs[i] != tc.xs[i] {
				t.Fatalf("Median reordered its input: %v", xs)
			}
		}
	}
}

func TestBenchAggregate(t *testing.T) {
	t.Parallel()
	run := func(goodput, dups float64) Result {
		r := Result{Workload: "paced"}
		r.add("goodput", goodput, "of allowance")
		r.add("duplicates", dups, "")
		return r
	}
	agg := Aggregate([]Result{run(0.9, 0), run(0.5, 2), run(0.7, 0)})
	if agg.Workload != "paced" || len(agg.Metrics) != 2 {
		t.Fatalf("Aggregate = %+v", agg)
	}
	g := agg.Metrics[0]
	if lo, hi := g.Spread(); g.Name != "goodput" || g.Value != 0.7 || lo != 0.5 || hi != 0.9 {
		t.Errorf("goodput = %v (%v-%v), want median 0.7 (0.5-0.9)", g.Value, lo, hi)
	}
	if got, want := g.Format(), "0.7 (0.5–0.9)"; got != want {
		t.Errorf("Format() = %q, want %q", got, want)
	}
	if d := agg.Metrics[1]; d.Value != 0 || len(d.Runs) != 3 {
		t.Errorf("duplicates = %+v, want median 0 over 3 runs", d)
	}

	b, err := json.Marshal(agg)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"goodput":0.7,"duplicates":0,"runs":{"goodput":[0.9,0.5,0.7],"duplicates":[0,2,0]}}`
	if string(b) != want {
		t.Errorf("JSON = %s\nwant   %s", b, want)
	}

	// One run stays as it was: no "runs" member, no range in the table.
	one := Aggregate([]Result{run(0.9, 0)})
	if b, _ := json.Marshal(one); string(b) != `{"goodput":0.9,"duplicates":0}` {
		t.Errorf("single run JSON = %s", b)
	}
	if got := one.Metrics[0].Format(); got != "0.9" {
		t.Errorf("single run Format() = %q", got)
	}
}

func TestBenchPlansMatchTheWorkloads(t *testing.T) {
	t.Parallel()
	p := Paced(true)
	if len(p.Destinations) != 4 || p.Destinations[0].Rate != 2 || p.Destinations[3].Rate != 40 || p.Destinations[3].Burst != 10 {
		t.Errorf("Paced(true) = %+v", p)
	}
	jobs := 0
	for _, d := range p.Destinations {
		jobs += d.Jobs
	}
	if order := p.Order(); len(order) != jobs || order[0].Name != "dest-00" || order[1].Name != "dest-01" {
		t.Errorf("Order() has %d jobs starting %v, want %d round-robin", len(order), order[:2], jobs)
	}
	if f := Flood(false); f.Rate != 100 || f.Burst != 25 || f.InteractiveRate != 5 || f.Backlog != 100_000 || f.Window != 20*time.Second {
		t.Errorf("Flood(false) = %+v", f)
	}
	if tp := Throughput(false); tp.Period(tp.Offered(10_000)) != 5*time.Millisecond {
		t.Errorf("Throughput period at 10,000 jobs/s = %v, want 5ms (2,000 jobs/s in batches of 10)", tp.Period(tp.Offered(10_000)))
	}
}

// TestDefaultBound: the full-size batch-isolation sweep gets a bound it can
// finish in (a 1-minute bound cut every full run short); the rest keep 60 s.
func TestDefaultBound(t *testing.T) {
	if got := DefaultBound("batch-isolation", false); got < 5*time.Minute {
		t.Errorf("batch-isolation bound %v, want >= 5m", got)
	}
	for _, n := range Workloads {
		if n == "batch-isolation" {
			if got := DefaultBound(n, true); got != time.Minute {
				t.Errorf("smoke %s bound %v, want 1m", n, got)
			}
			continue
		}
		if n == "io-floor" { // 2 minutes of windows with a replay
			if got := DefaultBound(n, false); got != 4*time.Minute {
				t.Errorf("%s bound %v, want 4m", n, got)
			}
			continue
		}
		if n == "batch-floor" { // 40 s of windows: a minute left little for a loaded machine
			if got := DefaultBound(n, false); got != 2*time.Minute {
				t.Errorf("%s bound %v, want 2m", n, got)
			}
			continue
		}
		if got := DefaultBound(n, false); got != time.Minute {
			t.Errorf("%s bound %v, want 1m", n, got)
		}
	}
}
