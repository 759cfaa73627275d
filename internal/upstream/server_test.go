package upstream

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/testkit"
)

// TestTokenBucketOverHTTP sends a bounded concurrent burst and checks the
// admitted count against rate*t + burst.
func TestTokenBucketOverHTTP(t *testing.T) {
	t.Parallel()
	const rate, burst, workers, each = 5.0, 10, 8, 10
	b := setup(t, Config{Routes: map[string]RouteConfig{"sub": {Rate: rate, Burst: burst}}})
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				resp, err := b.client.Post(b.srv.RouteURL("sub"), "application/json", strings.NewReader("{}"))
				if err != nil {
					t.Error(err) // not Fatal: this is not the test goroutine
					return
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	r := b.srv.Stats().Routes["sub"]
	if r.Attempts != workers*each || r.Accepted+r.RateLimited != r.Attempts {
		t.Fatalf("attempts %d accepted %d rate-limited %d, want %d in all", r.Attempts, r.Accepted, r.RateLimited, workers*each)
	}
	if bound := rate*elapsed.Seconds() + burst; float64(r.Accepted) > bound || r.Accepted < burst {
		t.Errorf("accepted %d in %v, want between burst %d and rate*t+burst %.1f", r.Accepted, elapsed, burst, bound)
	}
	if r.StatusCounts[429] != r.RateLimited {
		t.Errorf("status counts %v, want 429 x %d", r.StatusCounts, r.RateLimited)
	}
}

// TestRefillWithFakeClock drives the limiter with an injected clock.
func TestRefillWithFakeClock(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setup(t, Config{Now: clock.Now, Routes: map[string]RouteConfig{"sub": {Rate: 2, Burst: 2}}})
	if got := b.statuses(t, "sub", 3); !slices.Equal(got, []int{200, 200, 429}) {
		t.Fatalf("statuses = %v, want 200 200 429", got)
	}
	clock.Add(500 * time.Millisecond)
	if got := b.statuses(t, "sub", 2); !slices.Equal(got, []int{200, 429}) {
		t.Fatalf("after 0.5s statuses = %v, want 200 429", got)
	}
	r := b.srv.Stats().Routes["sub"]
	if r.AchievedRate != 4 { // 3 accepted after the first, in 0.5 s
		t.Errorf("AchievedRate = %v, want 4", r.AchievedRate)
	}
	want := []TimelineSecond{{Unix: clock.Now().Unix(), Accepted: 3, RateLimited: 2}}
	if !slices.Equal(r.Timeline, want) {
		t.Errorf("Timeline = %+v, want %+v", r.Timeline, want)
	}
}

func TestOverLimitStyles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		style  OverLimit
		status int
		check  func(t *testing.T, h http.Header, sent time.Time)
	}{
		{OverLimit429Seconds, 429, wantRetryAfterSeconds(2)},
		{OverLimit503, 503, wantRetryAfterSeconds(2)},
		{OverLimit429None, 429, func(t *testing.T, h http.Header, _ time.Time) {
			if v := h.Values("Retry-After"); len(v) != 0 {
				t.Errorf("Retry-After = %q, want none", v)
			}
		}},
		{OverLimit429Millis, 429, func(t *testing.T, h http.Header, sent time.Time) {
			ms, err := strconv.Atoi(h.Get("retry-after-ms"))
			if err != nil || ms < 1000 || ms > 2000 {
				t.Errorf("retry-after-ms = %q, want about 2000", h.Get("retry-after-ms"))
			}
			wantRetryAfterSeconds(2)(t, h, sent)
		}},
		{OverLimit429Date, 429, func(t *testing.T, h http.Header, sent time.Time) {
			at, err := http.ParseTime(h.Get("Retry-After"))
			if err != nil {
				t.Fatalf("Retry-After %q is not an HTTP-date: %v", h.Get("Retry-After"), err)
			}
			if at.Before(sent.Add(time.Second).Truncate(time.Second)) || at.After(sent.Add(4*time.Second)) {
				t.Errorf("Retry-After %v, want about 2s after %v", at, sent)
			}
		}},
	} {
		t.Run(string(tc.style), func(t *testing.T) {
			t.Parallel()
			// A fake clock: on the real one a stall of 2 s between the
			// two requests (a loaded machine under -race) refills the
			// bucket and the second is accepted.
			clock := newFakeClock()
			b := setup(t, Config{Now: clock.Now, Routes: map[string]RouteConfig{"sub": {Rate: 0.5, Burst: 1, OverLimit: tc.style}}})
			b.hook(t, "sub", "")
			sent := clock.Now()
			resp := b.hook(t, "sub", "")
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.status)
			}
			tc.check(t, resp.Header, sent)
			if got := b.srv.Stats().Routes["sub"].RateLimited; got != 1 {
				t.Errorf("RateLimited = %d, want 1", got)
			}
		})
	}
}

