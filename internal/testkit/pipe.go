package testkit

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// Pipes is an in-memory network for HTTP between a test's client and a
// server it starts: a [net.Listener] whose connections are [net.Pipe]
// pairs, one made per Dial. A goroutine blocked on a pipe is durably
// blocked in a testing/synctest bubble, as one blocked on a loopback
// socket is not, so a server and its clients on Pipes can run in a
// bubble and its fake clock advances whenever they all wait: latencies,
// rate windows and retry delays cost no real time and do not stretch
// with the machine's load. Make it inside the bubble that uses it. It is
// safe for concurrent use.
type Pipes struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

// NewPipes returns an open in-memory network.
func NewPipes() *Pipes {
	return &Pipes{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next Dial and returns the server's end of its
// pipe, or net.ErrClosed once Close is called.
func (p *Pipes) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Dial; connections already made stay open until
// their ends close them. It is idempotent.
func (p *Pipes) Close() error {
	p.closeOnce.Do(func() { close(p.done) })
	return nil
}

// Addr returns a placeholder address: every Dial reaches this listener,
// whatever address it names.
func (p *Pipes) Addr() net.Addr { return pipeAddr{} }

// Dial makes a pipe, hands its server end to Accept and returns the
// client end; it has the shape of [net.Dialer.DialContext], for an
// [http.Transport]. It fails when ctx ends or the listener is closed
// before Accept takes the connection.
func (p *Pipes) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case p.conns <- server:
		return client, nil
	case <-ctx.Done():
		server.Close()
		client.Close()
		return nil, ctx.Err()
	case <-p.done:
		server.Close()
		client.Close()
		return nil, net.ErrClosed
	}
}

// Client returns an HTTP client whose every request goes over p, and the
// transport, whose idle connections the test closes before the bubble
// ends (they hold goroutines).
func (p *Pipes) Client() (*http.Client, *http.Transport) {
	tr := &http.Transport{DialContext: p.Dial}
	return &http.Client{Transport: tr}, tr
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
