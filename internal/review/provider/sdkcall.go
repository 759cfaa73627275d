package provider

import (
	"net/http"
	"time"

	"github.com/ratelane/ratelane/internal/ratelimit"
)

// sdkCall is what the providers built on an official SDK (Anthropic,
// OpenAI) share around their own client: the profile they call with, the
// answer schema decoded once, and the clock at which an answer's
// rate-limit headers and an error answer's Retry-After are read. Only the
// request and the SDK's answer and error types differ between them.
type sdkCall struct {
	profile Profile
	schema  map[string]any
	now     func() time.Time
}

func newSDKCall(p Profile) sdkCall {
	return sdkCall{profile: p, schema: ResponseSchema(), now: time.Now}
}

// Region returns the profile's region.
func (c sdkCall) Region() string { return c.profile.Region }

// Profile returns the profile.
func (c sdkCall) Profile() Profile { return c.profile }

// answered is the Response of an answer that used usage, with the hints
// of raw's rate-limit headers read at now (raw is nil when the SDK
// kept no response).
func (c sdkCall) answered(raw *http.Response, usage Usage, now time.Time) Response {
	resp := Response{Usage: usage}
	if raw != nil {
		resp.Hints = Hints(c.profile, ratelimit.Parse(raw.Header, now))
	}
	return resp
}

// apiError is the Error of an error answer e (its status, type and
// message as the SDK read them) with raw's headers, read at now.
func (c sdkCall) apiError(e APIError, raw *http.Response, now time.Time) error {
	if raw != nil {
		e.Header = raw.Header
	}
	return &Error{Outcome: Classify(c.profile, e, now)}
}
