package main

// This file holds the webhook verbs: subscribers, events and deliveries,
// over /v1/subscribers, /v1/events and /v1/deliveries. A subscriber's
// signing secret is printed only in the answer that creates or rotates it.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/ratelane/ratelane/internal/webhook/hookapi"
)

func init() {
	registerVerbs("subscribers", "create, list, show, update, rotate and delete webhook subscribers", subscriberVerbs)
	registerVerbs("events", "publish webhook events and list their deliveries", func() []subcommand {
		return []subcommand{
			{"publish", "publish an event to the subscribers of its topic", eventPublish().run},
			{"deliveries", "list the deliveries of an event", eventDeliveries().run},
		}
	})
	registerVerbs("deliveries", "list, redeliver and inspect webhook deliveries", func() []subcommand {
		return []subcommand{
			{"ls", "list deliveries of a subscriber (--subscriber) or an event (--event)", deliveriesList().run},
			{"get", "show one delivery (its job)", deliveryGet().run},
			{"redeliver", "send a delivery again", deliveryRedeliver().run},
			{"response", "admin: the last failed answer of a delivery", deliveryResponse().run},
		}
	})
}

// subscriberFlags are the flags of subscribers create and update; the body
// mirrors the API's subscriber request.
type subscriberFlags struct {
	region, url, tenant, shape, period, secret string
	topics, headers                            stringList
	rate, burst, concurrency                   int
	adaptive, disabled                         bool
}

func (sf *subscriberFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&sf.region, "region", "", "the subscriber's region (required unless the key has one)")
	fs.StringVar(&sf.url, "url", "", "the receiver's http or https `URL` (required)")
	fs.Var(&sf.topics, "topic", "an event `TOPIC` to receive; repeat for several; * receives every topic (required)")
	fs.StringVar(&sf.tenant, "tenant", "", "the tenant whose events it receives (default: the key's own tenant)")
	fs.IntVar(&sf.rate, "rate", 0, "deliveries per period; 0 paces nothing")
	fs.StringVar(&sf.period, "period", "", "the rate's period, e.g. 1s or 1m (server default 1s)")
	fs.IntVar(&sf.burst, "burst", 0, "deliveries that may start at once (server default)")
	fs.StringVar(&sf.shape, "shape", "", "window (default) or bucket")
	fs.IntVar(&sf.concurrency, "concurrency", 0, "deliveries in flight at most; 0 means no cap")
	fs.BoolVar(&sf.adaptive, "adaptive", false, "let 429s lower the pace")
	fs.StringVar(&sf.secret, "secret", "", "a whsec_ signing `SECRET`; absent generates one on create and keeps it on update")
	fs.Var(&sf.headers, "header", "a static `NAME=VALUE` header sent with every delivery; repeatable")
	fs.BoolVar(&sf.disabled, "disabled", false, "create or leave the subscriber disabled")
}

func (sf *subscriberFlags) body() (map[string]any, error) {
	if sf.url == "" {
		return nil, usageError{"--url is required"}
	}
	if len(sf.topics) == 0 {
		return nil, usageError{"--topic is required (repeat it for several topics)"}
	}
	b := map[string]any{"url": sf.url, "topics": []string(sf.topics)}
	if sf.tenant != "" {
		b["tenant"] = sf.tenant
	}
	if sf.rate < 0 || sf.burst < 0 || sf.concurrency < 0 {
		return nil, usageError{"--rate, --burst and --concurrency must not be negative"}
	}
	if sf.rate > 0 {
		r := map[string]any{"limit": sf.rate}
		if sf.period != "" {
			r["period"] = sf.period
		}
		if sf.burst > 0 {
			r["burst"] = sf.burst
		}
		if sf.shape != "" {
			r["shape"] = sf.shape
		}
		b["rate"] = r
	} else if sf.period != "" || sf.burst > 0 || sf.shape != "" {
		return nil, usageError{"--period, --burst and --shape need --rate"}
	}
	if sf.concurrency > 0 {
		b["concurrency"] = sf.concurrency
	}
	if sf.adaptive {
		b["adaptive"] = true
	}
	if sf.secret != "" {
		b["secret"] = sf.secret
	}
	if len(sf.headers) > 0 {
		h := map[string]string{}
		for _, kv := range sf.headers {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, usageError{fmt.Sprintf("--header wants NAME=VALUE, got one without '=' (header %d)", len(h)+1)}
			}
			h[k] = v
		}
		b["headers"] = h
	}
	b["enabled"] = !sf.disabled
	return b, nil
}

// subscriberRate is a subscriber's allowance as the table shows it.
func subscriberRate(s hookapi.SubscriberView) string {
	if s.Rate == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%s", s.Rate.Limit, s.Rate.Period)
}

