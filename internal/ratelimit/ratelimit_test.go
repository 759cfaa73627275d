package ratelimit

import (
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// now is the receive time used by the Parse tests.
var now = time.Date(2024, time.May, 1, 12, 0, 0, 0, time.UTC)

// hdr builds a canonical http.Header from name, value pairs.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// q builds a Quota; src is the reset header name ("" when Reset unknown).
func q(limit, remaining int64, reset time.Duration, src string) Quota {
	return Quota{Limit: limit, Remaining: remaining, Reset: reset, resetSrc: src}
}

// TestParse reads whole header sets: every field of the Info is compared,
// so a quota a header set does not name must stay unknown.
func TestParse(t *testing.T) {
	t.Parallel()
	unknown := Info{Requests: unknownQuota, Tokens: unknownQuota, InputTokens: unknownQuota, OutputTokens: unknownQuota}
	with := func(f func(*Info)) Info {
		i := unknown
		f(&i)
		return i
	}
	tests := []struct {
		name string
		h    http.Header
		want Info
		// delay says whether Delay has an answer for the headers.
		delay bool
	}{
		{name: "nil", h: nil, want: unknown},
		{name: "empty", h: http.Header{}, want: unknown},
		{
			// The example response headers of OpenAI's "Rate limits" guide;
			// no quota is exhausted, so no delay.
			name: "openai",
			h: hdr(
				"x-ratelimit-limit-requests", "60",
				"x-ratelimit-limit-tokens", "150000",
				"x-ratelimit-remaining-requests", "59",
				"x-ratelimit-remaining-tokens", "149984",
				"x-ratelimit-reset-requests", "1s",
				"x-ratelimit-reset-tokens", "6m0s",
			),
			want: with(func(i *Info) {
				i.Requests = q(60, 59, time.Second, "x-ratelimit-reset-requests")
				i.Tokens = q(150000, 149984, 6*time.Minute, "x-ratelimit-reset-tokens")
			}),
		},
		{
			// A 429 from OpenAI / Azure OpenAI: retry-after-ms and
			// retry-after together, tokens exhausted.
			name: "openai 429",
			h: hdr(
				"retry-after-ms", "2500",
				"retry-after", "3",
				"x-ratelimit-remaining-tokens", "0",
				"x-ratelimit-reset-tokens", "2.5s",
			),
			want: with(func(i *Info) {
				i.RetryAfter, i.HasRetryAfter, i.Source = 2500*time.Millisecond, true, "retry-after-ms"
				i.Tokens = q(-1, 0, 2500*time.Millisecond, "x-ratelimit-reset-tokens")
			}),
			delay: true,
		},
		{
			// The header set of Anthropic's "Rate limits" page ("Response
			// headers"), values illustrative; resets are RFC 3339
			// timestamps, as documented there.
			name: "anthropic",
			h: hdr(
				"retry-after", "30",
				"anthropic-ratelimit-requests-limit", "50",
				"anthropic-ratelimit-requests-remaining", "0",
				"anthropic-ratelimit-requests-reset", "2024-05-01T12:00:30Z",
				"anthropic-ratelimit-tokens-limit", "40000",
				"anthropic-ratelimit-tokens-remaining", "12000",
				"anthropic-ratelimit-tokens-reset", "2024-05-01T12:00:05.5Z",
				"anthropic-ratelimit-input-tokens-limit", "30000",
				"anthropic-ratelimit-input-tokens-remaining", "12000",
				"anthropic-ratelimit-input-tokens-reset", "2024-05-01T14:00:05+02:00",
				"anthropic-ratelimit-output-tokens-limit", "10000",
				"anthropic-ratelimit-output-tokens-remaining", "9000",
				"anthropic-ratelimit-output-tokens-reset", "2024-05-01T11:59:00Z", // past
			),
			want: Info{
				RetryAfter: 30 * time.Second, HasRetryAfter: true, Source: "retry-after",
				Requests:     q(50, 0, 30*time.Second, "anthropic-ratelimit-requests-reset"),
				Tokens:       q(40000, 12000, 5500*time.Millisecond, "anthropic-ratelimit-tokens-reset"),
				InputTokens:  q(30000, 12000, 5*time.Second, "anthropic-ratelimit-input-tokens-reset"),
				OutputTokens: q(10000, 9000, 0, "anthropic-ratelimit-output-tokens-reset"),
			},
			delay: true,
		},
		{
			// Malformed values of every header Parse reads are unknown,
			// not zero.
			name: "garbage",
			h: hdr(
				"retry-after-ms", "-5",
				"retry-after", "tomorrow",
				"x-ratelimit-limit-requests", "-1",
				"x-ratelimit-remaining-requests", "1.5",
				"x-ratelimit-reset-requests", "-1s",
				"x-ratelimit-limit-tokens", "99999999999999999999",
				"x-ratelimit-remaining-tokens", "+3",
				"x-ratelimit-reset-tokens", "soon",
				"anthropic-ratelimit-input-tokens-reset", "2024-05-01 12:00:00",
				"anthropic-ratelimit-output-tokens-reset", "1714564800",
				"ratelimit-policy", `"default";q=100;w=60,`,
				"ratelimit", `"default";r=`,
			),
			want: unknown,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Parse(tt.h, now)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse =\n%+v\nwant\n%+v", got, tt.want)
			}
			if _, _, ok := got.Delay(); ok != tt.delay {
				t.Errorf("Delay() ok = %v; want %v", ok, tt.delay)
			}
		})
	}
	if _, _, ok := (Info{}).Delay(); ok {
		t.Errorf("zero Info: Delay() ok")
	}
}

