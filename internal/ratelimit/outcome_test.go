package ratelimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratelane/ratelane/rltype"
)

func TestOutcome(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	tests := []struct {
		name   string
		status int
		h      http.Header
		class  rltype.Class
		delay  time.Duration
		source string
		hints  int
	}{
		{"ok with quota", 200, hdr("x-ratelimit-limit-requests", "100", "x-ratelimit-remaining-requests", "3"), rltype.ClassSuccess, 0, "", 1},
		{"no content", 204, nil, rltype.ClassSuccess, 0, "", 0},
		{"429 seconds", 429, hdr("Retry-After", "7"), rltype.ClassRateLimited, 7 * time.Second, "retry-after", 0},
		{"429 date", 429, hdr("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat)), rltype.ClassRateLimited, 90 * time.Second, "retry-after", 0},
		{"429 ms", 429, hdr("retry-after-ms", "250"), rltype.ClassRateLimited, 250 * time.Millisecond, "retry-after-ms", 0},
		{"429 bare", 429, nil, rltype.ClassRateLimited, 0, "", 0},
		{"503 with delay", 503, hdr("Retry-After", "2"), rltype.ClassRateLimited, 2 * time.Second, "retry-after", 0},
		{"503 bare", 503, nil, rltype.ClassTransient, 0, "", 0},
		{"500", 500, nil, rltype.ClassTransient, 0, "", 0},
		{"408", 408, nil, rltype.ClassTransient, 0, "", 0},
		{"400", 400, nil, rltype.ClassPermanent, 0, "", 0},
		{"401", 401, hdr("Retry-After", "5"), rltype.ClassPermanent, 0, "", 0},
	}
	for _, tt := range tests {
		o := Outcome(tt.status, tt.h, now)
		if o.Class != tt.class || o.RetryAfter != tt.delay || o.RetrySource != tt.source || len(o.Hints) != tt.hints || o.Status != tt.status {
			t.Errorf("%s: got class %s delay %v source %q hints %d status %d; want %s %v %q %d",
				tt.name, o.Class, o.RetryAfter, o.RetrySource, len(o.Hints), o.Status, tt.class, tt.delay, tt.source, tt.hints)
		}
		if (o.Class == rltype.ClassSuccess) != (o.Err == "") {
			t.Errorf("%s: Err %q", tt.name, o.Err)
		}
	}
}

// TestNoHeadersNoHints pins what the HTTP success routes rely on to skip
// parsing when a worker sends no headers: no headers give no hints, for
// any scope and clock.
func TestNoHeadersNoHints(t *testing.T) {
	for _, h := range []http.Header{nil, {}} {
		for _, now := range []time.Time{{}, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} {
			for _, scope := range []string{"", "k"} {
				if got := Hints(Parse(h, now), scope); len(got) != 0 {
					t.Errorf("Hints(Parse(%v, %v), %q) = %v, want none", h, now, scope, got)
				}
			}
		}
	}
}
