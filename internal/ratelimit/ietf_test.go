package ratelimit

import (
	"net/http"
	"reflect"
	"testing"
	"time"
)

// pol builds an expected Policy.
func pol(name string, quota int64, unit string, w time.Duration, pk string, remaining int64, reset time.Duration, src string) Policy {
	return Policy{Name: name, Quota: quota, QuotaUnit: unit, Window: w, PartitionKey: pk, Remaining: remaining, Reset: reset, resetSrc: src}
}

func TestParsePolicies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		h    http.Header
		want []Policy
	}{
		// draft-ietf-httpapi-ratelimit-headers-10 §3 (RateLimit-Policy):
		// several named policies with q and w.
		{
			"current: policies only",
			hdr("RateLimit-Policy", `"burst";q=100;w=60,"daily";q=1000;w=86400`),
			[]Policy{
				pol("burst", 100, "", time.Minute, "", -1, 0, ""),
				pol("daily", 1000, "", 24*time.Hour, "", -1, 0, ""),
			},
		},
		// draft-10 §4 (RateLimit): "default";r=50;t=30, with its policy.
		{
			"current: policy and state merged",
			hdr("RateLimit-Policy", `"default";q=100;w=60`, "RateLimit", `"default";r=50;t=30`),
			[]Policy{pol("default", 100, "", time.Minute, "", 50, 30*time.Second, "ratelimit")},
		},
		// draft-10 syntax for qu (quota unit) and pk (partition key, a
		// byte sequence); values illustrative.
		{
			"current: qu and pk",
			hdr(
				"RateLimit-Policy", `"peruser";q=65535;qu="content-bytes";w=10;pk=:cHJvZ3JhbW1lcg==:`,
				"RateLimit", `"peruser";r=0;t=7;pk=:cHJvZ3JhbW1lcg==:`,
			),
			[]Policy{pol("peruser", 65535, "content-bytes", 10*time.Second, "programmer", 0, 7*time.Second, "ratelimit")},
		},
		{
			"current: state without policy, several members, multiple lines",
			hdr("RateLimit", `"a";r=1;t=2`, "RateLimit", `b;r=3`),
			[]Policy{
				pol("a", -1, "", 0, "", 1, 2*time.Second, "ratelimit"),
				pol("b", -1, "", 0, "", 3, 0, ""),
			},
		},
		{
			"current: unknown parameters ignored, negative values unknown",
			hdr("RateLimit-Policy", `"x";q=-1;w=-5;foo=bar;qu=?1`, "RateLimit", `"x";r=-1;t=-1`),
			[]Policy{pol("x", -1, "", 0, "", -1, 0, "")},
		},
		// draft-07: the combined RateLimit dictionary, with integer
		// RateLimit-Policy items.
		{
			"draft 07",
			hdr("RateLimit-Policy", "10;w=1, 50;w=60", "RateLimit", "limit=10, remaining=1, reset=7"),
			[]Policy{
				pol("", 10, "", time.Second, "", 1, 7*time.Second, "ratelimit"),
				pol("", 50, "", time.Minute, "", -1, 0, ""),
			},
		},
		{
			"draft 07: state for the second policy",
			hdr("RateLimit-Policy", "10;w=1, 50;w=60", "RateLimit", "limit=50, remaining=0, reset=40"),
			[]Policy{
				pol("", 10, "", time.Second, "", -1, 0, ""),
				pol("", 50, "", time.Minute, "", 0, 40*time.Second, "ratelimit"),
			},
		},
		// drafts 00-06: separate fields; RateLimit-Limit may list policies
		// after the current limit.
		{
			"drafts 00-06",
			hdr("RateLimit-Limit", "100, 100;w=60", "RateLimit-Remaining", "50", "RateLimit-Reset", "50"),
			[]Policy{pol("", 100, "", 0, "", 50, 50*time.Second, "ratelimit-reset")},
		},
		{
			"drafts 00-06: reset as HTTP-date (tolerated)",
			hdr("RateLimit-Remaining", "0", "RateLimit-Reset", "Wed, 01 May 2024 12:00:09 GMT"),
			[]Policy{pol("", -1, "", 0, "", 0, 9*time.Second, "ratelimit-reset")},
		},
		{
			"drafts 00-06: decimal reset (tolerated)",
			hdr("RateLimit-Reset", "1.5"),
			[]Policy{pol("", -1, "", 0, "", -1, 1500*time.Millisecond, "ratelimit-reset")},
		},
		{"nothing", hdr("RateLimit-Reset", "soon", "RateLimit-Limit", "-3"), nil},
		{"malformed policy field ignored as a whole", hdr("RateLimit-Policy", `"a";q=1, "b";q=`), nil},
		{"inner lists ignored", hdr("RateLimit-Policy", `("a" "b");q=1`), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Parse(tt.h, now).Policies; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Policies =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestParsePoliciesUnixReset(t *testing.T) {
	t.Parallel()
	// GitLab's documented example sends a Unix time in RateLimit-Reset
	// (1609844400 = 2021-01-05T11:00:00Z), although the drafts say
	// delay-seconds.
	h := hdr("RateLimit-Limit", "60", "RateLimit-Remaining", "0", "RateLimit-Reset", "1609844400")
	at := time.Date(2021, time.January, 5, 10, 59, 0, 0, time.UTC)
	want := []Policy{pol("", 60, "", 0, "", 0, time.Minute, "ratelimit-reset")}
	if got := Parse(h, at).Policies; !reflect.DeepEqual(got, want) {
		t.Errorf("Policies =\n%+v\nwant\n%+v", got, want)
	}
	// Past Unix time: reset 0, not negative.
	if got := Parse(h, at.Add(time.Hour)).Policies[0].Reset; got != 0 {
		t.Errorf("past Unix reset = %v; want 0", got)
	}
}
