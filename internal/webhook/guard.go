package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

// ErrForbiddenAddress is wrapped by the error of a request whose destination
// resolved to an address the SSRF guard refuses (loopback, private,
// link-local, cloud metadata, multicast, unspecified, CGNAT, other
// special-purpose ranges, and their IPv4-mapped IPv6 forms; see
// addressGuard for what ClientConfig.AllowPrivate opens). Test with errors.Is: it survives the
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
	// AllowPrivate lets loopback, RFC 1918 and unique local IPv6 receivers
	// be reached: for tests, demos and single-tenant on-premises installs.
	// Link-local addresses and cloud metadata endpoints stay refused (see
	// addressGuard). Never set it where tenants choose the URLs.
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
// need not know the ssrf package.
//
// With allowPrivate it also lets through the ranges of privateTargets
// (RFC 1918, loopback, unique local IPv6), in their IPv4-mapped IPv6 forms
// too. Link-local addresses and the cloud metadata endpoints of
// neverTargets stay refused in either mode: they are where the credentials
// of the machine ratelane runs on live, and no self-hosted receiver needs
// them. Everything else the guardian refuses (0.0.0.0/8 and ::, CGNAT,
// multicast, documentation, NAT64 and 6to4 forms) stays refused too.
func addressGuard(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	g := ssrf.New(ssrf.WithAnyPort())
	return func(network, address string, c syscall.RawConn) error {
		if network != "tcp4" && network != "tcp6" {
			return fmt.Errorf("%w: network %s is not tcp4 or tcp6", ErrForbiddenAddress, network)
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: cannot parse %q", ErrForbiddenAddress, address)
		}
		// netip.Prefix.Contains is false for an address with a zone
		// (fe80::1%eth0) or in IPv4-mapped form: compare the plain address,
		// or the deny lists below would fail open.
		ip := ap.Addr().WithZone("").Unmap()
		if inAny(neverTargets, ip) {
			return fmt.Errorf("%w: %s is a link-local or cloud metadata address, never a webhook target", ErrForbiddenAddress, ip)
		}
		if allowPrivate && inAny(privateTargets, ip) {
			return nil
		}
		if err := g.Safe(network, address, c); err != nil {
			return fmt.Errorf("%w: %w", ErrForbiddenAddress, err)
		}
		return nil
	}
}

// neverTargets are refused even with AllowPrivate: link-local ranges (where
// AWS, GCP, Azure and DigitalOcean serve instance metadata and credentials at
// 169.254.169.254, and ECS at 169.254.170.2) and the metadata endpoints
// outside them: AWS's IPv6 fd00:ec2::254 (inside fc00::/7, which
// AllowPrivate otherwise opens), Alibaba Cloud's 100.100.100.200 and Oracle
// Cloud's 192.0.0.192.
var neverTargets = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("100.100.100.200/32"),
	netip.MustParsePrefix("192.0.0.192/32"),
}

// privateTargets are what AllowPrivate opens: RFC 1918, IPv4 and IPv6
// loopback (the demo and tests deliver to loopback receivers) and unique
// local IPv6 fc00::/7.
var privateTargets = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fc00::/7"),
}

// neverHost reports why a subscriber URL's host can never be delivered to,
// whatever AllowPrivate says, or "" when it may be: a literal address the
// guard always refuses (link-local, cloud metadata, unspecified), or a
// numeric spelling that is not a canonical IP address ("2130706433",
// "0x7f000001", "0177.0.0.1", "127.1"). No real hostname has an all-numeric
// last label, and resolvers that accept those spellings read them as
// addresses, so refusing them at create time costs nothing and closes a
// bypass family early. Everything else is decided at dial time.
func neverHost(host string) string {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.WithZone("").Unmap()
		if inAny(neverTargets, ip) || ip.IsUnspecified() {
			return fmt.Sprintf("%s is a link-local, cloud metadata or unspecified address, never a webhook target", ip)
		}
		return ""
	}
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	last := strings.ToLower(labels[len(labels)-1])
	if last != "" && strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return fmt.Sprintf("host %q is a numeric address in a non-canonical form; write it as a dotted-quad IPv4 or an IPv6 address", host)
	}
	return ""
}

func inAny(prefixes []netip.Prefix, ip netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
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
