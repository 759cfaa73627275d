package webhook

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAddressGuard is the decision table of the dial-time check, on the
// resolved address as net.Dialer.Control sees it.
func TestAddressGuard(t *testing.T) {
	t.Parallel()
	tests := []struct {
		network, address string
		forbidden        bool
	}{
		{"tcp4", "127.0.0.1:80", true},       // loopback
		{"tcp4", "127.8.9.10:8080", true},    // loopback /8
		{"tcp6", "[::1]:443", true},          // IPv6 loopback
		{"tcp4", "10.0.0.1:443", true},       // RFC 1918
		{"tcp4", "172.16.0.1:443", true},     // RFC 1918
		{"tcp4", "192.168.1.1:443", true},    // RFC 1918
		{"tcp4", "169.254.169.254:80", true}, // link-local, cloud metadata
		{"tcp4", "0.0.0.0:80", true},         // unspecified
		{"tcp6", "[::]:80", true},            // unspecified
		{"tcp4", "100.64.0.1:443", true},     // CGNAT
		{"tcp4", "224.0.0.1:443", true},      // multicast
		{"tcp6", "[ff02::1]:443", true},      // multicast
		{"tcp6", "[fd00::1]:443", true},      // unique local fc00::/7
		{"tcp6", "[fe80::1]:443", true},      // link-local
		{"tcp6", "[::ffff:127.0.0.1]:80", true},
		{"tcp6", "[::ffff:169.254.169.254]:80", true},
		{"tcp6", "[::ffff:10.0.0.1]:80", true},
		{"tcp6", "[64:ff9b::7f00:1]:80", true}, // NAT64 of 127.0.0.1
		{"udp4", "8.8.8.8:53", true},           // not TCP
		{"tcp4", "8.8.8.8:443", false},
		{"tcp4", "93.184.215.14:8443", false}, // any port
		{"tcp6", "[2606:4700:4700::1111]:443", false},
	}
	deny, allow := addressGuard(false), addressGuard(true)
	for _, tt := range tests {
		err := deny(tt.network, tt.address, nil)
		if got := errors.Is(err, ErrForbiddenAddress); got != tt.forbidden {
			t.Errorf("%s %s: guard error %v, want forbidden=%v", tt.network, tt.address, err, tt.forbidden)
		}
		if err := allow(tt.network, tt.address, nil); err != nil {
			t.Errorf("%s %s with AllowPrivate: %v", tt.network, tt.address, err)
		}
	}
}

// loopbackServer starts an httptest server on 127.0.0.1 and, when the host
// has IPv6 loopback, a second one on [::1]; it returns their ports.
func loopbackServers(t *testing.T, h http.Handler) (v4port, v6port string) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	_, v4port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	if ln, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		srv6 := httptest.NewUnstartedServer(h)
		srv6.Listener.Close()
		srv6.Listener = ln
		srv6.Start()
		t.Cleanup(srv6.Close)
		_, v6port, _ = net.SplitHostPort(ln.Addr().String())
	}
	return v4port, v6port
}

// TestNewClientGuard makes real requests through NewClient: refused at dial
// time by default (for non-loopback targets the refusal comes before any
// packet is sent), served by real loopback servers with AllowPrivate.
func TestNewClientGuard(t *testing.T) {
	t.Parallel()
	v4, v6 := loopbackServers(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	tests := []struct {
		name, url string
		loopback  bool // served by the test servers when allowed
		needV6    bool
	}{
		{"127.0.0.1", "http://127.0.0.1:" + v4, true, false},
		{"::1", "http://[::1]:" + v6, true, true},
		{"::ffff:127.0.0.1", "http://[::ffff:127.0.0.1]:" + v4, true, false},
		{"localhost resolves to loopback", "http://localhost:" + v4, true, false},
		{"0.0.0.0", "http://0.0.0.0:" + v4, true, false}, // Linux connects 0.0.0.0 to the local host
		{"10.0.0.1", "http://10.0.0.1:9/", false, false},
		{"169.254.169.254", "http://169.254.169.254/latest/meta-data/", false, false},
		{"::", "http://[::]:" + v4, false, false},
	}
	deny := NewClient(ClientConfig{Timeout: 5 * time.Second})
	allow := NewClient(ClientConfig{Timeout: 5 * time.Second, AllowPrivate: true})
	t.Cleanup(deny.CloseIdleConnections)
	t.Cleanup(allow.CloseIdleConnections)
	get := func(c *http.Client, url string) (string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.needV6 && v6 == "" {
				t.Skip("no IPv6 loopback")
			}
			if _, err := get(deny, tt.url); !errors.Is(err, ErrForbiddenAddress) {
				t.Errorf("default client: err = %v, want ErrForbiddenAddress", err)
			}
			if !tt.loopback {
				return
			}
			if body, err := get(allow, tt.url); err != nil || body != "ok" {
				t.Errorf("AllowPrivate client: body %q, err %v", body, err)
			}
		})
	}
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