func wantRetryAfterSeconds(max int) func(*testing.T, http.Header, time.Time) {
	return func(t *testing.T, h http.Header, _ time.Time) {
		t.Helper()
		n, err := strconv.Atoi(h.Get("Retry-After"))
		if err != nil || n < 1 || n > max {
			t.Errorf("Retry-After = %q, want integer seconds in 1..%d", h.Get("Retry-After"), max)
		}
	}
}

// TestHeaderStyles checks every style after one request to a full bucket
// of 3 refilling at 1/s: 2 remaining, back to full in exactly 1s.
func TestHeaderStyles(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	for _, tc := range []struct {
		style HeaderStyle
		want  map[string]string
	}{
		{HeaderStyleNone, map[string]string{}},
		{HeaderStyleNative, map[string]string{}},
		{HeaderStyleXRateLimit, map[string]string{
			"X-Ratelimit-Limit-Requests": "3", "X-Ratelimit-Remaining-Requests": "2", "X-Ratelimit-Reset-Requests": "1s"}},
		{HeaderStyleRateLimit, map[string]string{
			"Ratelimit-Policy": `"default";q=3;w=3`, "Ratelimit": `"default";r=2;t=1`}},
		{HeaderStyleRateLimitLegacy, map[string]string{
			"Ratelimit-Limit": "3", "Ratelimit-Remaining": "2", "Ratelimit-Reset": "1"}},
		{HeaderStyleAnthropic, map[string]string{
			"Anthropic-Ratelimit-Requests-Limit": "3", "Anthropic-Ratelimit-Requests-Remaining": "2",
			"Anthropic-Ratelimit-Requests-Reset": clock.Now().Add(time.Second).Format(time.RFC3339)}},
	} {
		t.Run(string(tc.style)+"-", func(t *testing.T) {
			t.Parallel()
			b := setup(t, Config{Now: clock.Now, Routes: map[string]RouteConfig{"sub": {Rate: 1, Burst: 3, Headers: tc.style}}})
			resp := b.hook(t, "sub", "")
			if got := rateHeaders(resp.Header); !mapsEqual(got, tc.want) {
				t.Errorf("headers = %v, want %v", got, tc.want)
			}
		})
	}
}

