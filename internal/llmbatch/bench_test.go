package llmbatch_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/review/finding"
)

// BenchmarkReconcile100k reconciles a full Anthropic-sized chunk (100,000
// items, results in reverse order, a tenth of them missing).
func BenchmarkReconcile100k(b *testing.B) {
	const n = 100_000
	idsList := make([]string, n)
	results := make([]llmbatch.Result, 0, n)
	for i := range idsList {
		idsList[i] = fmt.Sprintf("item-%06d", i)
	}
	for i := n - 1; i >= 0; i-- {
		if i%10 != 0 {
			results = append(results, llmbatch.Result{CustomID: idsList[i], Kind: llmbatch.KindSucceeded, Body: []byte(`{"findings":[]}`)})
		}
	}
	st := llmbatch.Status{Phase: llmbatch.PhaseEnded, End: llmbatch.EndExpired}
	b.ReportAllocs()
	for b.Loop() {
		rep := llmbatch.Reconcile(idsList, st, results)
		if s := rep.Summary(); s.Succeeded != n-n/10 || s.Requeued != n/10 {
			b.Fatalf("summary %+v", s)
		}
	}
}

// BenchmarkEncodedSizeOpenAI is the cost of sizing one item for Split
// (since session 40 counted from its fields, not encoded).
func BenchmarkEncodedSizeOpenAI(b *testing.B) {
	p := llmbatch.NewOpenAI(llmbatch.Config{APIKey: "unused"})
	it := items("bench", 1)[0]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.EncodedSize(it); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodedSizeStructured sizes one review-sized item that asks for
// the findings schema as structured output, for each provider, and
// reports the bytes the schema adds to the item's line.
func BenchmarkEncodedSizeStructured(b *testing.B) {
	var schema map[string]any
	if err := json.Unmarshal(finding.StrictSchema(), &schema); err != nil {
		b.Fatal(err)
	}
	for _, p := range []llmbatch.Provider{llmbatch.NewOpenAI(llmbatch.Config{APIKey: "unused"}), llmbatch.NewAnthropic(llmbatch.Config{APIKey: "unused"})} {
		b.Run(p.Name(), func(b *testing.B) {
			plain := items("bench", 1)[0]
			it := plain
			it.Request.Format = &llmbatch.Format{Name: "review_findings_v1", Schema: schema}
			without, err := p.EncodedSize(plain)
			if err != nil {
				b.Fatal(err)
			}
			with, err := p.EncodedSize(it)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(with-without), "schema-bytes/item")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.EncodedSize(it); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
