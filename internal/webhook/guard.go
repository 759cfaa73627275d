package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

// ErrForbiddenAddress is wrapped by the error of a request whose destination
// resolved to an address the SSRF guard refuses (loopback, private,
// link-local, multicast, unspecified, CGNAT, other special-purpose ranges,
// and their IPv4-mapped IPv6 forms). Test with errors.Is: it survives the
// *url.Error and *net.OpError that net/http wraps around it.
var ErrForbiddenAddress = errors.New("destination address not allowed")

// DefaultTimeout is the default limit on one delivery attempt: connection,
// TLS handshake, request, response headers and the bounded body read.
const DefaultTimeout = 15 * time.Second

// ClientConfig configures NewClient. The zero value is a guarded client with
// a 15 s timeout and Go's default User-Agent.
type ClientConfig struct {
	// Timeout bounds a whole request, body read included; 0 or less
	// means DefaultTimeout.
	Timeout time.Duration
	// AllowPrivate switches the address check off, so loopback and private
	// receivers can be reached: for tests, demos and single-tenant
	// on-premises installs. Never set it where tenants choose the URLs.
	AllowPrivate bool
	// UserAgent is sent on every request that does not set its own; empty
	// leaves Go's default.
	UserAgent string
}

// WithDefaults returns c with every unset field given its default; a
// Timeout <= 0 counts as unset.
func (c ClientConfig) WithDefaults() ClientConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// NewClient returns an HTTP client for calling URLs that tenants choose.
// The SSRF guard runs in net.Dialer.Control, that is on the address the
// connection is actually made to, after DNS resolution and for every
// address tried (Happy Eyeballs, retries, new pooled connections), so DNS
// rebinding and hostnames that resolve to private addresses are refused as
// well as literal IPs. Any TCP port is allowed: receivers commonly listen on
// ports other than 80 and 443, and the threat is the address, not the port.
//
// The client never follows redirects (a redirect to an internal address
// would otherwise be one hop away; the 3xx response is returned as is) and
// ignores HTTP(S)_PROXY from the environment, since a proxy would make the
// dial-time check see the proxy's address instead of the destination's.
//
// Call CloseIdleConnections on the client when done with it. The client is
// safe for concurrent use.
func NewClient(cfg ClientConfig) *http.Client {
	cfg = cfg.WithDefaults()
	dialer := &net.Dialer{
		Timeout:   min(cfg.Timeout, 10*time.Second),
		KeepAlive: 30 * time.Second,
		Control:   addressGuard(cfg.AllowPrivate),
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   64, // many subscribers may share one host; keep their connections
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   min(cfg.Timeout, 10*time.Second),
		ExpectContinueTimeout: time.Second,
	}
	var rt http.RoundTripper = tr
	if cfg.UserAgent != "" {
		rt = &userAgent{base: tr, ua: cfg.UserAgent}
	}
	return &http.Client{
		Transport: rt,
		Timeout:   cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// addressGuard returns the net.Dialer.Control function: an ssrf.Guardian
// (tcp4 and tcp6 only, any port, IANA special-purpose ranges denied, IPv6
// outside global unicast denied, which covers fc00::/7, fe80::/10, ff00::/8,
// :: and ::ffff:0:0/96) whose refusals wrap ErrForbiddenAddress, so callers
// need not know the ssrf package. With allowPrivate it allows every address.
func addressGuard(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	if allowPrivate {
		return func(string, string, syscall.RawConn) error { return nil }
	}
	g := ssrf.New(ssrf.WithAnyPort())
	return func(network, address string, c syscall.RawConn) error {
		if err := g.Safe(network, address, c); err != nil {
			return fmt.Errorf("%w: %w", ErrForbiddenAddress, err)
		}
		return nil
	}
}

// userAgent sets a default User-Agent on requests that have none.
type userAgent struct {
	base *http.Transport
	ua   string
}

func (u *userAgent) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("User-Agent") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("User-Agent", u.ua)
	}
	return u.base.RoundTrip(r)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// wrapped transport.
func (u *userAgent) CloseIdleConnections() { u.base.CloseIdleConnections() }