// rateHeaders picks the rate-limit headers out of h.
func rateHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k := range h {
		lk := strings.ToLower(k)
		if strings.Contains(lk, "ratelimit") {
			out[k] = h.Get(k)
		}
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestXRateLimitResetOfWindow(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setup(t, Config{Now: clock.Now, Routes: map[string]RouteConfig{
		"sub": {Window: 6 * time.Minute, Limit: 2, Headers: HeaderStyleXRateLimit},
	}})
	b.hook(t, "sub", "")
	clock.Add(12 * time.Millisecond)
	resp := b.hook(t, "sub", "")
	if got := resp.Header.Get("x-ratelimit-reset-requests"); got != "6m0s" {
		t.Errorf("reset = %q, want 6m0s", got)
	}
	resp = b.hook(t, "sub", "")
	if resp.StatusCode != 429 || resp.Header.Get("x-ratelimit-remaining-requests") != "0" {
		t.Errorf("third = %d remaining %q, want 429 and 0", resp.StatusCode, resp.Header.Get("x-ratelimit-remaining-requests"))
	}
	if got := resp.Header.Get("Retry-After"); got != "360" {
		t.Errorf("Retry-After = %q, want 360 (oldest leaves in 6m - 12ms, rounded up)", got)
	}
}

func TestDuplicatesCounted(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setup(t, Config{Now: clock.Now, Routes: map[string]RouteConfig{"sub": {Rate: 1, Burst: 4}}})
	for _, id := range []string{"msg_a", "msg_a", "msg_b", ""} {
		b.hook(t, "sub", id)
	}
	if resp := b.hook(t, "sub", "msg_c"); resp.StatusCode != 429 {
		t.Fatalf("fifth delivery status %d, want 429", resp.StatusCode)
	}
	clock.Add(time.Second)
	b.hook(t, "sub", "msg_c") // first accepted delivery of msg_c: not a duplicate
	r := b.srv.Stats().Routes["sub"]
	if r.Accepted != 5 || r.Duplicates != 1 || r.UniqueIDs != 3 || r.IDsTruncated {
		t.Errorf("accepted %d duplicates %d unique %d truncated %v, want 5 1 3 false",
			r.Accepted, r.Duplicates, r.UniqueIDs, r.IDsTruncated)
	}
}

func TestTrackedIDsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{MaxTrackedIDs: 2, Routes: map[string]RouteConfig{"sub": {}}})
	for _, id := range []string{"a", "b", "c", "a"} {
		b.hook(t, "sub", id)
	}
	r := b.srv.Stats().Routes["sub"]
	if r.UniqueIDs != 2 || r.Duplicates != 1 || !r.IDsTruncated {
		t.Errorf("unique %d duplicates %d truncated %v, want 2 1 true", r.UniqueIDs, r.Duplicates, r.IDsTruncated)
	}
}

func TestSetLimit(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	b := setup(t, Config{Now: clock.Now, Routes: map[string]RouteConfig{"sub": {}}})
	if got := count(b.statuses(t, "sub", 5), 200); got != 5 {
		t.Fatalf("unlimited: %d of 5 accepted", got)
	}
	if err := b.srv.SetLimit("sub", 1, 2); err != nil {
		t.Fatal(err)
	}
	if got := b.statuses(t, "sub", 3); !slices.Equal(got, []int{200, 200, 429}) {
		t.Fatalf("after SetLimit(1, 2): %v, want 200 200 429", got)
	}
	if err := b.srv.SetLimit("sub", 100, 0); err != nil {
		t.Fatal(err)
	}
	if got := b.hook(t, "sub", "").StatusCode; got != 429 {
		t.Errorf("raising the rate refilled the drained bucket: status %d", got)
	}
	clock.Add(10 * time.Millisecond)
	if got := b.hook(t, "sub", "").StatusCode; got != 200 {
		t.Errorf("new rate not applied after 10ms: status %d", got)
	}
	if cfg := b.srv.Stats().Routes["sub"].Config; cfg.Rate != 100 || cfg.Burst != 100 {
		t.Errorf("reported config rate %v burst %d, want 100 100", cfg.Rate, cfg.Burst)
	}
	if err := b.srv.SetLimit("nope", 1, 1); err == nil {
		t.Error("SetLimit on an unknown route succeeded")
	}
	if err := b.srv.SetLimit("sub", -1, 1); err == nil {
		t.Error("SetLimit with a negative rate succeeded")
	}
}

func TestStatusOverride(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Routes: map[string]RouteConfig{"gone": {StatusOverride: 410}, "async": {StatusOverride: 202}}})
	if got := b.hook(t, "gone", "x").StatusCode; got != 410 {
		t.Errorf("gone: status %d, want 410", got)
	}
	if got := b.hook(t, "async", "x").StatusCode; got != 202 {
		t.Errorf("async: status %d, want 202", got)
	}
	rep := b.srv.Stats()
	if g, a := rep.Routes["gone"], rep.Routes["async"]; g.Overridden != 1 || g.Accepted != 0 || a.Accepted != 1 {
		t.Errorf("gone overridden %d accepted %d; async accepted %d; want 1 0 1", g.Overridden, g.Accepted, a.Accepted)
	}
}

func TestUnknownRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{})
	if got := b.hook(t, "nope", "").StatusCode; got != 404 {
		t.Errorf("status %d, want 404", got)
	}
}

func TestAddRoute(t *testing.T) {
	t.Parallel()
	clock := newFakeClock() // the second request is refused however long the first took
	b := setup(t, Config{Now: clock.Now})
	if err := b.srv.AddRoute("store_17", RouteConfig{Rate: 1, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	if got := b.statuses(t, "store_17", 2); !slices.Equal(got, []int{200, 429}) {
		t.Errorf("statuses %v, want 200 429", got)
	}
	if err := b.srv.AddRoute("a/b", RouteConfig{}); err == nil {
		t.Error("AddRoute accepted a name with a slash")
	}
}

// TestTransientDeterministic: the same seed gives the same faults.
func TestTransientDeterministic(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) []int {
		b := setup(t, Config{Seed: seed, Routes: map[string]RouteConfig{"sub": {TransientRate: 0.4}}})
		return b.statuses(t, "sub", 40)
	}
	a, again, other := run(42), run(42), run(43)
	if !slices.Equal(a, again) {
		t.Fatalf("seed 42 gave %v then %v", a, again)
	}
	if slices.Equal(a, other) {
		t.Errorf("seeds 42 and 43 gave the same statuses %v", a)
	}
	failed := 40 - count(a, 200)
	if failed == 0 || failed == 40 || failed != count(a, 500)+count(a, 502)+count(a, 504) {
		t.Errorf("statuses %v: want a mix of 200 and 500/502/504", a)
	}
}

func TestStatsAndHealthEndpoints(t *testing.T) {
	t.Parallel()
	clock := newFakeClock() // the second request is refused however long the first took
	b := setup(t, Config{Now: clock.Now, Routes: map[string]RouteConfig{"sub": {Rate: 1, Burst: 1}}})
	b.statuses(t, "sub", 2)
	resp, err := b.client.Get(b.srv.URL() + "/_stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatalf("decode /_stats: %v", err)
	}
	if r := rep.Routes["sub"]; r.Attempts != 2 || r.Accepted != 1 || r.RateLimited != 1 || r.StatusCounts[429] != 1 {
		t.Errorf("/_stats sub = %+v", r)
	}
	if _, ok := rep.Routes["openai"]; !ok {
		t.Error("/_stats lacks the default openai route")
	}
	health, err := b.client.Get(b.srv.URL() + "/_healthz")
	if err != nil {
		t.Fatal(err)
	}
	health.Body.Close()
	if health.StatusCode != 200 {
		t.Errorf("/_healthz status %d", health.StatusCode)
	}
}

// TestCloseStopsEverything: Close cuts short a simulated latency, waits for
// the handler and refuses later connections; goleak in TestMain checks
// that no goroutine outlives it.
func TestCloseStopsEverything(t *testing.T) {
	t.Parallel()
	// In a testing/synctest bubble, over in-memory pipes: the time Close
	// takes is the fake clock's, 0 when it does not wait for the
	// in-flight request and its minute of latency when it does, however
	// loaded the machine (on the real clock this bounded a step of
	// microseconds at 2 s of wall time).
	synctest.Test(t, func(t *testing.T) {
		pipes := testkit.NewPipes()
		client, transport := pipes.Client()
		defer transport.CloseIdleConnections()
		srv, err := New(Config{Listener: pipes, Routes: map[string]RouteConfig{"slow": {Latency: Latency{Fixed: time.Minute}}}})
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			resp, err := client.Post(srv.RouteURL("slow"), "application/json", strings.NewReader("{}"))
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		synctest.Wait() // the request is in its latency
		if srv.Stats().Routes["slow"].Attempts != 1 {
			t.Fatal("the request did not reach the server")
		}
		start := time.Now()
		if err := srv.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Close took %v with a request in flight", d)
		}
		if err := <-errc; err == nil {
			t.Error("the in-flight request succeeded after Close")
		}
		if err := srv.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if _, err := client.Post(srv.RouteURL("slow"), "application/json", strings.NewReader("{}")); err == nil {
			t.Error("a request after Close succeeded")
		}
	})
}

func TestLatencyDelaysAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Routes: map[string]RouteConfig{"sub": {Latency: Latency{Fixed: 30 * time.Millisecond, Jitter: 5 * time.Millisecond}}}})
	start := time.Now()
	b.hook(t, "sub", "")
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("answer after %v, want at least 30ms", d)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rc   RouteConfig
		want string
	}{
		{RouteConfig{Rate: -1}, "Rate"},
		{RouteConfig{Window: -time.Second, Limit: 1}, "Window"},
		{RouteConfig{Algorithm: AlgorithmTokenBucket}, "Rate"},
		{RouteConfig{Algorithm: AlgorithmSlidingWindow, Window: time.Second}, "Limit"},
		{RouteConfig{OverLimit: "418"}, "OverLimit"},
		{RouteConfig{Headers: "x-custom"}, "Headers"},
		{RouteConfig{TransientRate: 1.5}, "TransientRate"},
		{RouteConfig{Latency: Latency{Fixed: -1}}, "Latency"},
		{RouteConfig{StatusOverride: 99}, "StatusOverride"},
		{RouteConfig{Secrets: []string{"whsec_!!"}}, "Secrets[0]"},
		{RouteConfig{Quota: -1}, "Quota"},
		{RouteConfig{Algorithm: AlgorithmFixedWindow, Limit: 1}, "Window"},
		{RouteConfig{Algorithm: AlgorithmSlidingCounter, Window: time.Second}, "Limit"},
		{RouteConfig{TransientStatuses: []int{429}}, "TransientStatuses"},
		{RouteConfig{Rate: 1, Changes: []LimitChange{{After: time.Second, Limit: 3}}}, "limit change 0"},
		{RouteConfig{Window: time.Second, Limit: 2, Changes: []LimitChange{{After: time.Second, Rate: 3}}}, "limit change 0"},
		{RouteConfig{Window: time.Second, Limit: 2, Changes: []LimitChange{{After: 2 * time.Second, Limit: 1}, {After: time.Second, Limit: 3}}}, "limit change 1"},
		{RouteConfig{Changes: []LimitChange{{After: time.Second, Limit: 3}}}, "unlimited"},
	} {
		_, err := New(Config{Routes: map[string]RouteConfig{"r": tc.rc}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) error %v, want one naming %s", tc.rc, err, tc.want)
		}
	}
}

func TestPhaseStart(t *testing.T) {
	t.Parallel()
	sec := time.Date(2026, 12, 4, 21, 0, 7, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		now   time.Duration // into sec
		phase time.Duration
		want  time.Duration // into sec
	}{
		{0, 0, 0},                        // on the phase already: no wait
		{ms(1), 0, time.Second},          // just past it: the next second
		{ms(100), ms(250), ms(250)},      // later in this second
		{ms(250), ms(250), ms(250)},      // exactly on it
		{ms(300), ms(250), ms(1250)},     // past it: the next second's
		{ms(999), ms(333), ms(1333)},     // from the end of a second
		{ms(400), ms(999), ms(999)},      // the last valid phase
		{ms(667) + 1, ms(667), ms(1667)}, // a nanosecond late is late
		{ms(5) + 123, ms(500), ms(500)},  // sub-millisecond now
		{-ms(1), ms(900), ms(900)},       // from just before sec: the phase of sec
	} {
		now := sec.Add(tc.now)
		got := PhaseStart(now, tc.phase)
		if want := sec.Add(tc.want); !got.Equal(want) {
			t.Errorf("PhaseStart(sec+%v, %v) = sec+%v, want sec+%v", tc.now, tc.phase, got.Sub(sec), tc.want)
		}
		if got.Before(now) || got.Sub(now) >= time.Second {
			t.Errorf("PhaseStart(sec+%v, %v): waits %v, want [0, 1s)", tc.now, tc.phase, got.Sub(now))
		}
		if got.Nanosecond() != int(tc.phase) {
			t.Errorf("PhaseStart(sec+%v, %v) lies %v into its second", tc.now, tc.phase, time.Duration(got.Nanosecond()))
		}
	}
	for _, bad := range []time.Duration{-1, time.Second, 2 * time.Second} {
		if CheckPhase(bad) == nil {
			t.Errorf("CheckPhase(%v) = nil, want an error", bad)
		}
	}
}