// subscriberEnabled is "yes", or "no" and why.
func subscriberEnabled(s hookapi.SubscriberView) string {
	if s.Enabled {
		return "yes"
	}
	return "no " + cell(s.DisabledReason)
}

func subscriberPut(verb, doneWord string) apiCall {
	sf := &subscriberFlags{}
	return apiCall{name: "subscribers " + verb, usage: "ID --url URL --topic TOPIC [flags]",
		summary: "Create or replace a webhook subscriber (PUT /v1/subscribers/ID). A generated signing secret is printed once.",
		args:    []string{"ID"}, flags: sf.define,
		request: func(pos []string) (string, string, url.Values, any, error) {
			b, err := sf.body()
			return http.MethodPut, "/v1/subscribers/" + esc(pos[0]), regionQuery(sf.region), b, err
		},
		show: func(w io.Writer, pos []string, body []byte) error {
			var r struct {
				Subscriber hookapi.SubscriberView `json:"subscriber"`
				Created    bool                   `json:"created"`
				Secret     string                 `json:"secret"`
			}
			if err := json.Unmarshal(body, &r); err != nil {
				return fmt.Errorf("unexpected response: %w", err)
			}
			word := doneWord
			if r.Created {
				word = "created"
			}
			fmt.Fprintf(w, "%s subscriber %s (region %s, limit key %s)\n", word, r.Subscriber.ID, r.Subscriber.Region, r.Subscriber.LimitKey)
			if r.Secret != "" {
				fmt.Fprintf(w, "signing secret, shown only this once:\n\n    %s\n\n", r.Secret)
			}
			return nil
		}}
}

func subscriberVerbs() []subcommand {
	var region, window string
	var pg pager
	regionFlag := func(fs *flag.FlagSet) {
		fs.StringVar(&region, "region", "", "the subscriber's region (required unless the key has one)")
	}
	one := func(name, usage, summary, method, suffix string, q func() url.Values, show func(io.Writer, []string, []byte) error, done func([]string) string, extra func(*flag.FlagSet)) apiCall {
		return apiCall{name: "subscribers " + name, usage: usage, summary: summary, args: []string{"ID"},
			flags: func(fs *flag.FlagSet) {
				regionFlag(fs)
				if extra != nil {
					extra(fs)
				}
			},
			request: func(pos []string) (string, string, url.Values, any, error) {
				return method, "/v1/subscribers/" + esc(pos[0]) + suffix, q(), nil, nil
			}, show: show, done: done}
	}
	rq := func() url.Values { return regionQuery(region) }
	list := listCall("subscribers ls", "List webhook subscribers in id order (never their secrets).", "/v1/subscribers", []listFilter{
		{"region", "list one region (default every region the key may use)"},
	}, listTable[hookapi.SubscriberView]{keys: []string{"subscribers"}, noun: "subscriber",
		header: []string{"ID", "REGION", "TENANT", "URL", "TOPICS", "RATE", "ENABLED"},
		row: func(s hookapi.SubscriberView) []string {
			return []string{s.ID, s.Region, s.Tenant, s.URL, strings.Join(s.Topics, ","), subscriberRate(s), subscriberEnabled(s)}
		}})
	get := one("get", "ID [flags]", "Show a webhook subscriber: URL, topics, rate, health (never its secret).", http.MethodGet, "", rq,
		func(w io.Writer, _ []string, body []byte) error { return showFields(w, body) }, nil, nil)
	rotate := one("rotate", "ID [flags]", "Give a subscriber a new signing secret, printed once; the old one keeps signing for --window.",
		http.MethodPost, "/rotate-secret", func() url.Values {
			q := regionQuery(region)
			if window != "" {
				q.Set("window", window)
			}
			return q
		},
		func(w io.Writer, pos []string, body []byte) error {
			var r struct {
				Subscriber struct {
					RotatingUntil string `json:"secret_rotating_until"`
				} `json:"subscriber"`
				Secret string `json:"secret"`
			}
			if err := json.Unmarshal(body, &r); err != nil {
				return fmt.Errorf("unexpected response: %w", err)
			}
			fmt.Fprintf(w, "rotated the secret of %s; the old one signs until %s\n", pos[0], when(r.Subscriber.RotatingUntil))
			fmt.Fprintf(w, "new signing secret, shown only this once:\n\n    %s\n\n", r.Secret)
			return nil
		}, nil, func(fs *flag.FlagSet) {
			fs.StringVar(&window, "window", "", "how long the old secret keeps signing, e.g. 24h (server default)")
		})
	del := one("rm", "ID [flags]", "Delete a webhook subscriber; its queued deliveries end as subscriber_gone.", http.MethodDelete, "", rq,
		nil, func(pos []string) string { return "deleted subscriber " + pos[0] }, nil)
	dels := del
	dels.name = "subscribers delete"
	deliveries := apiCall{name: "subscribers deliveries", usage: "ID [flags]", summary: "List a subscriber's deliveries, newest first.",
		args: []string{"ID"},
		flags: func(fs *flag.FlagSet) {
			regionFlag(fs)
			pg.flags(fs)
		},
		request: func(pos []string) (string, string, url.Values, any, error) {
			return pg.get("/v1/subscribers/"+esc(pos[0])+"/deliveries", map[string]string{"region": region})
		},
		page: pageDeliveries("subscribers deliveries")}
	return []subcommand{
		{"create", "create a subscriber (its generated secret is shown once)", subscriberPut("create", "replaced").run},
		{"ls", "list subscribers", list.run},
		{"get", "show a subscriber", get.run},
		{"update", "replace a subscriber's configuration (keeps its secret unless --secret)", subscriberPut("update", "updated").run},
		{"rotate", "rotate a subscriber's signing secret (the new one is shown once)", rotate.run},
		{"rm", "delete a subscriber", del.run},
		{"delete", "delete a subscriber (the same as rm)", dels.run},
		{"deliveries", "list a subscriber's deliveries", deliveries.run},
	}
}

