package ratelimit

import (
	"testing"
	"time"
)

// rfcNow is shortly before the HTTP-date example of RFC 9110 §5.6.7
// ("Sun, 06 Nov 1994 08:49:37 GMT").
var rfcNow = time.Date(1994, time.November, 6, 8, 49, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  time.Duration
		ok    bool
	}{
		// RFC 9110 §10.2.3 example: "Retry-After: 120".
		{"delay-seconds", "120", 120 * time.Second, true},
		{"zero", "0", 0, true},
		{"leading zeros", "007", 7 * time.Second, true},
		{"surrounding OWS", " \t5 ", 5 * time.Second, true},
		// Tolerance: fractional delay-seconds, as several providers send.
		{"decimal", "1.5", 1500 * time.Millisecond, true},
		{"decimal small", "0.001", time.Millisecond, true},
		{"decimal truncated past ns", "1.0000000019", time.Second + time.Nanosecond, true},
		{"huge saturates", "99999999999999999999", maxDuration, true},
		{"huge decimal saturates", "9223372036.9", maxDuration, true},
		{"more than 7 days is reported", "864000", 240 * time.Hour, true},

		// RFC 9110 §5.6.7: the three HTTP-date formats recipients accept.
		{"IMF-fixdate", "Sun, 06 Nov 1994 08:49:37 GMT", 37 * time.Second, true},
		{"RFC 850", "Sunday, 06-Nov-94 08:49:37 GMT", 37 * time.Second, true},
		{"asctime", "Sun Nov  6 08:49:37 1994", 37 * time.Second, true},
		// A date not after now means "retry now".
		{"date in the past", "Sun, 06 Nov 1994 08:48:00 GMT", 0, true},
		{"date exactly now", "Sun, 06 Nov 1994 08:49:00 GMT", 0, true},

		{"empty", "", 0, false},
		{"blank", "  ", 0, false},
		{"negative", "-1", 0, false},
		{"plus sign", "+1", 0, false},
		{"exponent", "1e3", 0, false},
		{"hex float", "0x10", 0, false},
		{"trailing dot", "1.", 0, false},
		{"leading dot", ".5", 0, false},
		{"comma", "1,5", 0, false},
		{"unit", "5s", 0, false},
		{"two values", "120, 120", 0, false},
		{"inner space", "1 2", 0, false},
		{"NaN", "NaN", 0, false},
		{"Inf", "Inf", 0, false},
		{"garbage", "soon", 0, false},
		{"non-GMT zone", "Sun, 06 Nov 1994 08:49:37 PST", 0, false},
		{"RFC 3339 is not an HTTP-date", "1994-11-06T08:49:37Z", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseRetryAfter(tt.value, rfcNow)
			if got != tt.want || ok != tt.ok {
				t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestParseRetryAfterFarFutureDateSaturates(t *testing.T) {
	t.Parallel()
	got, ok := ParseRetryAfter("Fri, 31 Dec 9999 23:59:59 GMT", rfcNow)
	if !ok || got != maxDuration {
		t.Errorf("got %v, %v; want %v, true", got, ok, maxDuration)
	}
}

func TestParseMillis(t *testing.T) {
	t.Parallel()
	checkDurations(t, "parseMillis", parseMillis, []durationCase{
		{"1500", 1500 * time.Millisecond, true},
		{"0", 0, true},
		{"12.5", 12500 * time.Microsecond, true},
		{"0.000001", time.Nanosecond, true},
		{" 20 ", 20 * time.Millisecond, true},
		{"", 0, false},
		{"-5", 0, false},
		{"5ms", 0, false},
		{"1e3", 0, false},
	})
}

func TestParseResetDuration(t *testing.T) {
	t.Parallel()
	checkDurations(t, "parseResetDuration", parseResetDuration, []durationCase{
		// OpenAI "Rate limits" guide, response header examples.
		{"1s", time.Second, true},
		{"6m0s", 6 * time.Minute, true},
		// Other shapes OpenAI sends.
		{"12ms", 12 * time.Millisecond, true},
		{"1m30.5s", 90*time.Second + 500*time.Millisecond, true},
		{"2h0m0s", 2 * time.Hour, true},
		{"0.5s", 500 * time.Millisecond, true},
		{"0s", 0, true},
		// Forms time.ParseDuration rejects.
		{"20", 20 * time.Second, true},
		{"0.5", 500 * time.Millisecond, true},
		{"1d", 24 * time.Hour, true},
		{"1d2h3m4s", 26*time.Hour + 3*time.Minute + 4*time.Second, true},
		{" 7.66s ", 7660 * time.Millisecond, true},

		{"", 0, false},
		{"-1s", 0, false},
		{"+1s", 0, false},
		{"1d-2h", 0, false},
		{"1d+2h", 0, false},
		{"d", 0, false},
		{"1x", 0, false},
		{"soon", 0, false},
		{"9999999999h", 0, false},
		{"999999999d", 0, false},
		{"106751d23h47m16.854775807s", maxDuration, true},
		{"106751d23h47m16.854775808s", 0, false},
	})
}

// durationCase is one input of a duration parser and what it must return.
type durationCase struct {
	value string
	want  time.Duration
	ok    bool
}

// checkDurations runs parse, reported as name, on every case.
func checkDurations(t *testing.T, name string, parse func(string) (time.Duration, bool), cases []durationCase) {
	t.Helper()
	for _, tt := range cases {
		got, ok := parse(tt.value)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s(%q) = %v, %v; want %v, %v", name, tt.value, got, ok, tt.want, tt.ok)
		}
	}
}