// TestStartScheduleAt: in a testing/synctest bubble (fake clock, which
// starts on a whole second), the schedule starts at the requested phase
// of the next second, both in process and through POST /_schedule; an
// invalid phase is refused and a cancelled wait starts nothing.
func TestStartScheduleAt(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		pipes := testkit.NewPipes()
		client, transport := pipes.Client()
		sim, err := New(Config{Listener: pipes, Routes: map[string]RouteConfig{"f": {
			Algorithm: AlgorithmFixedWindow, Window: time.Second, Limit: 1, OverLimit: OverLimit429Seconds}}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			transport.CloseIdleConnections()
			sim.Close()
		}()
		base := time.Now()
		if base.Nanosecond() != 0 {
			t.Fatalf("the bubble's clock starts %v into a second; the test assumes a whole second", time.Duration(base.Nanosecond()))
		}
		time.Sleep(400 * time.Millisecond)
		at, err := sim.StartScheduleAt(context.Background(), 250*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if want := base.Add(1250 * time.Millisecond); !at.Equal(want) || !time.Now().Equal(want) {
			t.Fatalf("StartScheduleAt(250ms) from base+400ms = base+%v at base+%v, want base+1.25s both", at.Sub(base), time.Since(base))
		}
		if !sim.ScheduleEpoch().Equal(at) {
			t.Errorf("ScheduleEpoch = base+%v, want base+%v", sim.ScheduleEpoch().Sub(base), at.Sub(base))
		}

		// Over HTTP, as the BullMQ runner does.
		time.Sleep(600 * time.Millisecond) // base+1.85s
		post := func(query string) (int, time.Time) {
			t.Helper()
			resp, err := client.Post(sim.URL()+"/_schedule"+query, "application/json", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct{ Epoch time.Time }
			_ = json.NewDecoder(resp.Body).Decode(&body)
			return resp.StatusCode, body.Epoch
		}
		code, epoch := post("?phase=667ms")
		if want := base.Add(2667 * time.Millisecond); code != http.StatusOK || !epoch.Equal(want) || !time.Now().Equal(want) {
			t.Fatalf("POST /_schedule?phase=667ms at base+1.85s: %d, epoch base+%v, answered at base+%v; want 200, base+2.667s both",
				code, epoch.Sub(base), time.Since(base))
		}
		if !sim.ScheduleEpoch().Equal(epoch) {
			t.Errorf("ScheduleEpoch = base+%v, want the answered epoch base+%v", sim.ScheduleEpoch().Sub(base), epoch.Sub(base))
		}
		for _, bad := range []string{"?phase=1s", "?phase=-1ms", "?phase=soon"} {
			if code, _ := post(bad); code != http.StatusBadRequest {
				t.Errorf("POST /_schedule%s: %d, want 400", bad, code)
			}
		}
		if !sim.ScheduleEpoch().Equal(epoch) {
			t.Errorf("a refused POST moved the epoch to base+%v", sim.ScheduleEpoch().Sub(base))
		}

		// A cancelled wait starts nothing.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := sim.StartScheduleAt(ctx, 0); err == nil {
			t.Errorf("StartScheduleAt with a context ending before the phase: nil error")
		}
		if !sim.ScheduleEpoch().Equal(epoch) {
			t.Errorf("a cancelled StartScheduleAt moved the epoch to base+%v", sim.ScheduleEpoch().Sub(base))
		}
	})
}
