package ratelimit

import (
	"math"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"
)

// fuzzNow turns a fuzzed Unix time into a receive time.
func fuzzNow(unix int64) time.Time {
	return time.Unix(unix, 0).UTC()
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{
		"120", "0", "1.5", "0.001", " 5 ", "-1", "+1", "1e3", "", "abc",
		"99999999999999999999", "9223372036.854775807",
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
		"Fri, 31 Dec 9999 23:59:59 GMT",
		"Mon, 01 Jan 0001 00:00:00 GMT",
	} {
		f.Add(s, rfcNow.Unix())
	}
	f.Fuzz(func(t *testing.T, value string, unix int64) {
		d, ok := ParseRetryAfter(value, fuzzNow(unix))
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, negative", value, d)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, false; want 0 when not ok", value, d)
		}
		if md, ok := parseMillis(value); md < 0 || !ok && md != 0 {
			t.Fatalf("parseMillis(%q) = %v, %v", value, md, ok)
		}
		if rd, ok := parseResetDuration(value); rd < 0 || !ok && rd != 0 {
			t.Fatalf("parseResetDuration(%q) = %v, %v", value, rd, ok)
		}
		// Numbers against exact arithmetic: the three readers must agree
		// with it to the nanosecond, saturating rather than wrapping.
		if want, isNum := exactDecimal(value, time.Second); isNum {
			if d, ok := ParseRetryAfter(value, fuzzNow(unix)); !ok || d != want {
				t.Fatalf("ParseRetryAfter(%q) = %v, %v; want %v", value, d, ok, want)
			}
			if rd, ok := parseResetDuration(value); !ok || rd != want {
				t.Fatalf("parseResetDuration(%q) = %v, %v; want %v", value, rd, ok, want)
			}
		} else if _, err := http.ParseTime(strings.Trim(value, " \t")); err != nil && ok {
			t.Fatalf("ParseRetryAfter(%q) = %v, true: neither a number nor an HTTP-date", value, d)
		}
		if want, isNum := exactDecimal(value, time.Millisecond); isNum {
			if md, ok := parseMillis(value); !ok || md != want {
				t.Fatalf("parseMillis(%q) = %v, %v; want %v", value, md, ok, want)
			}
		}
	})
}

