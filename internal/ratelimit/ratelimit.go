// Package ratelimit parses the rate-limit signals that upstream APIs put in
// response headers: Retry-After (RFC 9110 §10.2.3), retry-after-ms
// (OpenAI, Azure OpenAI), OpenAI's x-ratelimit-*, Anthropic's
// anthropic-ratelimit-*, and the IETF RateLimit / RateLimit-Policy fields
// (draft-ietf-httpapi-ratelimit-headers, current and older forms).
//
// Everything here is pure: no clock, no I/O, no logging. Time is a
// parameter (now), so the same headers always give the same answer and
// tests need no sleeps. Parsers are tolerant: a malformed header is ignored
// (reported as unknown), never an error and never a panic, because one odd
// upstream must not break scheduling.
//
// Most callers want [Parse] followed by [Info.Delay]: the delay the server
// asked for, if it asked for one. When Delay reports false the engine falls
// back to its own capped exponential backoff.
//
// Durations returned by this package are never negative. They are not
// capped: a server may ask for more than [MaxDelay], and the caller decides
// what that means (the engine ends such a job as needs_reconciliation
// rather than silently shortening the delay). Plain numbers and dates too
// far out for a time.Duration saturate at the largest Duration (about 292
// years); Go-style durations that overflow ("9999999999h") are rejected.
package ratelimit

import (
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ratelane/ratelane/rltype"
)

// MaxDelay is ratelane's overall cap on any retry delay, rltype.MaxDelay:
// 7 days (see DESIGN.md, "Retry timing"). The parsers never apply it; a
// delay longer than MaxDelay is reported as the server gave it, and
// callers compare against MaxDelay to decide what to do.
const MaxDelay = rltype.MaxDelay

// Quota is what an upstream said about one quota dimension (requests or
// tokens) in one response. [Parse] fills fields it did not find with their
// "unknown" values, so a Quota from Parse with Limit == -1, Remaining == -1
// and Reset == 0 means the upstream said nothing about this dimension.
type Quota struct {
	// Limit is the maximum the quota allows per window, in its unit
	// (requests or tokens); -1 when unknown.
	Limit int64
	// Remaining is what is left in the current window; -1 when unknown.
	// 0 means exhausted.
	Remaining int64
	// Reset is the time from now until the quota refills fully. 0 when
	// unknown or when the reset time is already past.
	Reset time.Duration

	// resetSrc names the header that gave Reset, for Info.Delay.
	resetSrc string
}

// unknownQuota is the Quota that says nothing.
var unknownQuota = Quota{Limit: -1, Remaining: -1}

// Known reports whether the upstream said anything about this quota.
func (q Quota) Known() bool {
	return q.Limit >= 0 || q.Remaining >= 0 || q.Reset > 0
}

// Exhausted reports whether the upstream said the quota is used up
// (Remaining == 0). The zero Quota counts as exhausted; Quotas from
// [Parse] do not unless the upstream said so.
func (q Quota) Exhausted() bool {
	return q.Remaining == 0
}

// Info is everything [Parse] found in one response's headers. The zero
// Info is valid and says nothing usable: Delay reports false.
type Info struct {
	// RetryAfter is the delay the server asked for, from retry-after-ms or
	// Retry-After; valid only when HasRetryAfter. Never negative; 0 means
	// "retry now" (for example an HTTP-date already in the past).
	RetryAfter time.Duration
	// HasRetryAfter reports whether RetryAfter holds a server-given value.
	HasRetryAfter bool
	// Source names the header that gave RetryAfter, lower case:
	// "retry-after-ms" or "retry-after"; "" when HasRetryAfter is false.
	// It is meant for the attempt history ("why this delay").
	Source string

	// Requests is the request quota: OpenAI x-ratelimit-*-requests, else
	// Anthropic anthropic-ratelimit-requests-*.
	Requests Quota
	// Tokens is the token quota: OpenAI x-ratelimit-*-tokens, else
	// Anthropic anthropic-ratelimit-tokens-* (which Anthropic documents as
	// the most restrictive token limit in effect). When Anthropic sends only
	// the input and output token headers, Tokens is the tighter of
	// InputTokens and OutputTokens (see [Parse]); the two are separate
	// buckets, so they are never added together.
	Tokens Quota
	// InputTokens is Anthropic's input-token quota
	// (anthropic-ratelimit-input-tokens-*); unknown for other providers.
	InputTokens Quota
	// OutputTokens is Anthropic's output-token quota
	// (anthropic-ratelimit-output-tokens-*); unknown for other providers.
	OutputTokens Quota

	// Policies are the IETF RateLimit-Policy and RateLimit entries, merged
	// by policy name; nil when the response had none.
	Policies []Policy
}

