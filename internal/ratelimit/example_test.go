package ratelimit_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratelane/ratelane/internal/ratelimit"
)

// A 429 from an OpenAI-compatible upstream: the engine asks Delay when to
// retry and records the source in the attempt history.
func ExampleInfo_Delay() {
	h := http.Header{}
	h.Set("retry-after", "3")
	h.Set("retry-after-ms", "2500")
	h.Set("x-ratelimit-remaining-tokens", "0")
	h.Set("x-ratelimit-reset-tokens", "2.5s")

	info := ratelimit.Parse(h, time.Now())
	d, source, ok := info.Delay()
	fmt.Println(d, source, ok, d > ratelimit.MaxDelay)
	// Output: 2.5s retry-after-ms true false
}

func ExampleParseRetryAfter() {
	now := time.Date(1994, time.November, 6, 8, 49, 0, 0, time.UTC)
	for _, v := range []string{"120", "1.5", "Sun, 06 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:00:00 GMT", "-1"} {
		d, ok := ratelimit.ParseRetryAfter(v, now)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 1.5s true
	// 37s true
	// 0s true
	// 0s false
}