// exactDecimal reads value as 1*DIGIT [ "." 1*DIGIT ] (after trimming
// spaces and tabs) counts of unit with exact rational arithmetic, truncated
// to a whole nanosecond and saturated at the largest Duration: an oracle
// for parseDecimal that shares none of its overflow checks.
func exactDecimal(value string, unit time.Duration) (time.Duration, bool) {
	digits := func(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
	s := strings.Trim(value, " \t")
	whole, frac, dot := strings.Cut(s, ".")
	if !digits(whole) || dot && !digits(frac) {
		return 0, false
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return 0, false
	}
	r.Mul(r, new(big.Rat).SetInt64(int64(unit)))
	ns := new(big.Int).Quo(r.Num(), r.Denom())
	if !ns.IsInt64() {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(ns.Int64()), true
}

// fuzzHeaderNames are the headers Parse reads; FuzzParse picks among
// them so that the fuzzer spends its time on values, not on names.
var fuzzHeaderNames = []string{
	"Retry-After", "retry-after-ms",
	"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
	"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
	"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset",
	"anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset",
	"anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset",
	"anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-reset",
	"RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
	"Date",
}

// fuzzHeader builds a header from lines "name: value" or "#index: value"
// (an index into fuzzHeaderNames), so seeds stay readable.
func fuzzHeader(blob string) http.Header {
	h := http.Header{}
	for line := range strings.SplitSeq(blob, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if len(name) > 1 && name[0] == '#' {
			i := 0
			for _, c := range []byte(name[1:]) {
				i = (i*10 + int(c)) % len(fuzzHeaderNames)
			}
			name = fuzzHeaderNames[i]
		}
		// Raw map insertion: names need not be canonical or even valid.
		h[name] = append(h[name], strings.TrimLeft(value, " "))
	}
	return h
}

func FuzzParse(f *testing.F) {
	seeds := []string{
		"retry-after-ms: 2500\nretry-after: 3\nx-ratelimit-remaining-tokens: 0\nx-ratelimit-reset-tokens: 2.5s",
		"x-ratelimit-limit-requests: 60\nx-ratelimit-remaining-requests: 59\nx-ratelimit-reset-requests: 1s\nx-ratelimit-reset-tokens: 6m0s",
		"anthropic-ratelimit-requests-remaining: 0\nanthropic-ratelimit-requests-reset: 2024-05-01T12:00:30Z",
		"anthropic-ratelimit-input-tokens-remaining: 0\nanthropic-ratelimit-input-tokens-reset: 2024-05-01T12:00:20+02:00\nanthropic-ratelimit-output-tokens-limit: 80000",
		"RateLimit-Policy: \"default\";q=100;w=60\nRateLimit: \"default\";r=0;t=30",
		"RateLimit-Policy: 10;w=1, 50;w=60\nRateLimit: limit=10, remaining=1, reset=7",
		"RateLimit-Limit: 100, 100;w=60\nRateLimit-Remaining: 0\nRateLimit-Reset: 1609844400",
		"RateLimit-Reset: Sun, 06 Nov 1994 08:49:37 GMT",
		"Retry-After: Fri, 31 Dec 9999 23:59:59 GMT",
		"#0: 5\n#19: \"a\";r=0;t=999999999999999",
		"ratelimit: \"a\";r=0;t=-5\nRATELIMIT: b;r=0;t=1.5",
		"Date: Sun, 06 Nov 1994 08:49:37 GMT\nRetry-After: Sun, 06 Nov 1994 08:49:39 GMT",
		"date: Sunday, 06-Nov-94 08:49:37 GMT\nretry-after: Sun Nov  6 08:49:40 1994\nretry-after-ms: 12.5",
	}
	for _, s := range seeds {
		f.Add(s, now.Unix())
	}
	f.Fuzz(func(t *testing.T, blob string, unix int64) {
		info := Parse(fuzzHeader(blob), fuzzNow(unix))
		if info.RetryAfter < 0 || !info.HasRetryAfter && (info.RetryAfter != 0 || info.Source != "") {
			t.Fatalf("bad RetryAfter: %+v", info)
		}
		for _, q := range []Quota{info.Requests, info.Tokens, info.InputTokens, info.OutputTokens} {
			if q.Limit < -1 || q.Remaining < -1 || q.Reset < 0 {
				t.Fatalf("bad Quota %+v", q)
			}
		}
		for _, p := range info.Policies {
			if p.Quota < -1 || p.Remaining < -1 || p.Reset < 0 || p.Window < 0 {
				t.Fatalf("bad Policy %+v", p)
			}
		}
		d, src, ok := info.Delay()
		if d < 0 || ok != (src != "") || !ok && d != 0 {
			t.Fatalf("Delay() = %v, %q, %v", d, src, ok)
		}
	})
}

func FuzzStructuredField(f *testing.F) {
	for _, s := range []string{
		`"default";q=100;w=60,"daily";q=1000;w=86400`,
		`"default";r=50;t=30`,
		`"peruser";q=65535;qu="content-bytes";w=10;pk=:cHJvZ3JhbW1lcg==:`,
		"limit=100, remaining=50, reset=30",
		"10;w=1, 50;w=60",
		"sugar, tea, rum",
		`("foo"; a=1;b=2);lvl=5, ("bar" "baz");lvl=1`,
		`en="Applepie", da=:w4ZibGV0w6ZydGU=:`,
		"a=?0, b, c; foo=bar",
		"999999999999.999, -999999999999999, @1659578233, ?1",
		`"a\"b\\c", *tok:x/y`,
		":YQ:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ms, ok := parseSFList(s); ok {
			checkMembers(t, ms)
			again, ok := parseSFList(serializeList(ms))
			if !ok || serializeList(again) != serializeList(ms) {
				t.Fatalf("list round trip of %q: %q -> %q, %v", s, serializeList(ms), serializeList(again), ok)
			}
		}
		if ms, ok := parseSFDict(s); ok {
			checkMembers(t, ms)
			again, ok := parseSFDict(serializeDict(ms))
			if !ok || serializeDict(again) != serializeDict(ms) {
				t.Fatalf("dict round trip of %q: %q -> %q, %v", s, serializeDict(ms), serializeDict(again), ok)
			}
		}
		// The same text through every RateLimit field must stay sane.
		h := http.Header{}
		for _, name := range []string{"Ratelimit-Policy", "Ratelimit", "Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset"} {
			h[name] = []string{s}
		}
		for _, p := range Parse(h, now).Policies {
			if p.Quota < -1 || p.Remaining < -1 || p.Reset < 0 || p.Window < 0 {
				t.Fatalf("bad Policy %+v from %q", p, s)
			}
		}
	})
}