func TestParseAnthropicTokensFromInputOutput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    http.Header
		want Quota
	}{
		{
			"smaller fraction remaining wins",
			hdr(
				"anthropic-ratelimit-input-tokens-limit", "400000",
				"anthropic-ratelimit-input-tokens-remaining", "300000", // 75%
				"anthropic-ratelimit-output-tokens-limit", "80000",
				"anthropic-ratelimit-output-tokens-remaining", "20000", // 25%
				"anthropic-ratelimit-output-tokens-reset", "2024-05-01T12:00:10Z",
			),
			q(80000, 20000, 10*time.Second, "anthropic-ratelimit-output-tokens-reset"),
		},
		{
			"exhausted wins",
			hdr(
				"anthropic-ratelimit-input-tokens-limit", "400000",
				"anthropic-ratelimit-input-tokens-remaining", "0",
				"anthropic-ratelimit-input-tokens-reset", "2024-05-01T12:00:20Z",
				"anthropic-ratelimit-output-tokens-limit", "80000",
				"anthropic-ratelimit-output-tokens-remaining", "1",
			),
			q(400000, 0, 20*time.Second, "anthropic-ratelimit-input-tokens-reset"),
		},
		{
			"both exhausted: later reset",
			hdr(
				"anthropic-ratelimit-input-tokens-remaining", "0",
				"anthropic-ratelimit-input-tokens-reset", "2024-05-01T12:00:20Z",
				"anthropic-ratelimit-output-tokens-remaining", "0",
				"anthropic-ratelimit-output-tokens-reset", "2024-05-01T12:00:40Z",
			),
			q(-1, 0, 40*time.Second, "anthropic-ratelimit-output-tokens-reset"),
		},
		{
			"only one known",
			hdr("anthropic-ratelimit-output-tokens-remaining", "7"),
			q(-1, 7, 0, ""),
		},
		{
			"combined tokens header wins over input/output",
			hdr(
				"anthropic-ratelimit-tokens-remaining", "5",
				"anthropic-ratelimit-output-tokens-remaining", "0",
			),
			q(-1, 5, 0, ""),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Parse(tt.h, now).Tokens; got != tt.want {
				t.Errorf("Tokens = %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestParseRetryAfterMsFallsBack(t *testing.T) {
	t.Parallel()
	got := Parse(hdr("retry-after-ms", "soon", "retry-after", "2"), now)
	if !got.HasRetryAfter || got.RetryAfter != 2*time.Second || got.Source != "retry-after" {
		t.Errorf("got %v, %v, %q; want 2s from retry-after", got.RetryAfter, got.HasRetryAfter, got.Source)
	}
}

func TestParseHeaderNameCase(t *testing.T) {
	t.Parallel()
	want := Parse(hdr("Retry-After-Ms", "10", "X-Ratelimit-Remaining-Requests", "3"), now)
	for name, h := range map[string]http.Header{
		"lower via Set": hdr("retry-after-ms", "10", "x-ratelimit-remaining-requests", "3"),
		"upper via Set": hdr("RETRY-AFTER-MS", "10", "X-RATELIMIT-REMAINING-REQUESTS", "3"),
		// A hand-built map skips canonicalisation; Parse still finds it.
		"lower map literal": {"retry-after-ms": {"10"}, "x-ratelimit-remaining-requests": {"3"}},
		"mixed map literal": {"RETRY-after-MS": {"10"}, "X-Ratelimit-Remaining-Requests": {"3"}},
		// Same name twice in different case: sorted key order decides.
		"duplicate keys": {"Retry-After-Ms": {"10"}, "retry-after-ms": {"99"}, "x-ratelimit-remaining-requests": {"3"}},
	} {
		if got := Parse(h, now); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Parse = %+v; want %+v", name, got, want)
		}
	}
	if want.RetryAfter != 10*time.Millisecond || want.Requests.Remaining != 3 {
		t.Errorf("canonical parse wrong: %+v", want)
	}
}

func TestDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		h      http.Header
		want   time.Duration
		source string
		ok     bool
	}{
		{"nothing", hdr(), 0, "", false},
		{"retry-after-ms beats retry-after", hdr("retry-after", "9", "retry-after-ms", "1200"), 1200 * time.Millisecond, "retry-after-ms", true},
		{"retry-after beats quota reset", hdr("retry-after", "9", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20s"), 9 * time.Second, "retry-after", true},
		{"retry-after zero still wins", hdr("retry-after", "0", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20s"), 0, "retry-after", true},
		{"retry-after date in the past", hdr("retry-after", "Wed, 01 May 2024 11:00:00 GMT"), 0, "retry-after", true},
		{"retry-after date", hdr("retry-after", "Wed, 01 May 2024 12:01:00 GMT"), time.Minute, "retry-after", true},
		{"exhausted requests", hdr("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20s"), 20 * time.Second, "x-ratelimit-reset-requests", true},
		{"not exhausted: no delay", hdr("x-ratelimit-remaining-requests", "1", "x-ratelimit-reset-requests", "20s"), 0, "", false},
		{"exhausted without reset: no delay", hdr("x-ratelimit-remaining-tokens", "0"), 0, "", false},
		{"exhausted, reset in the past: no delay", hdr("anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", "2024-05-01T11:00:00Z"), 0, "", false},
		{
			"longest exhausted reset wins",
			hdr(
				"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "20s",
				"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1m",
			),
			time.Minute, "x-ratelimit-reset-tokens", true,
		},
		{
			"anthropic output tokens exhausted",
			hdr(
				"anthropic-ratelimit-tokens-remaining", "100",
				"anthropic-ratelimit-output-tokens-remaining", "0",
				"anthropic-ratelimit-output-tokens-reset", "2024-05-01T12:00:42Z",
			),
			42 * time.Second, "anthropic-ratelimit-output-tokens-reset", true,
		},
		{"ietf policy exhausted", hdr("ratelimit-policy", `"default";q=100;w=60`, "ratelimit", `"default";r=0;t=30`), 30 * time.Second, "ratelimit", true},
		{"ietf older draft exhausted", hdr("ratelimit-remaining", "0", "ratelimit-reset", "12"), 12 * time.Second, "ratelimit-reset", true},
		{"more than MaxDelay is reported", hdr("retry-after", "864000"), 240 * time.Hour, "retry-after", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, src, ok := Parse(tt.h, now).Delay()
			if d != tt.want || src != tt.source || ok != tt.ok {
				t.Errorf("Delay() = %v, %q, %v; want %v, %q, %v", d, src, ok, tt.want, tt.source, tt.ok)
			}
		})
	}
}

func TestMaxDelay(t *testing.T) {
	t.Parallel()
	d, _, _ := Parse(hdr("retry-after", "864000"), now).Delay()
	if d <= MaxDelay {
		t.Errorf("10 days should exceed MaxDelay (%v)", MaxDelay)
	}
	if MaxDelay != 168*time.Hour {
		t.Errorf("MaxDelay = %v; want 168h", MaxDelay)
	}
}

// TestParseRetryAfterAgainstDate checks that an HTTP-date Retry-After is
// measured from the response's Date header, so clock skew between the
// server and ratelane changes nothing, and that nothing is rounded.
func TestParseRetryAfterAgainstDate(t *testing.T) {
	t.Parallel()
	const imf = http.TimeFormat
	serverNow := now.Add(90 * time.Second) // the server's clock runs 90 s ahead
	tests := []struct {
		name string
		h    http.Header
		want time.Duration
		src  string
	}{
		{"server ahead", hdr("Date", serverNow.Format(imf), "Retry-After", serverNow.Add(2*time.Second).Format(imf)), 2 * time.Second, "retry-after"},
		{"server behind", hdr("Date", now.Add(-time.Hour).Format(imf), "Retry-After", now.Add(-time.Hour+time.Second).Format(imf)), time.Second, "retry-after"},
		{"no skew", hdr("Date", now.Format(imf), "Retry-After", now.Add(3*time.Second).Format(imf)), 3 * time.Second, "retry-after"},
		// Without Date the local clock is all there is: 92 s here.
		{"no Date", hdr("Retry-After", serverNow.Add(2*time.Second).Format(imf)), 92 * time.Second, "retry-after"},
		{"invalid Date", hdr("Date", "yesterday", "Retry-After", serverNow.Add(2*time.Second).Format(imf)), 92 * time.Second, "retry-after"},
		{"Date in RFC 850 form", hdr("Date", serverNow.Format(time.RFC850), "Retry-After", serverNow.Add(2*time.Second).Format(imf)), 2 * time.Second, "retry-after"},
		{"retry date before Date", hdr("Date", serverNow.Format(imf), "Retry-After", serverNow.Add(-time.Second).Format(imf)), 0, "retry-after"},
		// delay-seconds do not depend on any clock.
		{"seconds with skewed Date", hdr("Date", serverNow.Format(imf), "Retry-After", "1.25"), 1250 * time.Millisecond, "retry-after"},
		// retry-after-ms is the more precise value and wins.
		{"ms wins over date", hdr("Date", serverNow.Format(imf), "Retry-After", serverNow.Add(2*time.Second).Format(imf), "retry-after-ms", "1700"), 1700 * time.Millisecond, "retry-after-ms"},
		{"hand-built lower-case map", http.Header{"date": {serverNow.Format(imf)}, "retry-after": {serverNow.Add(4 * time.Second).Format(imf)}}, 4 * time.Second, "retry-after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Parse(tt.h, now)
			if !got.HasRetryAfter || got.RetryAfter != tt.want || got.Source != tt.src {
				t.Errorf("Parse = %v, %v, %q; want %v from %s", got.RetryAfter, got.HasRetryAfter, got.Source, tt.want, tt.src)
			}
		})
	}
}

// TestAbsoluteResetsAgainstDate checks that every absolute reset (an
// Anthropic RFC 3339 timestamp, a Unix-time or HTTP-date RateLimit-Reset)
// is measured from the response's Date, the server's clock, like an
// HTTP-date Retry-After, and from now only without a Date.
func TestAbsoluteResetsAgainstDate(t *testing.T) {
	t.Parallel()
	const imf = http.TimeFormat
	serverNow := now.Add(90 * time.Second) // the server's clock runs 90 s ahead
	date := serverNow.Format(imf)
	inFive := serverNow.Add(5 * time.Second)
	tests := []struct {
		name  string
		h     http.Header
		get   func(Info) time.Duration
		want  time.Duration
		delay string
	}{
		{"anthropic requests reset", hdr("Date", date, "anthropic-ratelimit-requests-limit", "50",
			"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", inFive.Format(time.RFC3339)),
			func(i Info) time.Duration { return i.Requests.Reset }, 5 * time.Second, "anthropic-ratelimit-requests-reset"},
		{"anthropic input tokens reset", hdr("Date", date, "anthropic-ratelimit-input-tokens-limit", "1000",
			"anthropic-ratelimit-input-tokens-remaining", "0", "anthropic-ratelimit-input-tokens-reset", inFive.Format(time.RFC3339)),
			func(i Info) time.Duration { return i.InputTokens.Reset }, 5 * time.Second, "anthropic-ratelimit-input-tokens-reset"},
		{"unix-time RateLimit-Reset", hdr("Date", date, "RateLimit-Limit", "100", "RateLimit-Remaining", "0",
			"RateLimit-Reset", strconv.FormatInt(inFive.Unix(), 10)),
			func(i Info) time.Duration { return i.Policies[0].Reset }, 5 * time.Second, "ratelimit-reset"},
		{"http-date RateLimit-Reset", hdr("Date", date, "RateLimit-Limit", "100", "RateLimit-Remaining", "0",
			"RateLimit-Reset", inFive.Format(imf)),
			func(i Info) time.Duration { return i.Policies[0].Reset }, 5 * time.Second, "ratelimit-reset"},
		{"delta RateLimit-Reset ignores the skew", hdr("Date", date, "RateLimit-Limit", "100", "RateLimit-Remaining", "0",
			"RateLimit-Reset", "5"),
			func(i Info) time.Duration { return i.Policies[0].Reset }, 5 * time.Second, "ratelimit-reset"},
		// Without Date the local clock is all there is: 95 s here.
		{"anthropic reset, no Date", hdr("anthropic-ratelimit-requests-limit", "50",
			"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", inFive.Format(time.RFC3339)),
			func(i Info) time.Duration { return i.Requests.Reset }, 95 * time.Second, "anthropic-ratelimit-requests-reset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := Parse(tt.h, now)
			if strings.HasPrefix(tt.delay, "ratelimit") && len(info.Policies) != 1 {
				t.Fatalf("policies = %+v, want one", info.Policies)
			}
			if got := tt.get(info); got != tt.want {
				t.Errorf("reset = %v, want %v", got, tt.want)
			}
			if d, src, ok := info.Delay(); !ok || d != tt.want || src != tt.delay {
				t.Errorf("Delay = %v, %q, %v; want %v from %s", d, src, ok, tt.want, tt.delay)
			}
		})
	}
}

func TestServerNow(t *testing.T) {
	t.Parallel()
	date := time.Date(2026, 12, 1, 10, 0, 7, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Time
	}{
		{hdr("Date", date.Format(http.TimeFormat)), date},
		{hdr("Date", " "+date.Format(http.TimeFormat)+"\t"), date},
		{hdr("Date", "Tue Dec  1 10:00:07 2026"), date},
		{hdr("Date", "2026-12-01T10:00:07Z"), now}, // RFC 3339 is not an HTTP-date
		{hdr(), now},
	} {
		if got := ServerNow(tc.h, now); !got.Equal(tc.want) {
			t.Errorf("ServerNow(%v) = %v, want %v", tc.h, got, tc.want)
		}
	}
}
