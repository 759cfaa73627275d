package upstream

import (
	"encoding/base64"
	"fmt"
	"math"
	"net"
	"strings"
	"time"
)

// Algorithm names the limiter a route uses.
type Algorithm string

const (
	// AlgorithmAuto, the zero value, picks AlgorithmSlidingWindow when
	// RouteConfig.Window is set, AlgorithmTokenBucket when RouteConfig.Rate
	// is set, and AlgorithmNone otherwise.
	AlgorithmAuto Algorithm = ""
	// AlgorithmNone admits every request.
	AlgorithmNone Algorithm = "none"
	// AlgorithmTokenBucket refills Rate tokens per second up to Burst; a
	// request takes one token. Over any window t it admits at most
	// Rate*t + Burst requests.
	AlgorithmTokenBucket Algorithm = "token-bucket"
	// AlgorithmSlidingWindow admits at most Limit requests in any Window
	// (an exact sliding log, memory bounded by Limit).
	AlgorithmSlidingWindow Algorithm = "sliding-window"
	// AlgorithmFixedWindow admits at most Limit requests in each aligned
	// window [k*Window, (k+1)*Window) of the Unix epoch, then answers
	// over-limit until the next window starts (a quota that "resets at"
	// a clock time, as GitHub's hourly one does). Up to 2*Limit may
	// arrive within a moment across a window boundary.
	AlgorithmFixedWindow Algorithm = "fixed-window"
	// AlgorithmSlidingCounter is the two-window sliding counter of many
	// edge proxies: the previous aligned window's count weighted by its
	// overlap with the window ending now, plus the current count, must
	// stay below Limit. It approximates the sliding window, admitting a
	// little more or less depending on how the previous window's requests
	// were spread.
	AlgorithmSlidingCounter Algorithm = "sliding-counter"
)

// OverLimit says how a route answers a request over its limit.
type OverLimit string

const (
	// OverLimit429Seconds, the default, answers 429 with Retry-After in
	// whole seconds, rounded up (never 0).
	OverLimit429Seconds OverLimit = "429-seconds"
	// OverLimit429Date answers 429 with Retry-After as an HTTP-date
	// (RFC 9110 IMF-fixdate), rounded up to the next whole second.
	OverLimit429Date OverLimit = "429-date"
	// OverLimit429Millis answers 429 with both retry-after-ms (milliseconds,
	// rounded up) and Retry-After in seconds, as Azure OpenAI does.
	OverLimit429Millis OverLimit = "429-ms"
	// OverLimit429None answers 429 without any Retry-After, so the client
	// must fall back to rate-limit headers or its own backoff.
	OverLimit429None OverLimit = "429-none"
	// OverLimit503 answers "overloaded" with Retry-After in seconds: 503 on
	// webhook and OpenAI routes, 529 overloaded_error on Anthropic routes.
	OverLimit503 OverLimit = "503"
	// OverLimit503Date answers "overloaded" (503, or 529 on Anthropic
	// routes) with Retry-After as an HTTP-date on the server's clock (see
	// RouteConfig.DateSkew), rounded up to the next whole second.
	OverLimit503Date OverLimit = "503-date"
	// OverLimit503None answers "overloaded" without any Retry-After: a
	// client cannot tell it from a fault and must treat it as transient.
	OverLimit503None OverLimit = "503-none"
)

// LimitChange is a silent change of a route's limit at a scheduled time:
// the upstream starts counting differently and says nothing (no header
// changes until the new limit shows in remaining-quota headers). After is
// measured from the server's schedule epoch ([Server.StartSchedule], by
// default the moment the route was created). Rate (token bucket) or Limit
// (window algorithms) is the new value; Burst, when not 0, the bucket's
// new capacity. Limiter state carries over as with [Server.UpdateRoute].
type LimitChange struct {
	After time.Duration `json:"after"`
	Rate  float64       `json:"rate,omitzero"`
	Burst int           `json:"burst,omitzero"`
	Limit int           `json:"limit,omitzero"`
}