// checkMembers checks the RFC 8941 range of every number parsed.
func checkMembers(t *testing.T, ms []sfMember) {
	t.Helper()
	check := func(it sfItem) {
		const maxInt = 999_999_999_999_999
		if (it.kind == sfInteger || it.kind == sfDecimal) && (it.num > maxInt || it.num < -maxInt) {
			t.Fatalf("number out of range: %+v", it)
		}
		if it.kind == 0 {
			t.Fatalf("item without kind")
		}
	}
	for _, m := range ms {
		if !m.isInner {
			check(m.item)
		}
		for _, ip := range m.inner {
			check(ip.item)
			for _, p := range ip.params {
				check(p.val)
			}
		}
		for _, p := range m.params {
			check(p.val)
		}
	}
}

// FuzzRetryAfterSkew checks that an HTTP-date Retry-After beside a Date
// header gives exactly their difference, whatever the local clock says:
// the server's clock may be ahead or behind by any amount.
func FuzzRetryAfterSkew(f *testing.F) {
	f.Add(rfcNow.Unix(), int64(2), int64(0), uint8(0))
	f.Add(rfcNow.Unix(), int64(1), int64(3600), uint8(1))
	f.Add(int64(0), int64(-5), int64(-86400), uint8(2))
	f.Add(int64(253402300799), int64(120), int64(7), uint8(0))
	f.Fuzz(func(t *testing.T, server, wait, skew int64, form uint8) {
		// HTTP-dates cover years 0001..9999 in four digits.
		const lo, hi = -62135596800, 253402300799
		if server < lo || server > hi || wait < -86400 || wait > 86400*365 || server+wait < lo || server+wait > hi {
			return
		}
		date, retry := time.Unix(server, 0).UTC(), time.Unix(server+wait, 0).UTC()
		layouts := []string{http.TimeFormat, time.RFC850, time.ANSIC}
		layout := layouts[int(form)%len(layouts)]
		if layout != http.TimeFormat && (date.Year() < 1970 || retry.Year() < 1970 || date.Year() > 2069 || retry.Year() > 2069) {
			return // two-digit years (RFC 850) are read as 1970..2069
		}
		h := http.Header{}
		h.Set("Date", date.Format(layout))
		h.Set("Retry-After", retry.Format(layout))
		local := date.Add(time.Duration(skew) * time.Second)
		info := Parse(h, local)
		want := max(0, time.Duration(wait)*time.Second)
		if !info.HasRetryAfter || info.RetryAfter != want || info.Source != "retry-after" {
			t.Fatalf("Date %q, Retry-After %q, local %v: got %v %v %q, want %v",
				h.Get("Date"), h.Get("Retry-After"), local, info.RetryAfter, info.HasRetryAfter, info.Source, want)
		}
	})
}
