package webhook

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/testkit"
)

// TestAddressGuard is the decision table of the dial-time check, on the
// resolved address as net.Dialer.Control sees it, without and with
// AllowPrivate. Link-local and cloud metadata addresses are refused in both
// modes, in every form (IPv4-mapped, zoned, NAT64, 6to4).
func TestAddressGuard(t *testing.T) {
	t.Parallel()
	const (
		refused = iota // in both modes
		private        // refused by default, allowed with AllowPrivate
		public         // allowed in both modes
	)
	tests := []struct {
		network, address string
		want             int
	}{
		{"tcp4", "127.0.0.1:80", private},    // loopback
		{"tcp4", "127.8.9.10:8080", private}, // loopback /8
		{"tcp6", "[::1]:443", private},       // IPv6 loopback
		{"tcp4", "10.0.0.1:443", private},    // RFC 1918
		{"tcp4", "172.16.0.1:443", private},  // RFC 1918
		{"tcp4", "192.168.1.1:443", private}, // RFC 1918
		{"tcp6", "[fd00::1]:443", private},   // unique local fc00::/7
		{"tcp6", "[fc00::1]:443", private},   // unique local fc00::/7
		{"tcp6", "[::ffff:127.0.0.1]:80", private},
		{"tcp6", "[::ffff:10.0.0.1]:80", private},
		{"tcp4", "169.254.169.254:80", refused}, // AWS, GCP, Azure metadata
		{"tcp4", "169.254.170.2:80", refused},   // ECS task metadata
		{"tcp4", "169.254.0.1:80", refused},     // link-local
		{"tcp6", "[fd00:ec2::254]:80", refused}, // AWS IPv6 metadata, inside fc00::/7
		{"tcp4", "100.100.100.200:80", refused}, // Alibaba Cloud metadata
		{"tcp4", "192.0.0.192:80", refused},     // Oracle Cloud metadata
		{"tcp6", "[fe80::1]:443", refused},      // link-local
		{"tcp6", "[fe80::1%lo]:443", refused},   // zoned link-local
		{"tcp6", "[fe80::a9fe:a9fe%eth0]:80", refused},
		{"tcp6", "[::ffff:169.254.169.254]:80", refused},
		{"tcp6", "[::ffff:100.100.100.200]:80", refused},
		{"tcp6", "[::ffff:a9fe:a9fe]:80", refused},     // the same, hex
		{"tcp6", "[64:ff9b::a9fe:a9fe]:80", refused},   // NAT64 of 169.254.169.254
		{"tcp6", "[2002:a9fe:a9fe::1]:80", refused},    // 6to4 of 169.254.169.254
		{"tcp6", "[::a9fe:a9fe]:80", refused},          // IPv4-compatible form
		{"tcp6", "[64:ff9b::7f00:1]:80", refused},      // NAT64 of 127.0.0.1
		{"tcp4", "0.0.0.0:80", refused},                // unspecified: Linux connects it to the local host
		{"tcp6", "[::]:80", refused},                   // unspecified
		{"tcp6", "[::ffff:0.0.0.0]:80", refused},       // unspecified, mapped
		{"tcp4", "100.64.0.1:443", refused},            // CGNAT, not RFC 1918
		{"tcp4", "224.0.0.1:443", refused},             // multicast
		{"tcp6", "[ff02::1]:443", refused},             // multicast
		{"tcp4", "255.255.255.255:443", refused},       // broadcast
		{"tcp4", "192.0.2.1:443", refused},             // documentation
		{"udp4", "8.8.8.8:53", refused},                // not TCP
		{"udp4", "10.0.0.1:53", refused},               // not TCP, even when private
		{"tcp4", "8.8.8.8:443", public},                // public
		{"tcp4", "93.184.215.14:8443", public},         // any port
		{"tcp6", "[2606:4700:4700::1111]:443", public}, // public IPv6
		{"tcp6", "[::ffff:8.8.8.8]:443", refused},      // mapped public: the guardian refuses the form
	}
	deny, allow := addressGuard(false), addressGuard(true)
	for _, tt := range tests {
		err := deny(tt.network, tt.address, nil)
		if got, want := errors.Is(err, ErrForbiddenAddress), tt.want != public; got != want {
			t.Errorf("%s %s: guard error %v, want forbidden=%v", tt.network, tt.address, err, want)
		}
		err = allow(tt.network, tt.address, nil)
		if got, want := errors.Is(err, ErrForbiddenAddress), tt.want == refused; got != want {
			t.Errorf("%s %s with AllowPrivate: guard error %v, want forbidden=%v", tt.network, tt.address, err, want)
		}
	}
}

