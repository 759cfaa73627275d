package ratelimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// parseOpenAI reads OpenAI's x-ratelimit-{limit,remaining,reset}-<dim>
// headers, dim being "requests" or "tokens". OpenAI-compatible servers
// (Azure OpenAI, Groq, Together, ...) send the same names, often only a
// subset (Azure sends only the remaining-* pair).
func parseOpenAI(h http.Header, dim string) Quota {
	q := unknownQuota
	q.Limit = parseCount(h.Get("X-Ratelimit-Limit-" + dim))
	q.Remaining = parseCount(h.Get("X-Ratelimit-Remaining-" + dim))
	if d, ok := parseResetDuration(h.Get("X-Ratelimit-Reset-" + dim)); ok {
		q.Reset, q.resetSrc = d, "x-ratelimit-reset-"+dim
	}
	return q
}

// parseAnthropic reads Anthropic's anthropic-ratelimit-<dim>-{limit,
// remaining,reset} headers, dim being "requests", "tokens",
// "input-tokens" or "output-tokens". Anthropic sends reset as an RFC 3339
// timestamp ("2024-04-08T18:30:00Z"); it becomes the duration from now,
// 0 when already past. Parse passes the server's now (the response's
// Date), since the timestamp is on the server's clock.
func parseAnthropic(h http.Header, dim string, now time.Time) Quota {
	prefix := "Anthropic-Ratelimit-" + dim + "-"
	q := unknownQuota
	q.Limit = parseCount(h.Get(prefix + "Limit"))
	q.Remaining = parseCount(h.Get(prefix + "Remaining"))
	if v := strings.Trim(h.Get(prefix+"Reset"), " \t"); v != "" {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			q.Reset, q.resetSrc = until(t, now), "anthropic-ratelimit-"+dim+"-reset"
		}
	}
	return q
}

// parseCount parses a non-negative decimal count such as a limit or a
// remaining value; -1 when absent or malformed (negative, signed,
// fractional, overflowing).
func parseCount(v string) int64 {
	v = strings.Trim(v, " \t")
	if !allDigits(v) {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// parseResetDuration parses OpenAI's x-ratelimit-reset-* values. OpenAI
// documents Go-style durations ("1s", "6m0s", "12ms", "1m30.5s",
// "2h0m0s", "0.5s"), which time.ParseDuration reads. It also accepts
// forms time.ParseDuration rejects but OpenAI-compatible servers send:
//   - a bare number of seconds ("20", "0.5"), as Together and others do;
//   - a leading day count ("1d", "1d2h3m4s"), seen on daily quotas.
//
// Negative durations and garbage give false. Durations too large for a
// time.Duration give false, except bare numbers, which saturate.
func parseResetDuration(v string) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if v == "" || v[0] == '-' || v[0] == '+' {
		return 0, false
	}
	if d, ok := parseDecimal(v, time.Second); ok {
		return d, true
	}
	var days time.Duration
	if ds, rest, ok := strings.Cut(v, "d"); ok && allDigits(ds) {
		n, err := strconv.ParseInt(ds, 10, 64)
		if err != nil || n > int64(maxDuration/(24*time.Hour)) {
			return 0, false
		}
		days, v = time.Duration(n)*24*time.Hour, rest
		if v == "" {
			return days, true
		}
		if v[0] == '-' || v[0] == '+' {
			return 0, false
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > maxDuration-days {
		return 0, false
	}
	return days + d, true
}
