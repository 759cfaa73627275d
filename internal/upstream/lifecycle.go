package upstream

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Listener is the lifecycle the simulators share (this package's [Server]
// and batchsim's): a listener on loopback, its base URL, the serve
// goroutine, and a Close that is idempotent and returns only when no
// handler is running any more, so a test that closes a simulator knows
// nothing still writes to it. Embed it: [Listen], then [Listener.Serve]
// once the embedding server, which its handler uses, is complete.
type Listener struct {
	ln  net.Listener
	url string

	lifeMu    sync.Mutex // orders handler entry and Serve against Close
	srv       *http.Server
	done      chan struct{}
	handlers  sync.WaitGroup
	serving   sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Listen listens on addr (host:port; port 0 picks a free one). Nothing is
// served until [Listener.Serve]. The error is the net.Listen error, for the
// caller to wrap with its own name.
func Listen(addr string) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return ListenOn(ln), nil
}

// ListenOn is Listen on a listener the caller made, such as a test's
// in-memory one (testkit.Pipes), which lets a simulator run inside a
// testing/synctest bubble. Close closes ln.
func ListenOn(ln net.Listener) *Listener {
	return &Listener{ln: ln, url: "http://" + ln.Addr().String(), done: make(chan struct{})}
}

// Serve serves h until [Listener.Close]; call it once. A request that
// arrives once Close has begun is answered 503 without reaching h.
func (l *Listener) Serve(h http.Handler) {
	l.lifeMu.Lock()
	defer l.lifeMu.Unlock()
	select {
	case <-l.done:
		return // closed before serving: Close closed the listener
	default:
	}
	l.srv = &http.Server{Handler: l.track(h), ReadHeaderTimeout: 10 * time.Second}
	l.serving.Add(1)
	go func() {
		defer l.serving.Done()
		_ = l.srv.Serve(l.ln) // always http.ErrServerClosed after Close
	}()
}

// URL returns the base URL, "http://127.0.0.1:<port>", without a trailing slash.
func (l *Listener) URL() string { return l.url }

// Done returns a channel closed when Close begins, for a handler that
// simulates latency to stop waiting.
func (l *Listener) Done() <-chan struct{} { return l.done }

// Close stops accepting requests, closes open connections and waits for
// all handlers and the serve goroutine to return. It is idempotent and
// safe for concurrent use.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.lifeMu.Lock()
		close(l.done)
		srv := l.srv
		l.lifeMu.Unlock()
		if srv != nil {
			l.closeErr = srv.Close()
		} else {
			l.closeErr = l.ln.Close()
		}
		l.handlers.Wait()
		l.serving.Wait()
	})
	return l.closeErr
}

// track counts in-flight handlers so Close can wait for them, and refuses
// requests once Close has begun (a handler registered after Wait started
// would race with it).
func (l *Listener) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.enter() {
			http.Error(w, "simulator closed", http.StatusServiceUnavailable)
			return
		}
		defer l.handlers.Done()
		h.ServeHTTP(w, r)
	})
}

func (l *Listener) enter() bool {
	l.lifeMu.Lock()
	defer l.lifeMu.Unlock()
	select {
	case <-l.done:
		return false
	default:
		l.handlers.Add(1)
		return true
	}
}
