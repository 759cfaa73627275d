package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// recorder is a Registerer that keeps the names of what is registered.
type recorder struct{ names []string }

var fqName = regexp.MustCompile(`fqName: "([a-z_:]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names = append(r.names, m[1])
		}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// metricRef finds metric names in PromQL, dropping histogram suffixes.
var metricRef = regexp.MustCompile(`\bratelane_[a-z_]+\b`)

// TestDeployFilesUseRealMetrics checks every metric the Grafana dashboard
// and the Prometheus alert rules query is one ratelane exports, so a
// renamed metric cannot leave a panel or an alert silently empty.
func TestDeployFilesUseRealMetrics(t *testing.T) {
	rec := &recorder{}
	if _, err := New(rec); err != nil {
		t.Fatal(err)
	}
	known := rec.names
	// The HTTP API registers its own request counter; check its source.
	api, err := os.ReadFile("../httpapi/server.go")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(api), `"ratelane_api_requests_total"`) {
		known = append(known, "ratelane_api_requests_total")
	}
	if len(known) < 10 {
		t.Fatalf("found only %v", known)
	}

	raw, err := os.ReadFile("../../deploy/grafana/ratelane.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("deploy/grafana/ratelane.json: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	rules, err := os.ReadFile("../../deploy/prometheus/ratelane-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	exprs = append(exprs, string(rules))
	used := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricRef.FindAllString(e, -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(known, b) {
					base = b
				}
			}
			if !slices.Contains(known, base) {
				t.Errorf("deploy files query %s, which ratelane does not export (known: %v)", name, known)
			}
			used[base] = true
		}
	}
	for _, name := range known {
		if !used[name] {
			t.Errorf("metric %s is on no Grafana panel or alert", name)
		}
	}
}
