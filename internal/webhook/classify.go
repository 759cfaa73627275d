package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/ratelimit"
)

// classify turns a subscriber's answer into an outcome. receivedAt is when
// the answer arrived, for headers that carry absolute times. It is the one
// place that decides what a status means; see Deliverer.Deliver for the
// table.
func classify(status int, h http.Header, receivedAt time.Time) job.Outcome {
	info := ratelimit.Parse(h, receivedAt)
	out := job.Outcome{Status: status, Hints: hints(info)}
	delay, source, hasDelay := info.Delay()
	switch {
	case status >= 200 && status <= 299:
		out.Class = job.ClassSuccess
		return out
	case status == http.StatusTooManyRequests,
		status == http.StatusServiceUnavailable && info.HasRetryAfter:
		out.Class = job.ClassRateLimited
	case status == http.StatusRequestTimeout, status >= 500 && status <= 599:
		out.Class = job.ClassTransient
	case status == http.StatusGone:
		out.Class, out.Reason = job.ClassPermanent, job.ReasonSubscriberGone
	default: // 1xx (never final here), 3xx (redirects are not followed), other 4xx, >= 600
		out.Class, out.Reason = job.ClassPermanent, job.ReasonPermanentError
	}
	out.Err = "subscriber answered " + strconv.Itoa(status)
	if out.Class != job.ClassPermanent && hasDelay {
		out.RetryAfter, out.RetrySource = delay, source
	}
	return out
}

// hints turns request-quota headers into hints for the adaptive buckets:
// OpenAI/Anthropic-style request quotas and IETF RateLimit policies counted
// in requests. Token and byte quotas do not apply to webhook deliveries.
func hints(info ratelimit.Info) []job.Hint {
	var out []job.Hint
	if q := info.Requests; q.Known() {
		out = append(out, job.Hint{Limit: q.Limit, Remaining: q.Remaining, Reset: q.Reset})
	}
	for _, p := range info.Policies {
		if p.QuotaUnit != "" && p.QuotaUnit != "requests" {
			continue
		}
		if p.Quota >= 0 || p.Remaining >= 0 || p.Reset > 0 {
			out = append(out, job.Hint{Limit: p.Quota, Remaining: p.Remaining, Reset: p.Reset, Window: p.Window})
		}
	}
	return out
}

// classifyError turns a failed round trip into an outcome. Only the SSRF
// guard's refusal is permanent: everything else (timeouts, DNS failures,
// refused or reset connections, TLS failures) may clear up on its own or
// after the subscriber fixes its side, and the transient budget is small.
// The dialer reports the first address's error when every address of a
// hostname fails, so a name with both refused and allowed addresses whose
// allowed ones are all unreachable ends as permanent; a name that resolves
// to a private address at all is suspect anyway.
func classifyError(err error) job.Outcome {
	if errors.Is(err, ErrForbiddenAddress) {
		return permanent(ErrForbiddenAddress.Error())
	}
	return job.Outcome{Class: job.ClassTransient, Err: errorPhrase(err)}
}

// errorPhrase names a transport failure in a few fixed words, never
// echoing the error text (which can hold the URL and its query).
func errorPhrase(err error) string {
	var (
		dnsErr  *net.DNSError
		certErr *tls.CertificateVerificationError
		recErr  tls.RecordHeaderError
		alert   tls.AlertError
		netErr  net.Error
	)
	switch {
	case errors.Is(err, context.Canceled):
		return "delivery cancelled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout waiting for subscriber"
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "subscriber host not found"
		}
		return "dns lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by subscriber"
	case errors.As(err, &certErr), errors.As(err, &recErr), errors.As(err, &alert):
		return "tls handshake failed"
	default:
		return "connection failed"
	}
}

// diagnosticHeaders are the response fields Response keeps.
var diagnosticHeaders = []string{
	"Content-Type", "Content-Length", "Date", "Location", "Retry-After", "Retry-After-Ms",
	"RateLimit", "RateLimit-Policy", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
	"Server", "X-Request-Id",
}

// readResponse keeps the diagnostic headers and the first MaxBodyPrefix
// bytes of the body, drains at most maxDrain more so a small answer's
// connection can be reused, and closes the body.
func readResponse(resp *http.Response) Response {
	defer resp.Body.Close()
	r := Response{Status: resp.StatusCode, Header: http.Header{}}
	for k, vs := range resp.Header {
		if keepHeader(k) {
			r.Header[k] = vs
		}
	}
	buf := make([]byte, MaxBodyPrefix+1)
	n, _ := io.ReadFull(resp.Body, buf) // a short or failed read keeps what arrived
	r.BodyPrefix, r.BodyTruncated = buf[:min(n, MaxBodyPrefix)], n > MaxBodyPrefix
	if r.BodyTruncated {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	}
	return r
}

func keepHeader(k string) bool {
	lk := strings.ToLower(k)
	if strings.HasPrefix(lk, "x-ratelimit-") || strings.HasPrefix(lk, "anthropic-ratelimit-") {
		return true
	}
	for _, d := range diagnosticHeaders {
		if strings.EqualFold(k, d) {
			return true
		}
	}
	return false
}