// HeaderStyle says which rate-limit headers a route sends on every answer
// that consulted the limiter (2xx, 429, 503, 401, 400, 5xx). Reset values
// are the time until the limiter is back to its full quota; Retry-After is
// the time until the next request would be admitted.
type HeaderStyle string

const (
	// HeaderStyleNative, the zero value, uses each endpoint's own style:
	// none for webhooks, x-ratelimit for OpenAI, anthropic for Anthropic.
	HeaderStyleNative HeaderStyle = ""
	// HeaderStyleNone sends no rate-limit headers.
	HeaderStyleNone HeaderStyle = "none"
	// HeaderStyleXRateLimit sends OpenAI's x-ratelimit-limit-requests,
	// x-ratelimit-remaining-requests and x-ratelimit-reset-requests (a
	// duration such as "1s", "6m0s" or "12ms").
	HeaderStyleXRateLimit HeaderStyle = "x-ratelimit"
	// HeaderStyleRateLimit sends the IETF draft
	// (draft-ietf-httpapi-ratelimit-headers-10/-11) structured fields
	// RateLimit-Policy: "default";q=<quota>;w=<window s> and
	// RateLimit: "default";r=<remaining>;t=<reset s>.
	HeaderStyleRateLimit HeaderStyle = "ratelimit"
	// HeaderStyleRateLimitLegacy sends the older, still common, separate
	// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset (delta
	// seconds) fields of draft-06 and earlier.
	HeaderStyleRateLimitLegacy HeaderStyle = "ratelimit-legacy"
	// HeaderStyleAnthropic sends anthropic-ratelimit-requests-limit,
	// -remaining and -reset (RFC 3339 time of full replenishment).
	HeaderStyleAnthropic HeaderStyle = "anthropic"
)

// Latency delays answers to emulate server processing time: Fixed plus a
// uniform random duration in [0, Jitter). The zero value answers at once.
type Latency struct {
	Fixed  time.Duration `json:"fixed,omitzero"`
	Jitter time.Duration `json:"jitter,omitzero"`
}

// RouteConfig describes one route name: its limiter, how it answers over
// the limit, which headers it sends, and which faults it injects. The zero
// value is an unlimited, fault-free route.
type RouteConfig struct {
	// Algorithm selects the limiter; see AlgorithmAuto for the default.
	Algorithm Algorithm `json:"algorithm,omitempty"`
	// Rate is the token-bucket refill rate in requests per second.
	Rate float64 `json:"rate,omitzero"`
	// Burst is the token-bucket capacity; 0 means max(1, ceil(Rate)), one
	// second's worth. The bucket starts full.
	Burst int `json:"burst,omitzero"`
	// Window and Limit configure the sliding window: at most Limit
	// requests in any Window.
	Window time.Duration `json:"window,omitzero"`
	Limit  int           `json:"limit,omitzero"`

	// OverLimit is the over-limit answer; default OverLimit429Seconds.
	OverLimit OverLimit `json:"over_limit,omitempty"`
	// Headers is the rate-limit header style; default HeaderStyleNative.
	Headers HeaderStyle `json:"headers,omitempty"`

	// TransientRate is the probability in [0, 1] that an admitted request
	// fails with one of TransientStatuses (chosen uniformly).
	TransientRate float64 `json:"transient_rate,omitzero"`
	// TransientStatuses are the statuses of injected faults; default 500,
	// 502 and 504. A 503 here carries no Retry-After, as a failing
	// backend's does. A request answered with a fault still counts
	// against the limit: it reached the upstream.
	TransientStatuses []int `json:"transient_statuses,omitempty"`
	// DateSkew is how far the server's clock is from the simulator's:
	// every answer's Date header, and an HTTP-date Retry-After, are on
	// the skewed clock (Date truncated to the second, as servers send
	// it). A client that reads an HTTP-date against its own clock is off
	// by DateSkew.
	DateSkew time.Duration `json:"date_skew,omitzero"`
	// Changes are silent limit changes at scheduled times, in order of
	// After (see LimitChange).
	Changes []LimitChange `json:"changes,omitempty"`
	// Latency delays every answer except over-limit and scripted ones.
	Latency Latency `json:"latency,omitzero"`
	// Secrets are Standard Webhooks secrets ("whsec_" + base64 key; the
	// prefix is optional). When set, a webhook request needs a valid
	// webhook-signature for at least one of them, else it gets 401. Several
	// secrets emulate a rotation in progress.
	Secrets []string `json:"-"`
	// StatusOverride, when not 0, answers every request that reaches step 2
	// with this status (e.g. 410 Gone, 400); a 2xx override counts as
	// accepted.
	StatusOverride int `json:"status_override,omitzero"`
	// Quota, when not 0, is the number of LLM requests the route accepts in
	// total; later ones get OpenAI's 429 insufficient_quota (no
	// Retry-After) or Anthropic's 400 "credit balance is too low", which a
	// client must not treat as congestion. Webhook routes ignore it.
	Quota int64 `json:"quota,omitzero"`
	// MaxConcurrent, when not 0, is how many requests the route processes
	// at once (from the limiter's decision until the answer is written, so
	// its Latency holds a slot): one more is answered over-limit as
	// OverLimit says, with a retry delay of one Latency.Fixed, whatever
	// its rate limit would have said. Some APIs count concurrent requests
	// rather than (or besides) requests per window; a sender pacing only
	// by rate meets it whenever latencies overlap.
	MaxConcurrent int `json:"max_concurrent,omitzero"`
}