// moreHint tells how to fetch the next page: verb run again with again
// (nextPageArgs) and the next cursor.
func moreHint(w io.Writer, verb string, again []string, next string) {
	if next != "" {
		cmd := append(append([]string{"ratelane", verb}, again...), "--after", shellQuote(next))
		fmt.Fprintf(w, "more: %s\n", strings.Join(cmd, " "))
	}
}

// deliveryView is a delivery as the API lists it.
type deliveryView struct {
	ID            string `json:"id"`
	SubscriberID  string `json:"subscriber_id"`
	EventID       string `json:"event_id"`
	Topic         string `json:"topic"`
	Version       int64  `json:"version"`
	State         string `json:"state"`
	Reason        string `json:"reason"`
	Attempts      int    `json:"attempts"`
	LastStatus    int    `json:"last_status"`
	NextAttemptAt string `json:"next_attempt_at"`
	CreatedAt     string `json:"created_at"`
}

// pageDeliveries prints a page of deliveries as a list verb's page, the
// next-page hint repeating what verb was run with.
func pageDeliveries(verb string) func(w, hint io.Writer, again []string, body []byte) error {
	return deliveriesTable(verb).page
}

// showDeliveries prints the deliveries in an answer (events publish's),
// the next-page hint, if any, on the same writer.
func showDeliveries(verb string) func(io.Writer, []string, []byte) error {
	return deliveriesTable(verb).show
}

// deliveriesTable is the table of a page of deliveries.
func deliveriesTable(verb string) listTable[deliveryView] {
	return listTable[deliveryView]{keys: []string{"deliveries"}, noun: "delivery", more: verb,
		header: []string{"ID", "SUBSCRIBER", "EVENT", "VERSION", "STATE", "REASON", "ATTEMPTS", "LAST STATUS", "NEXT ATTEMPT", "CREATED"},
		row: func(d deliveryView) []string {
			status := "-"
			if d.LastStatus != 0 {
				status = strconv.Itoa(d.LastStatus)
			}
			return []string{d.ID, d.SubscriberID, d.EventID, strconv.FormatInt(d.Version, 10), d.State, cell(d.Reason),
				strconv.Itoa(d.Attempts), status, when(d.NextAttemptAt), when(d.CreatedAt)}
		}}
}

func eventPublish() apiCall {
	var topic, id, region, tenant, lane, payload string
	var version int64
	return apiCall{name: "events publish", usage: "--topic T --id ID --region R --payload JSON|@FILE [flags]",
		summary: "Publish an event: one delivery per enabled subscriber of its topic in the region. The same id and version again creates nothing.",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&topic, "topic", "", "the event's topic, e.g. shipment.updated (required)")
			fs.StringVar(&id, "id", "", "the event's id (required)")
			fs.Int64Var(&version, "version", 0, "the event's version; each id and version is delivered once")
			fs.StringVar(&region, "region", "", "the region whose subscribers receive it (required)")
			fs.StringVar(&tenant, "tenant", "", "admin keys only: the publishing tenant")
			fs.StringVar(&lane, "lane", "", "the deliveries' lane: interactive or batch (server default batch)")
			fs.StringVar(&payload, "payload", "", "the JSON body sent to subscribers, or @FILE to read it (required)")
		},
		request: func([]string) (string, string, url.Values, any, error) {
			switch {
			case topic == "":
				return "", "", nil, nil, usageError{"--topic is required"}
			case id == "":
				return "", "", nil, nil, usageError{"--id is required"}
			case payload == "":
				return "", "", nil, nil, usageError{"--payload is required (JSON, or @FILE)"}
			}
			raw := []byte(payload)
			if name, ok := strings.CutPrefix(payload, "@"); ok {
				b, err := os.ReadFile(name)
				if err != nil {
					return "", "", nil, nil, usageError{"--payload: " + err.Error()}
				}
				raw = b
			}
			if !json.Valid(raw) {
				return "", "", nil, nil, usageError{"--payload is not valid JSON"}
			}
			b := map[string]any{"topic": topic, "id": id, "version": version, "region": region, "payload": json.RawMessage(raw)}
			if tenant != "" {
				b["tenant"] = tenant
			}
			if lane != "" {
				b["lane"] = lane
			}
			return http.MethodPost, "/v1/events", nil, b, nil
		},
		show: func(w io.Writer, _ []string, body []byte) error {
			var r struct {
				Deliveries []json.RawMessage `json:"deliveries"`
			}
			_ = json.Unmarshal(body, &r)
			fmt.Fprintf(w, "published %s version %d: %d deliveries\n", id, version, len(r.Deliveries))
			if len(r.Deliveries) > 0 {
				return showDeliveries("events deliveries "+id)(w, nil, body)
			}
			return nil
		}}
}

