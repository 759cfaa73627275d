package ratelane

import (
	"net/http"
	"time"

	"github.com/ratelane/ratelane/internal/ratelimit"
)

// ResponseOutcome turns an upstream's HTTP answer, its status and headers
// received at now, into the Outcome an OutcomeHandler returns, so a handler
// does not parse Retry-After and rate-limit headers itself:
//
//   - 2xx: success, with the remaining-quota hints of the headers
//     (x-ratelimit-*, anthropic-ratelimit-*, IETF RateLimit), which slow
//     the key before it hits a 429;
//   - 429, and 503 with Retry-After: rate limited, with the server's delay
//     (retry-after-ms, Retry-After as seconds or HTTP-date, or a reset
//     header of an exhausted quota) and the hints; without a delay the
//     engine backs off;
//   - 408, other 503s and every 5xx: transient;
//   - other 4xx: permanent.
//
// Set Result on a success, and Scope when the limit applies to one of the
// job's keys only. The body is never read.
func ResponseOutcome(status int, header http.Header, now time.Time) Outcome {
	return ratelimit.Outcome(status, header, now)
}
