package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ratelane/ratelane/internal/bench"
)

// betterOf says which direction is better for a metric: better's entry,
// else that of the name without an upstreams mix (and destination)
// suffix, so "makespan_ratio_issue" is "lower" and
// "goodput_issue_sliding-date" "higher".
func betterOf(name string) string {
	if d, ok := better[name]; ok {
		return d
	}
	for _, prefix := range []string{"makespan_ratio_", "makespan_seconds_", "rate_limited_share_", "duplicates_", "lost_", "goodput_min_", "goodput_"} {
		if strings.HasPrefix(name, prefix) {
			return better[strings.TrimSuffix(prefix, "_")]
		}
	}
	return ""
}

// better says, per metric name, which direction is better; metrics not
// listed describe the workload (sizes, offered load) and get no ratio.
var better = map[string]string{
	"lost":                                  "lower",
	"insert_jobs_per_second":                "higher",
	"jobs_per_second":                       "higher",
	"enqueue_to_start_p50_ms":               "lower",
	"enqueue_to_start_p99_ms":               "lower",
	"goodput":                               "higher",
	"goodput_min":                           "higher",
	"rate_limited_share":                    "lower",
	"rate_limited_share_after_first_second": "lower",
	"duplicates":                            "lower",
	"makespan_seconds":                      "lower",
	"makespan_ratio":                        "lower",
	"interactive_p50_ms":                    "lower",
	"interactive_p99_ms":                    "lower",
	"interactive_max_ms":                    "lower",
}

// report is every workload's results per system.
type report struct {
	baseline  string
	systems   []string
	workloads []workloadReport
}

// workloadReport is one workload's aggregated result or error per system.
type workloadReport struct {
	name    string
	results map[string]bench.Result
	errs    map[string]error
}

func (r *report) failed() bool {
	for _, w := range r.workloads {
		if len(w.errs) > 0 {
			return true
		}
	}
	return false
}

// writeJSON writes {"workload": {"system": {metrics..., "runs": {...}} or
// {"error": "..."}}}, plus "baseline".
func (r *report) writeJSON(w io.Writer) error {
	out := map[string]any{}
	if r.baseline != "" {
		out["baseline"] = r.baseline
	}
	for _, wr := range r.workloads {
		m := map[string]any{}
		for _, s := range r.systems {
			if err := wr.errs[s]; err != nil {
				m[s] = map[string]string{"error": err.Error()}
			} else if res, ok := wr.results[s]; ok {
				m[s] = res
			}
		}
		out[wr.name] = m
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// writeTable writes one block per workload: per metric, one line per
// system with its median, its min–max over several runs, and the ratio
// baseline ÷ system.
func (r *report) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ratio := "ratio"
	if r.baseline != "" {
		ratio = r.baseline + " ÷ system"
	}
	fmt.Fprintf(tw, "Values are medians, min–max in brackets over several runs. The ratio divides the baseline by the system:\n")
	fmt.Fprintf(tw, "for a \"higher\" metric above 1 favours the baseline, for a \"lower\" one below 1 does.\n")
	for _, wr := range r.workloads {
		fmt.Fprintf(tw, "\n%s\n", wr.name)
		fmt.Fprintf(tw, "  metric\tbetter\tsystem\tvalue\t%s\n", ratio)
		for _, s := range r.systems {
			if err := wr.errs[s]; err != nil {
				fmt.Fprintf(tw, "  (failed)\t\t%s\t%s\t\n", s, oneLine(err.Error()))
			}
		}
		for _, name := range metricNames(wr, r.systems) {
			label, dir := name, betterOf(name)
			if dir == "" {
				dir = "-"
			}
			base, hasBase := wr.results[r.baseline].Get(name)
			for _, s := range r.systems {
				res, ok := wr.results[s]
				if !ok {
					continue
				}
				m, ok := metric(res, name)
				if !ok {
					continue
				}
				rt := ""
				if hasBase && betterOf(name) != "" && s != r.baseline {
					rt = ratioOf(base, m.Value)
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", label, dir, s, m.Format(), rt)
				label, dir = "", ""
			}
		}
	}
	return tw.Flush()
}

// metricNames lists the metrics of the first system with a result, in
// report order.
func metricNames(wr workloadReport, systems []string) []string {
	for _, s := range systems {
		if res, ok := wr.results[s]; ok {
			names := make([]string, len(res.Metrics))
			for i, m := range res.Metrics {
				names[i] = m.Name
			}
			return names
		}
	}
	return nil
}

func metric(r bench.Result, name string) (bench.Metric, bool) {
	for _, m := range r.Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return bench.Metric{}, false
}

// ratioOf formats base ÷ v: "=" when both are 0, "inf" when only v is.
func ratioOf(base, v float64) string {
	switch {
	case v == 0 && base == 0:
		return "="
	case v == 0:
		return "inf"
	}
	return strconv.FormatFloat(base/v, 'f', 2, 64)
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}
