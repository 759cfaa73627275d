package llmbatch_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/llmbatch"
)

// chunkIn returns a chunk of three items in state s.
func chunkIn(s llmbatch.State) llmbatch.Chunk {
	c := llmbatch.NewChunk("k", "p", []string{"a", "b", "c"})
	c.State = s
	return c
}

// TestChunkTransitions applies every transition in every state: each is
// accepted exactly in the states the lifecycle allows.
func TestChunkTransitions(t *testing.T) {
	t.Parallel()
	now := start
	ended := llmbatch.Status{Phase: llmbatch.PhaseEnded, End: llmbatch.EndCompleted}
	rep := llmbatch.Reconcile([]string{"a", "b", "c"}, ended, nil)
	transitions := map[string]struct {
		apply   func(llmbatch.Chunk) (llmbatch.Chunk, error)
		allowed []llmbatch.State
		to      llmbatch.State // "" keeps the state
	}{
		"uploaded":     {func(c llmbatch.Chunk) (llmbatch.Chunk, error) { return c.Uploaded("file-1") }, []llmbatch.State{llmbatch.StatePlanned}, llmbatch.StateUploaded},
		"begin create": {func(c llmbatch.Chunk) (llmbatch.Chunk, error) { return c.BeginCreate(now, false) }, []llmbatch.State{llmbatch.StatePlanned}, ""},
		"created":      {func(c llmbatch.Chunk) (llmbatch.Chunk, error) { return c.Created("b-1") }, []llmbatch.State{llmbatch.StatePlanned, llmbatch.StateUploaded}, llmbatch.StateSubmitted},
		"not found":    {func(c llmbatch.Chunk) (llmbatch.Chunk, error) { return c.NotFound() }, []llmbatch.State{llmbatch.StatePlanned, llmbatch.StateUploaded}, ""},
		"rate limited": {func(c llmbatch.Chunk) (llmbatch.Chunk, error) { return c.RateLimited(now, time.Second) }, []llmbatch.State{llmbatch.StatePlanned, llmbatch.StateUploaded}, ""},
		"polled running": {func(c llmbatch.Chunk) (llmbatch.Chunk, error) {
			return c.Polled(llmbatch.Status{Phase: llmbatch.PhaseInProgress}, now, time.Minute)
		}, []llmbatch.State{llmbatch.StateSubmitted, llmbatch.StateInProgress}, llmbatch.StateInProgress},
		"polled ended": {func(c llmbatch.Chunk) (llmbatch.Chunk, error) { return c.Polled(ended, now, time.Minute) }, []llmbatch.State{llmbatch.StateSubmitted, llmbatch.StateInProgress}, llmbatch.StateResultsReady},
		"cancel accepted": {func(c llmbatch.Chunk) (llmbatch.Chunk, error) {
			return c.CancelAccepted(llmbatch.Status{Phase: llmbatch.PhaseCanceling})
		}, []llmbatch.State{llmbatch.StateSubmitted, llmbatch.StateInProgress}, ""},
		"reconciled": {func(c llmbatch.Chunk) (llmbatch.Chunk, error) { return c.Reconciled(rep) }, []llmbatch.State{llmbatch.StateResultsReady}, llmbatch.StateReconciled},
	}
	for name, tr := range transitions {
		for _, s := range llmbatch.States {
			got, err := tr.apply(chunkIn(s))
			ok := false
			for _, a := range tr.allowed {
				ok = ok || a == s
			}
			switch {
			case ok && err != nil:
				t.Errorf("%s in %s: %v", name, s, err)
			case !ok && err == nil:
				t.Errorf("%s in %s: accepted, want refused", name, s)
			case ok && tr.to != "" && got.State != tr.to:
				t.Errorf("%s in %s: state %s, want %s", name, s, got.State, tr.to)
			case ok && tr.to == "" && got.State != s:
				t.Errorf("%s in %s: state changed to %s", name, s, got.State)
			}
		}
	}
}

