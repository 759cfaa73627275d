package ratelimit

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratelane/ratelane/rltype"
)

// Hints turns the remaining-quota signals of info that count requests into
// hints for the job's limit keys: the scope key, or all of them when scope
// is empty. Token quotas are left out: a key's bucket counts starts (or the
// job's declared cost), and a request quota is what a start spends.
func Hints(info Info, scope string) []rltype.Hint {
	var hints []rltype.Hint
	if q := info.Requests; q.Known() {
		hints = append(hints, rltype.Hint{Key: scope, Limit: q.Limit, Remaining: q.Remaining, Reset: q.Reset})
	}
	for _, p := range info.Policies {
		if (p.QuotaUnit == "" || p.QuotaUnit == "requests") && (p.Quota >= 0 || p.Remaining >= 0 || p.Reset > 0) {
			hints = append(hints, rltype.Hint{Key: scope, Limit: p.Quota, Remaining: p.Remaining, Reset: p.Reset, Window: p.Window})
		}
	}
	return hints
}

// Outcome classifies an upstream's HTTP answer (status and headers,
// received at now) as one attempt's outcome:
//
//   - 2xx is success, with the remaining-quota hints of the headers;
//   - 429, and 503 with a server-given delay, are rate limited: the delay
//     Delay reports (RetryAfter and RetrySource; zero when there is none,
//     so the engine backs off) and the hints;
//   - 408, 503 without a delay and every other 5xx are transient;
//   - every other status (4xx, and 1xx/3xx that the caller did not follow)
//     is permanent.
//
// Err names the status only: the body is never read, so nothing of the
// payload or the upstream's output can reach the job's history.
func Outcome(status int, h http.Header, now time.Time) rltype.Outcome {
	info := Parse(h, now)
	o := rltype.Outcome{Status: status, Hints: Hints(info, "")}
	d, src, hasDelay := info.Delay()
	switch {
	case status >= 200 && status < 300:
		o.Class = rltype.ClassSuccess
		return o
	case status == http.StatusTooManyRequests, status == http.StatusServiceUnavailable && hasDelay:
		o.Class = rltype.ClassRateLimited
		if hasDelay {
			o.RetryAfter, o.RetrySource = d, src
		}
	case status == http.StatusRequestTimeout, status >= 500 && status < 600:
		o.Class = rltype.ClassTransient
	default:
		o.Class = rltype.ClassPermanent
	}
	o.Err = fmt.Sprintf("upstream answered %d %s", status, http.StatusText(status))
	return o
}