// countingListener counts the connections a test server accepted: a
// connection the guard refused at dial time never reaches it.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// loopbackServers starts an HTTP server on 127.0.0.1 and, when the host has
// IPv6 loopback, a second one on [::1], both answering "ok". It returns
// their ports and a function reporting the connections both accepted.
func loopbackServers(t *testing.T) (v4port, v6port string, accepted func() int64) {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	var lns []*countingListener
	start := func(network, addr string) string {
		ln, err := net.Listen(network, addr)
		if err != nil {
			return ""
		}
		cl := &countingListener{Listener: ln}
		lns = append(lns, cl)
		srv := httptest.NewUnstartedServer(h)
		srv.Listener.Close()
		srv.Listener = cl
		srv.Start()
		t.Cleanup(srv.Close)
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		return port
	}
	if v4port = start("tcp4", "127.0.0.1:0"); v4port == "" {
		t.Fatal("no IPv4 loopback")
	}
	v6port = start("tcp6", "[::1]:0")
	return v4port, v6port, func() int64 {
		var n int64
		for _, l := range lns {
			n += l.accepted.Load()
		}
		return n
	}
}

// TestNewClientGuard is T9's bypass table (RELIABILITY.md appendix 3.3)
// through NewClient, without and with AllowPrivate, against real loopback
// servers. Where the guard refuses, the error wraps ErrForbiddenAddress and
// the loopback servers accept no connection: the refusal happened at dial
// time, before any SYN. Where AllowPrivate opens a loopback target, the
// same servers answer. Metadata and link-local targets cannot be served
// here; for them ErrForbiddenAddress is the proof, since a dial the guard
// let through fails differently (timeout, unreachable).
func TestNewClientGuard(t *testing.T) {
	t.Parallel()
	const (
		refused    = iota // ErrForbiddenAddress
		served            // the loopback server answers "ok"
		dialed            // the guard let it through; no server there
		notRefused        // odd spellings the resolver may not know: any error but a served answer
	)
	tests := []struct {
		host        string // the URL's host, as a producer would write it
		port        string // "v4" or "v6": which loopback server's port
		def, opened int    // outcome by default and with AllowPrivate
	}{
		{"127.0.0.1", "v4", refused, served},
		{"[::1]", "v6", refused, served},
		{"[::ffff:127.0.0.1]", "v4", refused, served},
		{"localhost", "v4", refused, served},
		{"0.0.0.0", "v4", refused, refused}, // Linux would connect it to 127.0.0.1
		{"[::]", "v6", refused, refused},    // Linux would connect it to ::1
		{"[::ffff:0.0.0.0]", "v4", refused, refused},
		{"[64:ff9b::7f00:1]", "v4", refused, refused},
		{"2130706433", "v4", notRefused, notRefused}, // 127.0.0.1 as one decimal
		{"0x7f000001", "v4", notRefused, notRefused},
		{"0177.0.0.1", "v4", notRefused, notRefused},
		{"127.1", "v4", notRefused, notRefused},
		{"169.254.169.254", "v4", refused, refused},
		{"[::ffff:169.254.169.254]", "v4", refused, refused},
		{"[fd00:ec2::254]", "v4", refused, refused},
		{"100.100.100.200", "v4", refused, refused},
		{"[fe80::1%25lo]", "v6", refused, refused},
		{"2852039166", "v4", notRefused, notRefused}, // 169.254.169.254 as one decimal
		{"100.64.0.1", "v4", refused, refused},
		{"10.0.0.1", "v4", refused, dialed},
		{"[fd12:3456::1]", "v4", refused, dialed},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			t.Parallel()
			v4, v6, accepted := loopbackServers(t)
			port := v4
			if tt.port == "v6" {
				if v6 == "" {
					t.Skip("no IPv6 loopback")
				}
				port = v6
			}
			url := "http://" + tt.host + ":" + port + "/"
			for _, mode := range []struct {
				allow bool
				want  int
			}{{false, tt.def}, {true, tt.opened}} {
				before := accepted()
				// A short timeout where an error is the answer: a "dialed"
				// target (no server there) may hang until it; the refused
				// ones fail at once. A served request gets the suite's
				// generous wait: it is answered in microseconds, but a
				// loaded machine under -race can stall past 500 ms.
				timeout := 500 * time.Millisecond
				if mode.want == served {
					timeout = testkit.Timeout
				}
				c := NewClient(ClientConfig{Timeout: timeout, AllowPrivate: mode.allow})
				body, err := get(c, url)
				c.CloseIdleConnections()
				n := accepted() - before
				switch mode.want {
				case refused:
					if !errors.Is(err, ErrForbiddenAddress) || n != 0 {
						t.Errorf("AllowPrivate=%v: err %v, %d connections accepted; want ErrForbiddenAddress and 0", mode.allow, err, n)
					}
				case served:
					if err != nil || body != "ok" || n != 1 {
						t.Errorf("AllowPrivate=%v: body %q, err %v, %d connections accepted; want ok from 1", mode.allow, body, err, n)
					}
				case dialed:
					if err == nil || errors.Is(err, ErrForbiddenAddress) {
						t.Errorf("AllowPrivate=%v: err %v; want a dial error other than ErrForbiddenAddress", mode.allow, err)
					}
				case notRefused:
					if !mode.allow && (err == nil || n != 0) {
						t.Errorf("AllowPrivate=%v: body %q, err %v, %d connections accepted; want an error and 0", mode.allow, body, err, n)
					}
				}
			}
		})
	}
}

