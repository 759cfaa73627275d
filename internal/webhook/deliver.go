package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// Response body limits. The prefix is for diagnosis (an operator looking at
// a dead letter wants the receiver's error message); the drain lets a
// keep-alive connection be reused after a small answer without letting a
// receiver make ratelane read an unbounded body.
const (
	// MaxBodyPrefix is how much of a response body Response keeps: 4 KiB.
	MaxBodyPrefix = 4 << 10
	// maxDrain is how much more is read and discarded before closing.
	maxDrain = 64 << 10
)

// Delivery is one event for one subscriber: everything one attempt needs.
// The engine rebuilds it for every attempt from the job and the subscriber
// directory, so a URL, header or secret change applies to the next retry.
type Delivery struct {
	// SubscriberID, EventID and Version identify the delivery: together
	// they give the webhook-id and the Idempotency-Key, which stay the same
	// on every retry so that receivers can deduplicate.
	SubscriberID string
	// URL is the receiver's http or https URL.
	URL string
	// EventID is the id of the event being delivered.
	EventID string
	// Topic is the event's topic; it is in the body, not sent as a header,
	// and kept here for the caller's ledger.
	Topic string
	// Version distinguishes deliberate re-sends of one event to one
	// subscriber (e.g. an operator's replay) from retries: a new Version
	// is a new message with a new webhook-id.
	Version int64
	// Body is the JSON body, sent as is and signed byte for byte.
	Body json.RawMessage
	// Headers are the subscriber's static headers (e.g. an authorization
	// token). They never override the headers this package sets: the
	// webhook-* headers, Idempotency-Key, Content-Type, User-Agent, and
	// hop-by-hop headers are skipped. See ValidateHeaders.
	Headers map[string]string
	// Secrets sign the message, all of them (see Secrets.Active). A
	// delivery with no secret is refused, never sent unsigned.
	Secrets []string
}

// Response is what the subscriber answered, bounded, for the caller's
// delivery ledger and for diagnosis. It never feeds job.Outcome.Err.
type Response struct {
	// Status is the HTTP status, 0 when there was no answer.
	Status int
	// Header holds only the diagnostic and rate-limit fields of the answer
	// (Content-Type, Location, Retry-After, RateLimit*, X-RateLimit-*, ...),
	// never cookies; nil when there was no answer.
	Header http.Header
	// BodyPrefix is the first MaxBodyPrefix bytes of the body.
	BodyPrefix []byte
	// BodyTruncated is set when the body was longer than BodyPrefix.
	BodyTruncated bool
	// Duration is the time from sending the request to the end of the
	// bounded body read (or to the failure).
	Duration time.Duration
}

// Config configures a Deliverer. The zero value is usable: a guarded client
// with a 15 s timeout, User-Agent "ratelane/dev", no directory and the
// system clock.
type Config struct {
	// Version is ratelane's version, sent as "User-Agent: ratelane/<Version>";
	// default "dev". It must be a single token (no spaces or controls).
	Version string
	// Timeout bounds one attempt; 0 means DefaultTimeout.
	Timeout time.Duration
	// AllowPrivate lets deliveries reach loopback and private addresses;
	// see ClientConfig.AllowPrivate.
	AllowPrivate bool
	// Directory resolves subscribers for Handle; Deliver does not use it.
	// A Deliverer without one ends every Handle call as permanent.
	Directory Directory
	// Now is the clock Handle signs with; default time.Now.
	Now func() time.Time
}

// WithDefaults returns c with every unset field given its default.
func (c Config) WithDefaults() Config {
	c.Version = cmp.Or(c.Version, "dev")
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	if c.Timeout < 0 {
		return fmt.Errorf("webhook Config.Timeout %v: want 0 (default %v) or a positive duration", c.Timeout, DefaultTimeout)
	}
	if !validToken(c.Version) || len(c.Version) > 64 {
		return fmt.Errorf("webhook Config.Version %q: want 1 to 64 token characters (letters, digits, \".-_+\" ...), no spaces", c.Version)
	}
	return nil
}

// Deliverer sends signed webhook deliveries through the SSRF-guarded client
// and classifies the answers. It is safe for concurrent use; call
// CloseIdleConnections when done with it.
type Deliverer struct {
	client *http.Client
	dir    Directory
	now    func() time.Time
}

// New returns a Deliverer for cfg, or an error naming the invalid field.
func New(cfg Config) (*Deliverer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	client := NewClient(ClientConfig{
		Timeout:      cfg.Timeout,
		AllowPrivate: cfg.AllowPrivate,
		UserAgent:    "ratelane/" + cfg.Version,
	})
	return &Deliverer{client: client, dir: cfg.Directory, now: cfg.Now}, nil
}

// CloseIdleConnections closes the pooled keep-alive connections. Deliveries
// may continue afterwards; they open new connections.
func (d *Deliverer) CloseIdleConnections() { d.client.CloseIdleConnections() }