// Config configures a [Server]. The zero value is usable: a server on
// 127.0.0.1 with unlimited "openai" and "anthropic" routes.
type Config struct {
	// Addr is the listen address; default "127.0.0.1:0" (a free port).
	Addr string
	// Routes maps route names to their configuration.
	Routes map[string]RouteConfig
	// OpenAIRoute is the route used by /v1/chat/completions; default
	// "openai". It is created unlimited when Routes lacks it.
	OpenAIRoute string
	// AnthropicRoute is the route used by /v1/messages; default
	// "anthropic". It is created unlimited when Routes lacks it.
	AnthropicRoute string
	// Responder supplies the text of successful LLM answers; default
	// DefaultResponder.
	Responder Responder
	// Seed seeds the generator for transient failures and jitter. Every
	// seed, 0 included, gives a reproducible sequence.
	Seed uint64
	// SignatureTolerance is how far webhook-timestamp may be from now;
	// default 5 minutes, as in the Standard Webhooks reference libraries.
	SignatureTolerance time.Duration
	// TimelineSeconds is how many recent seconds the per-second timeline
	// keeps; default 600.
	TimelineSeconds int
	// MaxTrackedIDs caps the webhook-ids remembered per route for duplicate
	// detection; default 1<<20. Past the cap new ids are not remembered and
	// RouteReport.IDsTruncated is set.
	MaxTrackedIDs int
	// RecordArrivals makes every route remember the arrival time of each
	// accepted (2xx) request, at most MaxTrackedIDs per route, for
	// [Server.Arrivals]: a benchmark computes goodput and checks for
	// overruns from them. Off by default, since a long-running simulator
	// would keep them all.
	RecordArrivals bool
	// MaxBodyBytes caps request bodies; default 4 MiB. Larger ones get 413.
	MaxBodyBytes int64
	// Now is the clock; default time.Now. Tests of timing may inject one.
	Now func() time.Time
	// Listener, when set, is served instead of a listener on Addr: a test
	// passes an in-memory one (testkit.Pipes) so that the simulator, its
	// latencies and its windows run on a testing/synctest bubble's fake
	// clock, which a goroutine waiting on a loopback socket would stop.
	// URL and RouteURL then name its Addr; the test's client must dial it.
	Listener net.Listener
}

