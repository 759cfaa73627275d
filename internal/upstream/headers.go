package upstream

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// policyName is the quota policy identifier in the IETF RateLimit fields.
const policyName = `"default"`

// writeLimitHeaders adds the rate-limit headers of style for d. A route
// without a limiter (d.limited false) sends none.
func writeLimitHeaders(h http.Header, style HeaderStyle, d decision, now time.Time) {
	if !d.limited {
		return
	}
	limit, remaining := strconv.Itoa(d.limit), strconv.Itoa(d.remaining)
	switch style {
	case HeaderStyleXRateLimit:
		h.Set("x-ratelimit-limit-requests", limit)
		h.Set("x-ratelimit-remaining-requests", remaining)
		h.Set("x-ratelimit-reset-requests", formatResetDuration(d.reset))
	case HeaderStyleRateLimit:
		h.Set("RateLimit-Policy", policyName+";q="+policyQuota(d)+";w="+strconv.FormatInt(ceilSeconds(d.window, 1), 10))
		h.Set("RateLimit", policyName+";r="+remaining+";t="+strconv.FormatInt(ceilSeconds(d.reset, 0), 10))
	case HeaderStyleRateLimitLegacy:
		h.Set("RateLimit-Limit", limit)
		h.Set("RateLimit-Remaining", remaining)
		h.Set("RateLimit-Reset", strconv.FormatInt(ceilSeconds(d.reset, 0), 10))
	case HeaderStyleAnthropic:
		h.Set("anthropic-ratelimit-requests-limit", limit)
		h.Set("anthropic-ratelimit-requests-remaining", remaining)
		h.Set("anthropic-ratelimit-requests-reset", ceilTime(now.Add(d.reset)).Format(time.RFC3339))
	}
}

// policyQuota is the q of d's IETF RateLimit-Policy: a window's limit, or
// what a bucket sustains over the policy window (its rate times the window
// in whole seconds, at least its burst). The burst alone over its
// Burst/Rate window rounded up to a second would announce a fraction of
// the bucket's allowance, and a client that believes announcements would
// pace itself to it.
func policyQuota(d decision) string {
	if d.rate <= 0 {
		return strconv.Itoa(d.limit)
	}
	w := float64(ceilSeconds(d.window, 1))
	return strconv.Itoa(max(d.limit, int(math.Floor(d.rate*w+1e-9))))
}

// writeRetryAfter adds the retry hint of an over-limit answer of style.
// A hint is never zero: a client told "retry in 0" would spin.
// serverNow is the server's clock (the simulator's plus DateSkew): an
// HTTP-date Retry-After is the retry instant on it, rounded up to the
// whole second so that a client never retries early, while Date is
// truncated; their difference is at most a second more than the wait.
func writeRetryAfter(h http.Header, style OverLimit, retryAfter time.Duration, serverNow time.Time) {
	switch style {
	case OverLimit429Seconds, OverLimit503:
		h.Set("Retry-After", strconv.FormatInt(ceilSeconds(retryAfter, 1), 10))
	case OverLimit429Millis:
		ms := max(1, (retryAfter+time.Millisecond-1)/time.Millisecond)
		h.Set("retry-after-ms", strconv.FormatInt(int64(ms), 10))
		h.Set("Retry-After", strconv.FormatInt(ceilSeconds(retryAfter, 1), 10))
	case OverLimit429Date, OverLimit503Date:
		at := ceilTime(serverNow.Add(max(retryAfter, time.Millisecond)))
		if !at.After(serverNow.Truncate(time.Second)) {
			at = serverNow.Truncate(time.Second).Add(time.Second) // never "retry now"
		}
		h.Set("Retry-After", at.UTC().Format(http.TimeFormat))
	}
}

// overLimitStatus is the status of an over-limit answer of style; anthropic
// selects Anthropic's 529 for "overloaded".
func overLimitStatus(style OverLimit, anthropic bool) int {
	switch {
	case style != OverLimit503 && style != OverLimit503Date && style != OverLimit503None:
		return http.StatusTooManyRequests
	case anthropic:
		return statusOverloaded
	default:
		return http.StatusServiceUnavailable
	}
}

// statusOverloaded is Anthropic's non-standard "overloaded" status.
const statusOverloaded = 529

// formatResetDuration formats d as OpenAI's x-ratelimit-reset-* values do
// ("1s", "6m0s", "12ms", "1.5s"): Go duration syntax at millisecond
// precision, rounded up so a client never retries early.
func formatResetDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
}

// ceilSeconds is d in whole seconds rounded up, at least floor.
func ceilSeconds(d time.Duration, floor int64) int64 {
	return max(floor, int64((d+time.Second-1)/time.Second))
}

// ceilTime rounds t up to a whole second, the precision of HTTP-dates.
func ceilTime(t time.Time) time.Time {
	if t.Nanosecond() == 0 {
		return t.UTC()
	}
	return t.Truncate(time.Second).Add(time.Second).UTC()
}
