package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

func init() {
	registerVerbs("limits", "list, show and configure limit keys through the HTTP API", func() []subcommand {
		return []subcommand{
			{"ls", "list limit keys with their live state", runLimitsList},
			{"get", "show one limit key: configuration, tokens, pause, in flight, waiting cost", limitsGet().run},
			{"set", "create or reconfigure a limit key", runLimitsSet},
		}
	})
}

// limitView is the part of the API's limit-key representation the CLI
// shows. Live-state fields the server may omit are pointers, shown as "-".
type limitView struct {
	Region        string      `json:"region"`
	Name          string      `json:"name"`
	Rate          float64     `json:"rate"`
	Burst         float64     `json:"burst"`
	Concurrency   int         `json:"concurrency"`
	LearnedCap    int         `json:"learned_concurrency"`
	Adaptive      bool        `json:"adaptive"`
	LearnedRate   *float64    `json:"learned_rate"`
	InFlight      *int64      `json:"in_flight"`
	Waiting       *int64      `json:"waiting_cost"`
	PausedUntil   string      `json:"paused_until"`
	StrictUntil   string      `json:"strict_until"` // while a fixed key counts strictly after a refusal
	OldestWaiting *float64    `json:"oldest_waiting_seconds"`
	Windows       []windowArg `json:"windows"`
}

// windowsCell renders a key's windows for the table: LIMIT/PERIOD each,
// "fixed" after a fixed one (with its guard), "-" for none.
func windowsCell(ws []windowArg) string {
	if len(ws) == 0 {
		return "-"
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = num(w.Limit) + "/" + w.Period
		if w.Fixed {
			parts[i] += " fixed"
			if w.Guard != "" {
				parts[i] += " guard " + w.Guard
			}
		}
	}
	return strings.Join(parts, ", ")
}

func runLimitsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("limits ls", "[flags]", "List limit keys: configuration and live state.", stderr)
	cf := addClientFlags(fs)
	region := fs.String("region", "", "region whose keys to list (default every region the key may use)")
	wf := addWatchFlags(fs)
	_, c, err := cf.parse(fs, args, stderr)
	if err != nil {
		return err
	}
	return wf.loop(ctx, "limits ls", stdout, func() error {
		resp, err := c.do(ctx, http.MethodGet, "/v1/limits", regionQuery(*region), nil, nil)
		if err != nil {
			return err
		}
		if cf.json {
			return cf.print(stdout, resp.body)
		}
		return listTable[limitView]{keys: []string{"limits", "keys"}, noun: "limit",
			header: []string{"KEY", "REGION", "RATE/S", "BURST", "WINDOWS", "CONCURRENCY", "ADAPTIVE", "LEARNED/S", "IN FLIGHT", "WAITING", "PAUSED UNTIL", "STRICT UNTIL"},
			row: func(l limitView) []string {
				conc := "-"
				if l.Concurrency > 0 {
					conc = strconv.Itoa(l.Concurrency)
				}
				if l.LearnedCap > 0 && (l.Concurrency == 0 || l.LearnedCap < l.Concurrency) {
					conc = strconv.Itoa(l.LearnedCap) + " learned" // discovered from the upstream's refusals
				}
				return []string{l.Name, l.Region, num(l.Rate), num(l.Burst), windowsCell(l.Windows), conc, strconv.FormatBool(l.Adaptive),
					optNum(l.LearnedRate), optInt(l.InFlight), optInt(l.Waiting), when(l.PausedUntil), when(l.StrictUntil)}
			}}.print(stdout, stderr, resp.body)
	})
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }

func optNum(f *float64) string {
	if f == nil {
		return "-"
	}
	return num(*f)
}

func optInt(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}

// limitRequest is the body of PUT /v1/limits/{key}: the key's whole
// configuration (a PUT replaces it; live state is kept by the server).
type limitRequest struct {
	Shape       string      `json:"shape,omitempty"`
	Window      string      `json:"window,omitempty"`
	Rate        float64     `json:"rate"`
	Period      string      `json:"period,omitempty"`
	Burst       float64     `json:"burst"`
	Windows     []windowArg `json:"windows,omitempty"`
	Concurrency int         `json:"concurrency"`
	Adaptive    bool        `json:"adaptive"`
	MinRate     *float64    `json:"min_rate,omitempty"`
	PerStart    bool        `json:"per_start,omitempty"`
}

// windowArg is one --window flag (LIMIT/PERIOD, e.g. 200/1m) or
// --fixed-window flag (LIMIT/PERIOD[/GUARD], e.g. 5000/1h/1s).
type windowArg struct {
	Limit  float64 `json:"limit"`
	Period string  `json:"period"`
	Fixed  bool    `json:"fixed,omitempty"`
	Guard  string  `json:"guard,omitempty"`
}

// windowFlags collects repeated --window (sliding) or --fixed-window
// flags into one list, in the order given.
type windowFlags struct {
	list  *[]windowArg
	fixed bool
}

func (w windowFlags) String() string { return "" }