func eventDeliveries() apiCall {
	var region, tenant string
	var pg pager
	return apiCall{name: "events deliveries", usage: "EVENT_ID [flags]", summary: "List the deliveries of every version of an event, in creation order.",
		args: []string{"EVENT_ID"},
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&region, "region", "", "the event's region (required unless the key has one)")
			fs.StringVar(&tenant, "tenant", "", "admin keys only: the event's tenant (default: the key's own)")
			pg.flags(fs)
		},
		request: func(pos []string) (string, string, url.Values, any, error) {
			return pg.get("/v1/events/"+esc(pos[0])+"/deliveries", map[string]string{"region": region, "tenant": tenant})
		},
		page: pageDeliveries("events deliveries")}
}

func deliveriesList() apiCall {
	var region, subscriber, event, tenant string
	var pg pager
	return apiCall{name: "deliveries ls", usage: "--subscriber ID | --event ID [flags]", summary: "List the deliveries of a subscriber or of an event.",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&subscriber, "subscriber", "", "a subscriber's id (admin)")
			fs.StringVar(&event, "event", "", "an event's id")
			fs.StringVar(&region, "region", "", "the region (required unless the key has one)")
			fs.StringVar(&tenant, "tenant", "", "admin keys only, with --event: the event's tenant")
			pg.flags(fs)
		},
		request: func([]string) (string, string, url.Values, any, error) {
			if err := pg.check(); err != nil {
				return "", "", nil, nil, err
			}
			q := pg.query(map[string]string{"region": region})
			switch {
			case (subscriber == "") == (event == ""):
				return "", "", nil, nil, usageError{"deliveries ls needs exactly one of --subscriber and --event"}
			case subscriber != "":
				return http.MethodGet, "/v1/subscribers/" + esc(subscriber) + "/deliveries", q, nil, nil
			}
			if tenant != "" {
				q.Set("tenant", tenant)
			}
			return http.MethodGet, "/v1/events/" + esc(event) + "/deliveries", q, nil, nil
		},
		page: pageDeliveries("deliveries ls")}
}

// deliveryRegion documents the --region flag of the verbs on one delivery.
const deliveryRegion = "the delivery's region (default every region the key may use)"

// deliveryGet shows a delivery through its job: a delivery's id is the id
// of the job that sends it.
func deliveryGet() apiCall {
	return regionCall("deliveries get", "ID", "Show one delivery: its job's state, attempts and schedule (a delivery's id is its job's id).",
		deliveryRegion, http.MethodGet, jobPath(""), showJob)
}

func deliveryRedeliver() apiCall {
	return regionCall("deliveries redeliver", "ID",
		"Send a delivery again: a terminal one is redriven, a published one copied with the same webhook-id (409 while in progress).",
		deliveryRegion, http.MethodPost, func(id string) string { return "/v1/deliveries/" + esc(id) + "/redeliver" },
		func(w io.Writer, pos []string, body []byte) error {
			var d deliveryView
			if err := json.Unmarshal(body, &d); err != nil {
				return fmt.Errorf("unexpected response: %w", err)
			}
			_, err := fmt.Fprintf(w, "redelivering %s as %s (state %s)\n", pos[0], d.ID, d.State)
			return err
		})
}

func deliveryResponse() apiCall {
	return regionCall("deliveries response", "ID",
		"Admin only: the bounded last failed answer of a delivery (status, diagnostic headers, first 4 KiB of the body).",
		deliveryRegion, http.MethodGet, func(id string) string { return "/v1/deliveries/" + esc(id) + "/response" },
		func(w io.Writer, _ []string, body []byte) error { return showFields(w, body) })
}
