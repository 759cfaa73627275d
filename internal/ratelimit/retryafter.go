package ratelimit

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// maxDuration is the largest time.Duration; longer delays saturate to it.
const maxDuration = time.Duration(math.MaxInt64)

// ParseRetryAfter parses a Retry-After field value (RFC 9110 §10.2.3) and
// returns the delay it asks for, measured from now.
//
// The value is either delay-seconds, a non-negative decimal integer such
// as "120", or an HTTP-date in any of the three formats RFC 9110 §5.6.7
// requires recipients to accept: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37
// GMT"), the obsolete RFC 850 form ("Sunday, 06-Nov-94 08:49:37 GMT") and
// asctime ("Sun Nov  6 08:49:37 1994"). As a deliberate tolerance,
// delay-seconds may have a fractional part ("1.5"), which several API
// providers send; the result keeps nanosecond precision and truncates
// beyond it. Surrounding spaces and tabs are ignored.
//
// A date in the past gives (0, true): the server allows a retry now. A
// negative number, a sign, an exponent, an empty value or anything else
// gives (0, false). A delay too large for a time.Duration saturates at the
// largest Duration; the result is not capped at [MaxDelay].
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.Trim(value, " \t")
	if value == "" {
		return 0, false
	}
	if d, ok := parseDecimal(value, time.Second); ok {
		return d, true
	}
	t, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	return until(t, now), true
}

// parseMillis parses a retry-after-ms value (OpenAI, Azure OpenAI): a
// non-negative number of milliseconds, possibly fractional ("1500",
// "12.5").
func parseMillis(value string) (time.Duration, bool) {
	return parseDecimal(strings.Trim(value, " \t"), time.Millisecond)
}

// until returns t - now, or 0 when t is not after now. time.Time.Sub
// saturates, so the result never overflows.
func until(t, now time.Time) time.Duration {
	return max(t.Sub(now), 0)
}

// parseDecimal parses 1*DIGIT [ "." 1*DIGIT ] as a count of unit. No sign,
// no exponent, no spaces. Digits beyond nanosecond precision are
// truncated; results too large for a Duration saturate at maxDuration.
func parseDecimal(s string, unit time.Duration) (time.Duration, bool) {
	whole, frac, hasDot := strings.Cut(s, ".")
	if !allDigits(whole) || (hasDot && !allDigits(frac)) {
		return 0, false
	}
	var n int64
	for _, c := range []byte(whole) {
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return maxDuration, true
		}
		n = n*10 + d
	}
	if n > int64(maxDuration/unit) {
		return maxDuration, true
	}
	total := time.Duration(n) * unit
	// The fraction: at most 9 digits matter, because unit <= time.Second.
	var f, scale int64 = 0, 1
	for i := 0; i < len(frac) && i < 9; i++ {
		f = f*10 + int64(frac[i]-'0')
		scale *= 10
	}
	part := time.Duration(f * int64(unit) / scale)
	if total > maxDuration-part {
		return maxDuration, true
	}
	return total + part, true
}

// allDigits reports whether s is one or more ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
