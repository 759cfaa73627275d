package testkit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
)

// TestPipes: an HTTP server and client on Pipes run inside a synctest
// bubble, and a handler's ten-second wait costs exactly ten seconds of the
// bubble's clock (on a loopback socket the bubble could not advance while
// the client waits for the answer). Once closed, Dial and Accept fail.
func TestPipes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pipes := testkit.NewPipes()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			time.Sleep(10 * time.Second)
			io.WriteString(w, "late")
		})}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(pipes) }()
		client, transport := pipes.Client()
		start := time.Now()
		resp, err := client.Get("http://" + pipes.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "late" || time.Since(start) != 10*time.Second {
			t.Fatalf("got %q after %v, want \"late\" after exactly 10s", body, time.Since(start))
		}
		transport.CloseIdleConnections()
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Fatalf("Serve = %v", err)
		}
		if _, err := pipes.Dial(context.Background(), "tcp", "pipe"); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Dial after Close = %v, want net.ErrClosed", err)
		}
		if _, err := pipes.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
		}
	})
}
