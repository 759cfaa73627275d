package upstream

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelane/ratelane/internal/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is the per-test setup: a running simulator and a client whose
// connections are closed with it.
type bundle struct {
	srv    *Server
	client *http.Client
}

func setup(t *testing.T, cfg Config) *bundle {
	t.Helper()
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &bundle{srv: srv, client: testkit.ServerClient(t, srv, 10*time.Second)}
}

// post sends body to url with hdr and returns the response and its body.
func (b *bundle) post(t *testing.T, url, body string, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, got
}

// hook posts a webhook delivery with an optional webhook-id.
func (b *bundle) hook(t *testing.T, route, id string) *http.Response {
	t.Helper()
	hdr := http.Header{}
	if id != "" {
		hdr.Set("webhook-id", id)
	}
	resp, _ := b.post(t, b.srv.RouteURL(route), `{"type":"ping"}`, hdr)
	return resp
}

// statuses posts n webhook deliveries one at a time and returns the statuses.
func (b *bundle) statuses(t *testing.T, route string, n int) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		out[i] = b.hook(t, route, "").StatusCode
	}
	return out
}

func count(statuses []int, status int) int {
	n := 0
	for _, s := range statuses {
		if s == status {
			n++
		}
	}
	return n
}

// newFakeClock returns a clock standing still, so limiter behaviour over
// HTTP is tested by moving time rather than sleeping.
func newFakeClock() *testkit.Clock {
	return testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
}
