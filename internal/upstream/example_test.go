package upstream_test

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/ratelane/ratelane/internal/upstream"
)

// A webhook subscriber that accepts one delivery per 10 seconds answers
// the second delivery with 429 and Retry-After in seconds.
func ExampleNew() {
	srv, err := upstream.New(upstream.Config{Routes: map[string]upstream.RouteConfig{
		"store_17": {Rate: 0.1, Burst: 1, OverLimit: upstream.OverLimit429Seconds},
	}})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for range 2 {
		resp, err := client.Post(srv.RouteURL("store_17"), "application/json", strings.NewReader(`{"type":"ping"}`))
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("%d Retry-After=%q\n", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	r := srv.Stats().Routes["store_17"]
	fmt.Println("accepted", r.Accepted, "rate-limited", r.RateLimited)
	// Output:
	// 200 Retry-After=""
	// 429 Retry-After="10"
	// accepted 1 rate-limited 1
}
