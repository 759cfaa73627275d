package main

// This file is the stats command: GET /v1/stats, queue depth by state and
// the oldest ready job's age against its lane's budget, per region and lane.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

func init() {
	// statsCall runs anew on every run, as registerVerbs' verbs do: its
	// apiCall holds the run's flag values, and runs (tests run many at
	// once) must not share them.
	register("stats", "show queue depth by state and oldest ready age per region and lane (admin keys)",
		helpOK(func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return statsCall().run(ctx, args, stdout, stderr)
		}))
}

func statsCall() apiCall {
	var region string
	return apiCall{name: "stats", usage: "[flags]",
		summary: "Show queue depth by state and the oldest ready job's age against the lane's budget, per region and lane, and this node's counters.",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&region, "region", "", "one region (default every region the key may use)")
		},
		request: func([]string) (string, string, url.Values, any, error) {
			return http.MethodGet, "/v1/stats", regionQuery(region), nil, nil
		},
		show: func(w io.Writer, _ []string, body []byte) error {
			var st struct {
				Regions []struct {
					Region   string `json:"region"`
					InFlight int64  `json:"in_flight"`
					Lanes    []struct {
						Lane          string           `json:"lane"`
						Depth         map[string]int64 `json:"depth"`
						OldestReady   float64          `json:"oldest_ready_seconds"`
						BudgetSeconds float64          `json:"budget_seconds"`
					} `json:"lanes"`
				} `json:"regions"`
				Counters struct {
					Starts      float64 `json:"starts"`
					RateLimited float64 `json:"rate_limited"`
					Attempts    float64 `json:"attempts"`
				} `json:"counters"`
			}
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("unexpected response: %w", err)
			}
			var rows [][]string
			for _, r := range st.Regions {
				for _, l := range r.Lanes {
					states := make([]string, 0, len(l.Depth))
					for s, n := range l.Depth {
						if n != 0 {
							states = append(states, s+"="+strconv.FormatInt(n, 10))
						}
					}
					sort.Strings(states)
					rows = append(rows, []string{r.Region, l.Lane, cell(strings.Join(states, " ")),
						num(l.OldestReady) + "s", num(l.BudgetSeconds) + "s", strconv.FormatInt(r.InFlight, 10)})
				}
			}
			if err := table(w, []string{"REGION", "LANE", "DEPTH", "OLDEST READY", "BUDGET", "IN FLIGHT"}, rows); err != nil {
				return err
			}
			_, err := fmt.Fprintf(w, "\nthis node: %s starts, %s attempts, %s answered 429\n",
				num(st.Counters.Starts), num(st.Counters.Attempts), num(st.Counters.RateLimited))
			return err
		}}
}