// get fetches url with c and returns the body.
func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestNewClientNoRedirectNoProxy(t *testing.T) {
	t.Parallel()
	followed := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/target" {
			followed <- struct{}{}
			return
		}
		if got := r.Header.Get("User-Agent"); got != "ratelane/test" {
			t.Errorf("User-Agent = %q", got)
		}
		http.Redirect(w, r, "/target", http.StatusFound)
	}))
	defer srv.Close()
	c := NewClient(ClientConfig{AllowPrivate: true, UserAgent: "ratelane/test"})
	defer c.CloseIdleConnections()
	if c.Timeout != DefaultTimeout {
		t.Errorf("Timeout = %v, want %v", c.Timeout, DefaultTimeout)
	}
	// An environment proxy would make the guard check the proxy's address
	// instead of the destination's. (Go skips proxies for loopback anyway,
	// so this is checked on the transport rather than over the wire.)
	if tr := c.Transport.(*userAgent).base; tr.Proxy != nil {
		t.Error("transport has a Proxy function")
	}
	resp, err := c.Get(srv.URL + "/start")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || !strings.HasSuffix(resp.Header.Get("Location"), "/target") {
		t.Errorf("status %d Location %q, want the 302 itself", resp.StatusCode, resp.Header.Get("Location"))
	}
	select {
	case <-followed:
		t.Error("redirect was followed")
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if _, err := c.Do(req); err == nil {
		t.Error("cancelled request succeeded")
	}
}

// TestNeverHost: subscriber URLs whose host can never be delivered to are
// refused when the subscriber is created (422), whatever the opt-in says;
// the rest is left to the dial-time guard.
func TestNeverHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url     string
		refused bool
	}{
		{"http://169.254.169.254/latest/meta-data/", true},
		{"http://[::ffff:169.254.169.254]/", true},
		{"http://[fd00:ec2::254]/", true},
		{"http://100.100.100.200/", true},
		{"http://[fe80::1%25eth0]:8080/", true},
		{"http://0.0.0.0:8080/", true},
		{"http://[::]/", true},
		{"http://2130706433/", true},      // 127.0.0.1
		{"http://2852039166/", true},      // 169.254.169.254
		{"http://0x7f000001/", true},      // 127.0.0.1
		{"http://0177.0.0.1/", true},      // 127.0.0.1, octal
		{"http://127.1/", true},           // 127.0.0.1, short form
		{"http://0xa9.254.0.1/", true},    // mixed hex
		{"http://127.0.0.1:8080/", false}, // loopback: the dial-time guard decides (opt-in)
		{"http://10.1.2.3/", false},
		{"http://[::1]/", false},
		{"https://hooks.example.com/x", false},
		{"https://hooks.example.com./x", false},
		{"https://1password.com/", false},
		{"https://a.b2/", false},
	} {
		spec := SubscriberSpec{ID: "s1", URL: tc.url, Topics: []string{"t"}}
		err := spec.validate()
		var ve *job.ValidationError
		refused := errors.As(err, &ve) && slices.ContainsFunc(ve.Fields, func(f job.FieldError) bool { return f.Field == "url" })
		if refused != tc.refused {
			t.Errorf("%s: url refused = %v (%v), want %v", tc.url, refused, err, tc.refused)
		}
	}
}
