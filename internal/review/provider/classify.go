package provider

import (
	"net/http"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/ratelimit"
)

// statusOverloaded is Anthropic's 529 "overloaded_error".
const statusOverloaded = 529

// APIError is what a provider's error answer says, reduced to what
// classification needs: the status, the headers and the machine-readable
// error type and code of the body. The message is looked at only for the
// documented spend-limit wordings and is never stored.
type APIError struct {
	Status  int
	Header  http.Header
	Type    string
	Code    string
	Message string
}

// Classify turns a provider's error answer into an outcome, at now:
//
//   - a spent quota or credit balance (OpenAI 429 insufficient_quota, a
//     billing error, Anthropic's "credit balance is too low", a spend
//     limit) is permanent with ReasonProviderQuotaExhausted and pauses the
//     keys for p.QuotaPause: retrying cannot help until someone pays;
//   - 429 (and 503 with a Retry-After) is congestion, with the server's
//     delay from Retry-After, retry-after-ms or the exhausted quota's reset
//     header, and the quota headers as hints;
//   - 529 overloaded, 408, 409 and other 5xx are transient;
//   - every other 4xx (400, 401, 403, 404, 413, 422) is permanent.
func Classify(p Profile, e APIError, now time.Time) job.Outcome {
	info := ratelimit.Parse(e.Header, now)
	o := job.Outcome{Status: e.Status, Hints: Hints(p, info), Err: errText(e)}
	switch {
	case quotaExhausted(e):
		o.Class, o.Reason, o.PauseKeyFor = job.ClassPermanent, job.ReasonProviderQuotaExhausted, p.QuotaPause
		o.Err = "provider quota or credit exhausted"
	case e.Status == http.StatusTooManyRequests:
		o.Class = job.ClassRateLimited
		if d, src, ok := info.Delay(); ok {
			o.RetryAfter, o.RetrySource = d, src
		}
	case e.Status == http.StatusServiceUnavailable && info.HasRetryAfter:
		o.Class, o.RetryAfter, o.RetrySource = job.ClassRateLimited, info.RetryAfter, info.Source
	case e.Status >= 500 || e.Status == statusOverloaded || e.Status == http.StatusRequestTimeout || e.Status == http.StatusConflict:
		o.Class = job.ClassTransient
	case e.Status == 0:
		o.Class = job.ClassTransient
	default:
		o.Class = job.ClassPermanent
	}
	return o
}

// quotaExhausted recognises the answers that mean "out of money", which
// must never enter the 429 retry path.
func quotaExhausted(e APIError) bool {
	if e.Code == "insufficient_quota" || e.Type == "insufficient_quota" || e.Type == "billing_error" ||
		e.Code == "billing_hard_limit_reached" || e.Status == http.StatusPaymentRequired {
		return true
	}
	if e.Status != http.StatusTooManyRequests && e.Status != http.StatusBadRequest && e.Status != http.StatusForbidden {
		return false
	}
	m := strings.ToLower(e.Message)
	return strings.Contains(m, "credit balance") || strings.Contains(m, "spend limit") ||
		strings.Contains(m, "usage limit") || strings.Contains(m, "exceeded your current quota")
}

// Hints turns the quota headers of a response into hints for the profile's
// keys: the request quota for RequestsKey, the token quota for TokensKey
// (when the profile paces tokens).
func Hints(p Profile, info ratelimit.Info) []job.Hint {
	var hs []job.Hint
	if q := info.Requests; q.Known() {
		hs = append(hs, job.Hint{Key: p.RequestsKey, Limit: q.Limit, Remaining: q.Remaining, Reset: q.Reset})
	}
	if q := info.Tokens; q.Known() && p.TokensKey != "" {
		hs = append(hs, job.Hint{Key: p.TokensKey, Limit: q.Limit, Remaining: q.Remaining, Reset: q.Reset})
	}
	return hs
}

// errText is the bounded, content-free text kept in the attempt history:
// the error's type and code, which providers document as stable values.
func errText(e APIError) string {
	parts := []string{}
	for _, s := range []string{e.Type, e.Code} {
		if s != "" && len(s) < 64 {
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return http.StatusText(e.Status)
	}
	return strings.Join(parts, "/")
}