func (w windowFlags) Set(v string) error {
	parts := strings.Split(v, "/")
	usage := fmt.Errorf("want LIMIT/PERIOD such as 200/1m, got %q", v)
	if w.fixed {
		usage = fmt.Errorf("want LIMIT/PERIOD or LIMIT/PERIOD/GUARD such as 60/1m or 60/1m/1s, got %q", v)
	}
	if len(parts) != 2 && (!w.fixed || len(parts) != 3) {
		return usage
	}
	limit, err := strconv.ParseFloat(parts[0], 64)
	if err != nil || limit <= 0 {
		return usage
	}
	d, err := time.ParseDuration(parts[1])
	if err != nil || d <= 0 {
		return usage
	}
	a := windowArg{Limit: limit, Period: d.String(), Fixed: w.fixed}
	if len(parts) == 3 {
		g, err := time.ParseDuration(parts[2])
		if err != nil || g < 0 {
			return usage
		}
		a.Guard = g.String()
	}
	*w.list = append(*w.list, a)
	return nil
}

func runLimitsSet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("limits set", "KEY [flags]",
		"Create or reconfigure a limit key, e.g. 'limits set openai:gpt-4o-mini --rate 500 --per 1m --burst 20 --adaptive'\n"+
			"or 'limits set partner --shape window --rate 20 --per 1s --window 200/1m'\n"+
			"or 'limits set github --shape window --fixed --rate 5000 --per 1h' (a quota reset on the hour).\n"+
			"Unset flags reset to their defaults: a PUT replaces the whole configuration.", stderr)
	cf := addClientFlags(fs)
	var (
		req     limitRequest
		rate    float64
		per     time.Duration
		minRate float64
		region  string
		fixed   bool
	)
	fs.StringVar(&req.Shape, "shape", "", "how --rate per --per is counted: bucket (default; a token bucket with --burst) or window (at most --rate starts in any --per, sliding, or with --fixed in each aligned --per)")
	fs.BoolVar(&fixed, "fixed", false, "with --shape window: count each --per aligned to the clock (a quota reset at :00), a fixed window, instead of any --per")
	fs.Var(windowFlags{list: &req.Windows}, "window", "a further sliding window LIMIT/PERIOD, e.g. 200/1m (repeatable)")
	fs.Var(windowFlags{list: &req.Windows, fixed: true}, "fixed-window", "a further fixed window aligned to the clock LIMIT/PERIOD[/GUARD], e.g. 5000/1h or 60/1m/1s: a start within GUARD of a window's end counts in the next one too (repeatable)")
	fs.Float64Var(&rate, "rate", 0, "starts (cost units) allowed per --per; 0 does not pace starts")
	fs.DurationVar(&per, "per", time.Second, "the period --rate and --min-rate are counted over")
	fs.Float64Var(&req.Burst, "burst", 0, "cost units that may start at once from a full bucket (0: one second's worth)")
	fs.IntVar(&req.Concurrency, "concurrency", 0, "cap on the key's jobs in flight (0: no cap)")
	fs.BoolVar(&req.Adaptive, "adaptive", false, "learn the rate from 429s and successes, up to --rate")
	fs.Float64Var(&minRate, "min-rate", 0, "floor of an adaptive key's learned rate, per --per")
	fs.BoolVar(&req.PerStart, "per-start", false, "count starts, not cost: every start takes one unit whatever the job's cost (a requests key next to a tokens key)")
	fs.StringVar(&region, "region", "", "region whose key to set (server default if empty)")
	rest, err := parseArgs(fs, args, "KEY")
	if err != nil {
		return err
	}
	if per <= 0 {
		return usageError{"--per must be positive, e.g. 1s or 1m"}
	}
	// The API counts bucket rates per second; --per is a convenience for
	// quotas documented per minute ("500 RPM"). A window keeps its period.
	req.Rate = rate / per.Seconds()
	if req.Shape == "window" {
		req.Rate, req.Period = rate, per.String()
	}
	if fixed {
		if req.Shape != "window" {
			return usageError{"--fixed applies to --shape window; use --fixed-window for a further fixed window"}
		}
		req.Window = "fixed"
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "min-rate" {
			m := minRate / per.Seconds()
			req.MinRate = &m
		}
	})
	c, err := cf.client(stderr)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPut, "/v1/limits/"+url.PathEscape(rest[0]), regionQuery(region), req, nil)
	if err != nil {
		return err
	}
	if cf.json {
		return cf.print(stdout, resp.body)
	}
	fmt.Fprintf(stdout, "set %s: rate %s/s, burst %s, concurrency %d, adaptive %t\n",
		rest[0], num(req.Rate), num(req.Burst), req.Concurrency, req.Adaptive)
	return nil
}

func limitsGet() apiCall {
	return regionCall("limits get", "KEY", "Show one limit key: configuration, tokens, learned rate, pause and its source, in flight, waiting cost.",
		"the key's region (required unless the key may use one region)", http.MethodGet,
		func(key string) string { return "/v1/limits/" + esc(key) },
		func(w io.Writer, _ []string, body []byte) error { return showFields(w, body) })
}
