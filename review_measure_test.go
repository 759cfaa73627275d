package ratelane_test

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/review"
)

var (
	fullLineRE = regexp.MustCompile(`^L(\d+): \+(.*)$`)
	fastLineRE = regexp.MustCompile(`^([^:\s]+):(\d+): (.*)$`)
)

// measureResponder answers like a model that reviews well most of the
// time: a finding for every added TODO or AWS key it is shown (at most 5
// at fast depth), and, for one request in four, an extra finding on a line
// the diff lacks (which validation must quarantine).
func measureResponder(req upstream.LLMRequest) string {
	var user string
	for _, m := range req.Messages {
		if m.Role == "user" {
			user += m.Text
		}
	}
	fast := strings.Contains(req.System, "time pressure")
	type f struct {
		Path       string  `json:"path"`
		Line       int     `json:"line"`
		EndLine    *int    `json:"end_line"`
		Severity   string  `json:"severity"`
		Category   string  `json:"category"`
		Message    string  `json:"message"`
		Evidence   string  `json:"evidence"`
		Suggestion *string `json:"suggestion"`
		Confidence float64 `json:"confidence"`
	}
	var out []f
	path := ""
	add := func(p string, line int, text string) {
		switch {
		case strings.Contains(text, "AKIA"):
			out = append(out, f{Path: p, Line: line, Severity: "error", Category: "security", Message: "AWS key committed", Evidence: text, Confidence: 0.9})
		case strings.Contains(text, "TODO"):
			out = append(out, f{Path: p, Line: line, Severity: "info", Category: "maintainability", Message: "TODO added", Evidence: text, Confidence: 0.7})
		}
	}
	for _, l := range strings.Split(user, "\n") {
		if p, ok := strings.CutPrefix(l, "File: "); ok {
			path = p
		} else if m := fullLineRE.FindStringSubmatch(l); !fast && m != nil {
			n, _ := strconv.Atoi(m[1])
			add(path, n, m[2])
		} else if m := fastLineRE.FindStringSubmatch(l); fast && m != nil {
			n, _ := strconv.Atoi(m[2])
			add(m[1], n, m[3])
		}
	}
	if fast && len(out) > 5 {
		out = out[:5]
	}
	h := fnv.New32a()
	h.Write([]byte(user))
	if h.Sum32()%4 == 0 && len(out) > 0 {
		inv := out[0]
		inv.Line += 100000
		out = append(out, inv)
	}
	if out == nil {
		out = []f{}
	}
	b, _ := json.Marshal(map[string]any{"findings": out})
	return string(b)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

// BenchmarkReviewMeasure measures issue 6's numbers: review latency
// p50/p99 at depth fast and full against an OpenAI-compatible provider
// limited to 25 requests/s (ratelane's key paces at 20/s), tokens per
// published finding and the quarantine rate. One run of a depth takes
// about 15 s; run it with -benchtime 1x.
func BenchmarkReviewMeasure(b *testing.B) {
	for _, depth := range []string{"fast", "full"} {
		b.Run("depth="+depth, func(b *testing.B) {
			for range b.N {
				reviewMeasure(b, depth)
			}
		})
	}
}

// reviewMeasure submits 30 reviews of a 600-added-line diff (4 files), one
// every 400 ms, at depth, and reports the figures of the run.
func reviewMeasure(b *testing.B, depth string) {
	const reviews = 30
	const every = 400 * time.Millisecond
	text := []byte(findingsDiff(4, 150)) // 600 added lines
	up, p := compatUpstream(b, upstream.Config{Responder: measureResponder,
		Routes: map[string]upstream.RouteConfig{"openai": {Rate: 25, Burst: 5, Latency: upstream.Latency{Fixed: 40 * time.Millisecond, Jitter: 80 * time.Millisecond}}}})
	cfg := ratelane.Config{DataDir: b.TempDir(), Regions: []ratelane.Region{{Name: "us"}}, Workers: 16,
		Limits: []ratelane.Limit{{Name: "openai-compatible:m", Rate: 20, Burst: 2}}}
	rvp := withReviews(&cfg, "us", review.RegionConfig{Providers: []review.Provider{p}, MaxPartTokens: 1000,
		MaxFindings: 1000, SweepEvery: 50 * time.Millisecond})
	ctx := context.Background()
	c := startClient(b, cfg)
	var (
		mu                    sync.Mutex
		lat                   []time.Duration
		parts                 int
		findings, quarantined int
		tokens                int64
		wg                    sync.WaitGroup
	)
	for i := range reviews {
		time.Sleep(every)
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			sub, err := rvp.Submit(ctx, review.Request{Region: "us", Diff: text, Depth: depth, Change: strconv.Itoa(i)})
			if err != nil {
				b.Error(err)
				return
			}
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
				s, err := rvp.Get(ctx, "us", sub.ID)
				if err != nil || time.Now().After(deadline) {
					b.Errorf("review %s: %v (%s)", sub.ID, err, s.State)
					return
				}
				if s.State == ratelane.StatePublished {
					mu.Lock()
					lat = append(lat, time.Since(start))
					parts = s.Parts.Total
					findings += len(s.Result.Findings)
					quarantined += len(s.Result.Quarantined)
					tokens += s.Result.Usage.InputTokens + s.Result.Usage.OutputTokens
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	c.Stop(ctx)
	st := up.Stats().Routes["openai"]
	if len(lat) != reviews {
		b.Fatalf("%d of %d reviews finished", len(lat), reviews)
	}
	b.ReportMetric(float64(parts), "parts")
	b.ReportMetric(float64(percentile(lat, 0.5).Milliseconds()), "p50_ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Milliseconds()), "p99_ms")
	b.ReportMetric(float64(slices.Max(lat).Milliseconds()), "max_ms")
	b.ReportMetric(float64(findings), "findings")
	b.ReportMetric(float64(quarantined)/float64(max(1, findings+quarantined)), "quarantine_rate")
	b.ReportMetric(float64(tokens)/float64(max(1, findings)), "tokens/finding")
	b.ReportMetric(float64(st.Accepted), "requests")
	b.ReportMetric(float64(st.RateLimited), "429s")
}