// WithDefaults returns a copy of c with every unset field given its default.
func (c Config) WithDefaults() Config {
	c.Addr = orDefault(c.Addr, "127.0.0.1:0")
	c.OpenAIRoute = orDefault(c.OpenAIRoute, "openai")
	c.AnthropicRoute = orDefault(c.AnthropicRoute, "anthropic")
	if c.Responder == nil {
		c.Responder = DefaultResponder
	}
	c.SignatureTolerance = orDefault(c.SignatureTolerance, 5*time.Minute)
	c.TimelineSeconds = orDefault(c.TimelineSeconds, 600)
	c.MaxTrackedIDs = orDefault(c.MaxTrackedIDs, 1<<20)
	c.MaxBodyBytes = orDefault(c.MaxBodyBytes, 4<<20)
	if c.Now == nil {
		c.Now = time.Now
	}
	routes := make(map[string]RouteConfig, len(c.Routes)+2)
	for name, rc := range c.Routes {
		routes[name] = rc.WithDefaults()
	}
	for _, name := range []string{c.OpenAIRoute, c.AnthropicRoute} {
		if _, ok := routes[name]; !ok {
			routes[name] = RouteConfig{}.WithDefaults()
		}
	}
	c.Routes = routes
	return c
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (c Config) validate() error {
	if c.TimelineSeconds < 1 || c.MaxTrackedIDs < 1 || c.MaxBodyBytes < 1 || c.SignatureTolerance < 0 {
		return fmt.Errorf("TimelineSeconds, MaxTrackedIDs, MaxBodyBytes must be positive and SignatureTolerance not negative")
	}
	for name, rc := range c.Routes {
		if err := validRouteName(name); err != nil {
			return err
		}
		if err := rc.validate(); err != nil {
			return fmt.Errorf("route %q: %w", name, err)
		}
	}
	return nil
}

func validRouteName(name string) error {
	if name == "" || len(name) > 200 || strings.ContainsAny(name, "/?#% \t\r\n") {
		return fmt.Errorf("route name %q: want 1..200 characters without / ? # %% or spaces", name)
	}
	return nil
}

// WithDefaults returns a copy of rc with the algorithm resolved and unset
// fields given their defaults.
func (rc RouteConfig) WithDefaults() RouteConfig {
	if rc.Algorithm == AlgorithmAuto {
		switch {
		case rc.Window != 0: // a negative Window or Rate fails validation
			rc.Algorithm = AlgorithmSlidingWindow
		case rc.Rate != 0:
			rc.Algorithm = AlgorithmTokenBucket
		default:
			rc.Algorithm = AlgorithmNone
		}
	}
	if rc.Algorithm == AlgorithmTokenBucket && rc.Burst == 0 {
		rc.Burst = max(1, int(math.Ceil(rc.Rate)))
	}
	rc.OverLimit = orDefault(rc.OverLimit, OverLimit429Seconds)
	return rc
}

func (rc RouteConfig) validate() error {
	if err := rc.validateLimiter(); err != nil {
		return err
	}
	if rc.MaxConcurrent < 0 || rc.MaxConcurrent > 1_000_000 {
		return fmt.Errorf("MaxConcurrent %d: want 0 (no cap) to 1000000", rc.MaxConcurrent)
	}
	switch rc.OverLimit {
	case OverLimit429Seconds, OverLimit429Date, OverLimit429Millis, OverLimit429None, OverLimit503, OverLimit503Date, OverLimit503None:
	default:
		return fmt.Errorf("OverLimit %q: want 429-seconds, 429-date, 429-ms, 429-none, 503, 503-date or 503-none", rc.OverLimit)
	}
	for _, st := range rc.TransientStatuses {
		if st < 500 || st > 599 {
			return fmt.Errorf("TransientStatuses %v: want 5xx statuses", rc.TransientStatuses)
		}
	}
	if err := rc.validateChanges(); err != nil {
		return err
	}
	switch rc.Headers {
	case HeaderStyleNative, HeaderStyleNone, HeaderStyleXRateLimit, HeaderStyleRateLimit,
		HeaderStyleRateLimitLegacy, HeaderStyleAnthropic:
	default:
		return fmt.Errorf("route config: Headers %q: want none, x-ratelimit, ratelimit, ratelimit-legacy, anthropic or empty", rc.Headers)
	}
	if !(rc.TransientRate >= 0 && rc.TransientRate <= 1) {
		return fmt.Errorf("TransientRate %v: want 0..1", rc.TransientRate)
	}
	if rc.Latency.Fixed < 0 || rc.Latency.Jitter < 0 {
		return fmt.Errorf("Latency %+v: want durations >= 0", rc.Latency)
	}
	if rc.StatusOverride != 0 && (rc.StatusOverride < 200 || rc.StatusOverride > 599) {
		return fmt.Errorf("StatusOverride %d: want 0 or 200..599", rc.StatusOverride)
	}
	if rc.Quota < 0 {
		return fmt.Errorf("route config: Quota %d: want >= 0", rc.Quota)
	}
	_, err := decodeSecrets(rc.Secrets)
	return err
}

func (rc RouteConfig) validateLimiter() error {
	switch rc.Algorithm {
	case AlgorithmNone:
	case AlgorithmTokenBucket:
		if !(rc.Rate > 0) || math.IsInf(rc.Rate, 0) || rc.Burst < 1 {
			return fmt.Errorf("token bucket Rate %v, Burst %d: want Rate > 0 (finite) and Burst >= 1", rc.Rate, rc.Burst)
		}
	case AlgorithmSlidingWindow, AlgorithmFixedWindow, AlgorithmSlidingCounter:
		if rc.Window <= 0 || rc.Limit < 1 || rc.Limit > 1_000_000 {
			return fmt.Errorf("%s Window %v, Limit %d: want Window > 0 and Limit 1..1000000", rc.Algorithm, rc.Window, rc.Limit)
		}
	default:
		return fmt.Errorf("Algorithm %q: want token-bucket, sliding-window, fixed-window, sliding-counter, none or empty", rc.Algorithm)
	}
	return nil
}

func (rc RouteConfig) validateChanges() error {
	var last time.Duration
	for i, c := range rc.Changes {
		switch {
		case c.After < last:
			return fmt.Errorf("limit change %d: After %v before the previous change's %v", i, c.After, last)
		case rc.Algorithm == AlgorithmTokenBucket && (!(c.Rate > 0) || math.IsInf(c.Rate, 0) || c.Burst < 0 || c.Limit != 0):
			return fmt.Errorf("limit change %d: a token bucket changes Rate (> 0) and optionally Burst, not Limit", i)
		case rc.Algorithm != AlgorithmTokenBucket && rc.Algorithm != AlgorithmNone && (c.Limit < 1 || c.Limit > 1_000_000 || c.Rate != 0 || c.Burst != 0):
			return fmt.Errorf("limit change %d: a window changes Limit (1..1000000), not Rate or Burst", i)
		case rc.Algorithm == AlgorithmNone:
			return fmt.Errorf("limit change %d: an unlimited route has no limit to change", i)
		}
		last = c.After
	}
	return nil
}

// apply returns rc with change c applied.
func (rc RouteConfig) apply(c LimitChange) RouteConfig {
	if rc.Algorithm == AlgorithmTokenBucket {
		rc.Rate = c.Rate
		if c.Burst > 0 {
			rc.Burst = c.Burst
		}
		return rc
	}
	rc.Limit = c.Limit
	return rc
}

// decodeSecrets turns Standard Webhooks secrets into HMAC keys.
func decodeSecrets(secrets []string) ([][]byte, error) {
	keys := make([][]byte, 0, len(secrets))
	for i, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(key) == 0 {
			return nil, fmt.Errorf("route config: Secrets[%d]: want \"whsec_\" followed by non-empty standard base64", i)
		}
		keys = append(keys, key)
	}
	return keys, nil
}