// MessageID returns the webhook-id of a delivery: "msg_" followed by the
// lower-case hex of the first 16 bytes of SHA-256 over the length-prefixed
// event id, subscriber id and big-endian version. It is deterministic, so
// every retry of a delivery carries the same id and receivers that
// deduplicate on webhook-id (as the specification asks) see it once; the
// length prefixes make distinct triples give distinct inputs even when ids
// contain separators. 128 bits keep accidental collisions out of reach.
func MessageID(eventID, subscriberID string, version int64) string {
	h := sha256.New()
	for _, s := range []string{eventID, subscriberID} {
		_ = binary.Write(h, binary.BigEndian, uint64(len(s)))
		h.Write([]byte(s))
	}
	_ = binary.Write(h, binary.BigEndian, version)
	return "msg_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// IdempotencyKey returns the Idempotency-Key header value of a delivery,
// "<event id>:<subscriber id>:<version>", for receivers that deduplicate on
// that header instead of webhook-id. It is the same on every retry.
func IdempotencyKey(eventID, subscriberID string, version int64) string {
	return eventID + ":" + subscriberID + ":" + strconv.FormatInt(version, 10)
}

// Deliver makes one attempt to deliver dl, signed at now, and classifies
// the answer:
//
//	2xx                                  ClassSuccess
//	429; 503 with Retry-After            ClassRateLimited, RetryAfter from the headers
//	408, 5xx, timeout, connection error  ClassTransient
//	410 Gone                             ClassPermanent, ReasonSubscriberGone
//	3xx, other 4xx, status >= 600        ClassPermanent, ReasonPermanentError
//	refused by the SSRF guard            ClassPermanent, "destination address not allowed"
//	invalid delivery (URL, secret, body) ClassPermanent
//
// Rate-limit headers on any answer become Outcome.Hints, so an adaptive
// bucket can slow down before a 429. Outcome.Err is a short phrase and
// never holds response content; the bounded answer is in the Response.
// attempt is the caller's attempt number; it does not change the request,
// which carries the same webhook-id and Idempotency-Key on every attempt.
func (d *Deliverer) Deliver(ctx context.Context, dl Delivery, attempt int, now time.Time) (job.Outcome, Response) {
	req, out, ok := d.request(ctx, dl, now)
	if !ok {
		return out, Response{}
	}
	start := time.Now()
	resp, err := d.client.Do(req)
	if err != nil {
		return classifyError(err), Response{Duration: time.Since(start)}
	}
	r := readResponse(resp)
	r.Duration = time.Since(start)
	return classify(resp.StatusCode, resp.Header, now.Add(r.Duration)), r
}

// request builds the signed request, or the permanent outcome that says
// why the delivery cannot be sent.
func (d *Deliverer) request(ctx context.Context, dl Delivery, now time.Time) (*http.Request, job.Outcome, bool) {
	u, err := url.Parse(dl.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, permanent("invalid subscriber url"), false
	}
	if dl.EventID == "" || dl.SubscriberID == "" {
		return nil, permanent("delivery without event or subscriber id"), false
	}
	if !json.Valid(dl.Body) {
		return nil, permanent("webhook body is not valid JSON"), false
	}
	if ValidateHeaders(dl.Headers) != nil {
		return nil, permanent("invalid subscriber header"), false
	}
	id := MessageID(dl.EventID, dl.SubscriberID, dl.Version)
	sig, err := SignAll(dl.Secrets, id, now, dl.Body)
	switch {
	case errors.Is(err, ErrNoSecret):
		return nil, permanent("no signing secret"), false
	case err != nil:
		return nil, permanent("invalid signing secret"), false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(dl.Body))
	if err != nil {
		return nil, permanent("invalid subscriber url"), false
	}
	for k, v := range dl.Headers {
		if !reserved(k) {
			req.Header.Set(k, v)
		}
	}
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, sig)
	req.Header.Set("Idempotency-Key", IdempotencyKey(dl.EventID, dl.SubscriberID, dl.Version))
	req.Header.Set("Content-Type", "application/json")
	return req, job.Outcome{}, true
}

// ValidateHeaders reports whether static subscriber headers can be sent:
// names must be HTTP tokens and values free of control characters (CR, LF
// and NUL would be header injection), at most 64 headers of at most 8 KiB
// each. Reserved names are valid but ignored at delivery. A directory
// should call it when headers are stored; Deliver refuses a delivery whose
// headers fail it.
func ValidateHeaders(h map[string]string) error {
	if len(h) > 64 {
		return fmt.Errorf("%d static headers; at most 64 are allowed", len(h))
	}
	for k, v := range h {
		if !validToken(k) {
			return fmt.Errorf("header name %q is not an HTTP token", k)
		}
		if len(v) > 8<<10 {
			return fmt.Errorf("header %s: value is %d bytes; at most 8192 are allowed", k, len(v))
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
				return fmt.Errorf("header %s: value contains a control character", k)
			}
		}
	}
	return nil
}

// reservedHeaders are set by Deliver or by net/http and never taken from a
// subscriber's static headers.
var reservedHeaders = map[string]bool{
	"Webhook-Id": true, "Webhook-Timestamp": true, "Webhook-Signature": true,
	"Idempotency-Key": true, "Content-Type": true, "Content-Length": true,
	"User-Agent": true, "Host": true, "Connection": true, "Keep-Alive": true,
	"Transfer-Encoding": true, "Te": true, "Trailer": true, "Upgrade": true,
	"Expect": true, "Proxy-Authorization": true, "Proxy-Connection": true,
}

func reserved(name string) bool { return reservedHeaders[http.CanonicalHeaderKey(name)] }

// validToken reports whether s is a non-empty RFC 9110 token.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alnum && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

func permanent(msg string) job.Outcome {
	return job.Outcome{Class: job.ClassPermanent, Reason: job.ReasonPermanentError, Err: msg}
}