// Parse reads every rate-limit signal this package knows from h. now is
// the time the response was received. Header values that are absolute
// times (HTTP-dates, RFC 3339 timestamps, Unix times) are instants on the
// server's clock, so they become durations from the response's Date
// ([ServerNow]), or from now without a valid Date. Header names are
// matched case-insensitively, also in an http.Header built by hand with
// non-canonical keys. Multiple field lines
// of a structured field are joined with commas (RFC 9110 §5.3); for the
// other headers the first line counts.
//
// An HTTP-date Retry-After is such an instant (RFC 9110 §6.6.1): a
// server whose clock runs 30 s ahead and asks for "1 s from now" means
// one second, not 31. The same holds for Anthropic's RFC 3339 resets and
// for Unix-time and HTTP-date RateLimit resets. The delay is the exact
// difference of the two dates, with no rounding: both have one-second
// resolution, and a server that rounds its retry instant up (as it must,
// so that no client retries early) and truncates its Date makes the
// difference up to (not including) two seconds more than the wait it
// needs, never less. Delays given in seconds do not depend on any clock.
//
// Precedence for RetryAfter: a valid retry-after-ms wins over Retry-After,
// because it is the more precise value and servers that send both send
// the same delay. A malformed retry-after-ms falls back to Retry-After.
// Requests and Tokens come from OpenAI's headers when any is present,
// else from Anthropic's.
//
// Policies come from the IETF fields in all three shapes the drafts have
// used: RateLimit-Policy plus RateLimit as structured-field lists (draft
// 08 and later: "default";q=100;w=60 and "default";r=50;t=30), the
// draft-07 dictionary "RateLimit: limit=100, remaining=50, reset=30", and
// the separate RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
// fields of drafts 00 to 06. A reset in seconds of 10^9 or more (over 31
// years) is taken as a Unix time, because some servers (GitLab) send one;
// RateLimit-Reset may also be an HTTP-date.
//
// Parse never fails: malformed values are reported as unknown. It is safe
// to call concurrently.
func Parse(h http.Header, now time.Time) Info {
	h = canonical(h)
	server := ServerNow(h, now)
	var info Info
	if d, ok := parseMillis(h.Get("Retry-After-Ms")); ok {
		info.RetryAfter, info.HasRetryAfter, info.Source = d, true, "retry-after-ms"
	} else if d, ok := ParseRetryAfter(h.Get("Retry-After"), server); ok {
		info.RetryAfter, info.HasRetryAfter, info.Source = d, true, "retry-after"
	}
	info.Requests = parseOpenAI(h, "requests")
	info.Tokens = parseOpenAI(h, "tokens")
	info.InputTokens = parseAnthropic(h, "input-tokens", server)
	info.OutputTokens = parseAnthropic(h, "output-tokens", server)
	if !info.Requests.Known() {
		info.Requests = parseAnthropic(h, "requests", server)
	}
	if !info.Tokens.Known() {
		info.Tokens = parseAnthropic(h, "tokens", server)
	}
	if !info.Tokens.Known() {
		info.Tokens = tighter(info.InputTokens, info.OutputTokens)
	}
	info.Policies = parsePolicies(h, server)
	return info
}

// Delay returns the delay the server asked for and the lower-case name of
// the header it came from. It prefers retry-after-ms, then Retry-After,
// then, for an exhausted quota (Remaining == 0) with a known reset, that
// quota's Reset; when several quotas are exhausted it returns the longest
// reset, since the request needs all of them. ok is false when the server
// gave nothing usable; the caller then uses its own backoff.
//
// The delay is never negative and is not capped: compare it with
// [MaxDelay].
func (i Info) Delay() (d time.Duration, source string, ok bool) {
	if i.HasRetryAfter {
		return max(i.RetryAfter, 0), i.Source, true
	}
	consider := func(exhausted bool, reset time.Duration, src string) {
		if exhausted && reset > 0 && reset > d {
			d, source, ok = reset, src, true
		}
	}
	for _, q := range []Quota{i.Requests, i.Tokens, i.InputTokens, i.OutputTokens} {
		consider(q.Exhausted(), q.Reset, q.resetSrc)
	}
	for _, p := range i.Policies {
		consider(p.Remaining == 0, p.Reset, p.resetSrc)
	}
	return d, source, ok
}

// tighter returns the more restrictive of two quotas: an exhausted one
// (the later reset if both are), else the one with the smaller fraction
// remaining, else whichever is known. It picks rather than adds because
// input and output tokens are separate buckets; either one running out
// blocks the request.
func tighter(a, b Quota) Quota {
	switch {
	case !a.Known():
		return b
	case !b.Known():
		return a
	case a.Exhausted() && b.Exhausted():
		if b.Reset > a.Reset {
			return b
		}
		return a
	case a.Exhausted():
		return a
	case b.Exhausted():
		return b
	}
	if a.Limit > 0 && b.Limit > 0 && a.Remaining >= 0 && b.Remaining >= 0 {
		if float64(b.Remaining)/float64(b.Limit) < float64(a.Remaining)/float64(a.Limit) {
			return b
		}
	}
	return a
}

// ServerNow returns the time on the responding server's clock at which the
// response was generated: its Date header (any of the three HTTP-date
// forms) when valid, else now. HTTP-dates in the same response, such as an
// HTTP-date Retry-After, are instants on that clock, so a delay is their
// difference with ServerNow, which is right whatever the skew between the
// server's clock and ours. h must have canonical keys or be built with
// http.Header.Set/Add; [Parse] canonicalises first.
func ServerNow(h http.Header, now time.Time) time.Time {
	v := strings.Trim(h.Get("Date"), " \t")
	if v == "" {
		return now
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return now
	}
	return t
}

// canonical returns h, or a copy with canonical keys when h was built by
// hand with keys such as "retry-after-ms" that h.Get would not find.
// Keys that differ only in case are merged in sorted key order, so the
// result does not depend on map iteration order.
func canonical(h http.Header) http.Header {
	for k := range h {
		if http.CanonicalHeaderKey(k) != k {
			c := make(http.Header, len(h))
			for _, k := range slices.Sorted(maps.Keys(h)) {
				ck := http.CanonicalHeaderKey(k)
				c[ck] = append(c[ck], h[k]...)
			}
			return c
		}
	}
	return h
}