// TestChunkNext is the table of what a chunk asks for next.
func TestChunkNext(t *testing.T) {
	t.Parallel()
	now := start
	with := func(s llmbatch.State, f func(*llmbatch.Chunk)) llmbatch.Chunk {
		c := chunkIn(s)
		f(&c)
		return c
	}
	none := func(*llmbatch.Chunk) {}
	cases := []struct {
		name   string
		c      llmbatch.Chunk
		upload bool
		want   llmbatch.Action
	}{
		{"planned, files", chunkIn(llmbatch.StatePlanned), true, llmbatch.ActionUpload},
		{"planned, no files", chunkIn(llmbatch.StatePlanned), false, llmbatch.ActionCreate},
		{"uploaded", chunkIn(llmbatch.StateUploaded), true, llmbatch.ActionCreate},
		{"create intent recorded", with(llmbatch.StateUploaded, func(c *llmbatch.Chunk) { c.CreateStartedAt = now }), true, llmbatch.ActionFind},
		{"create intent, cancel asked", with(llmbatch.StatePlanned, func(c *llmbatch.Chunk) { c.CreateStartedAt, c.CancelRequested = now, true }), false, llmbatch.ActionFind},
		{"cancel before submit", with(llmbatch.StatePlanned, func(c *llmbatch.Chunk) { c.CancelRequested = true }), true, llmbatch.ActionCancelLocal},
		{"waiting out a 429", with(llmbatch.StateUploaded, func(c *llmbatch.Chunk) { c.NotBefore = now.Add(time.Second) }), true, llmbatch.ActionWait},
		{"429 delay over", with(llmbatch.StateUploaded, func(c *llmbatch.Chunk) { c.NotBefore = now }), true, llmbatch.ActionCreate},
		{"submitted", chunkIn(llmbatch.StateSubmitted), true, llmbatch.ActionPoll},
		{"in progress", with(llmbatch.StateInProgress, none), false, llmbatch.ActionPoll},
		{"cancel to send", with(llmbatch.StateInProgress, func(c *llmbatch.Chunk) { c.CancelRequested = true }), false, llmbatch.ActionCancel},
		{"cancel sent", with(llmbatch.StateInProgress, func(c *llmbatch.Chunk) { c.CancelRequested, c.CancelSent = true, true }), false, llmbatch.ActionPoll},
		{"results ready", chunkIn(llmbatch.StateResultsReady), false, llmbatch.ActionCollect},
		{"reconciled", with(llmbatch.StateReconciled, func(c *llmbatch.Chunk) { c.NotBefore = now.Add(time.Hour) }), false, llmbatch.ActionDone},
	}
	for _, tc := range cases {
		if got := tc.c.Next(now, tc.upload); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestReconcileAccountsForEveryItem: each item gets one disposition with
// a reason, whatever the results hold.
func TestReconcileAccountsForEveryItem(t *testing.T) {
	t.Parallel()
	items := []string{"s", "e5", "e4", "x", "c", "m"}
	results := []llmbatch.Result{
		{CustomID: "m-other", Kind: llmbatch.KindSucceeded}, // foreign
		{CustomID: "s", Kind: llmbatch.KindSucceeded, Body: []byte("ok")},
		{CustomID: "s", Kind: llmbatch.KindErrored}, // duplicate: the first is kept
		{CustomID: "e5", Kind: llmbatch.KindErrored, Status: 500, Retryable: true},
		{CustomID: "e4", Kind: llmbatch.KindErrored, ErrorType: "invalid_request_error"},
		{CustomID: "x", Kind: llmbatch.KindExpired},
		{CustomID: "c", Kind: llmbatch.KindCanceled},
	}
	want := map[llmbatch.End][]string{
		llmbatch.EndCompleted: {"succeeded/succeeded", "requeue/errored:http_500", "failed/errored:invalid_request_error", "requeue/expired", "canceled/canceled", "requeue/missing_from_results"},
		llmbatch.EndExpired:   {"succeeded/succeeded", "requeue/errored:http_500", "failed/errored:invalid_request_error", "requeue/expired", "canceled/canceled", "requeue/expired"},
		llmbatch.EndCancelled: {"succeeded/succeeded", "requeue/errored:http_500", "failed/errored:invalid_request_error", "requeue/expired", "canceled/canceled", "canceled/canceled"},
		llmbatch.EndFailed:    {"succeeded/succeeded", "requeue/errored:http_500", "failed/errored:invalid_request_error", "requeue/expired", "canceled/canceled", "failed/batch_failed:too_many_requests"},
	}
	for end, w := range want {
		st := llmbatch.Status{Phase: llmbatch.PhaseEnded, End: end, Errors: []string{"too_many_requests"}}
		rep := llmbatch.Reconcile(items, st, results)
		if err := rep.Check(items); err != nil {
			t.Fatalf("%s: %v", end, err)
		}
		var got []string
		for _, o := range rep.Outcomes {
			got = append(got, string(o.Disposition)+"/"+o.Reason)
		}
		if strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("%s:\n got %v\nwant %v", end, got, w)
		}
		if rep.Foreign != 1 || rep.Duplicates != 1 || string(rep.Outcomes[0].Result.Body) != "ok" {
			t.Errorf("%s: foreign %d duplicates %d first %+v", end, rep.Foreign, rep.Duplicates, rep.Outcomes[0].Result)
		}
		if s := rep.Summary(); s.Succeeded+s.Failed+s.Canceled+s.Requeued != len(items) || s.Missing != 1 {
			t.Errorf("%s: summary %+v", end, s)
		}
	}
	// A report that skips or reorders an item fails the check, and a
	// chunk refuses to be reconciled with it.
	rep := llmbatch.Reconcile(items, llmbatch.Status{Phase: llmbatch.PhaseEnded}, results)
	rep.Outcomes = rep.Outcomes[1:]
	if err := rep.Check(items); err == nil {
		t.Error("Check accepted a report missing an item")
	}
	if _, err := chunkIn(llmbatch.StateResultsReady).Reconciled(rep); err == nil {
		t.Error("Reconciled accepted a report that does not cover the chunk")
	}
	// Cancelled before submission: reconciled only once no create may be
	// outstanding.
	abc := []string{"a", "b", "c"}
	local := llmbatch.Reconcile(abc, llmbatch.Status{Phase: llmbatch.PhaseEnded, End: llmbatch.EndCancelled}, nil)
	c := chunkIn(llmbatch.StateUploaded).RequestCancel()
	if got, err := c.Reconciled(local); err != nil || got.State != llmbatch.StateReconciled || got.Summary.Canceled != 3 {
		t.Errorf("local cancel: %v, %+v", err, got)
	}
	c.CreateStartedAt = start
	if _, err := c.Reconciled(local); err == nil {
		t.Error("Reconciled a cancelled chunk whose create may have reached the provider")
	}
}

// TestSplitProviderLimits uses the documented limits: 50,000 requests per
// OpenAI batch and 100,000 per Anthropic batch.
func TestSplitProviderLimits(t *testing.T) {
	t.Parallel()
	its := make([]llmbatch.Item, 100_001)
	for i := range its {
		its[i].CustomID = "i"
	}
	one := func(llmbatch.Item) (int64, error) { return 100, nil }
	for _, tc := range []struct {
		name string
		lim  llmbatch.Limits
		want []int
	}{
		{"openai", llmbatch.OpenAILimits, []int{50_000, 50_000, 1}},
		{"anthropic", llmbatch.AnthropicLimits, []int{100_000, 1}},
	} {
		chunks, rejected, err := llmbatch.Split(its, tc.lim, one)
		if err != nil || len(rejected) != 0 {
			t.Fatalf("%s: %v %v", tc.name, err, rejected)
		}
		var got []int
		for _, c := range chunks {
			got = append(got, len(c))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: chunk sizes %v, want %v", tc.name, got, tc.want)
		}
	}
	// 200 MB of OpenAI input: items of 1 MiB (with the newline) fill 200 per file.
	big := make([]llmbatch.Item, 401)
	mib := func(llmbatch.Item) (int64, error) { return 1<<20 - 1, nil }
	chunks, _, err := llmbatch.Split(big, llmbatch.OpenAILimits, mib)
	if err != nil || len(chunks) != 3 || len(chunks[0]) != 200 || len(chunks[2]) != 1 {
		t.Errorf("200 MB split: %d chunks, err %v", len(chunks), err)
	}
	if llmbatch.OpenAILimits.MaxBytes != 200<<20 || llmbatch.AnthropicLimits.MaxBytes != 256<<20 {
		t.Errorf("byte limits %d, %d; want 200 MB and 256 MB", llmbatch.OpenAILimits.MaxBytes, llmbatch.AnthropicLimits.MaxBytes)
	}
}
