package llmbatch_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
)

// TestLifecycle runs a chunk from planned to reconciled against each
// simulated provider through its official SDK.
func TestLifecycle(t *testing.T) {
	eachProvider(t, func(t *testing.T, provider string) {
		b := setup(t, provider, opts{})
		its := items("life", 5)
		j, s := &journal{}, newSink(t)
		d := b.driver(j, s)
		c := llmbatch.NewChunk("m1-c0", provider, ids(its))
		var seen []llmbatch.State
		ctx := context.Background()
		for c.State != llmbatch.StateReconciled {
			next, a, err := d.Step(ctx, b.clock.Now(), c, its)
			if err != nil {
				t.Fatalf("step: %v", err)
			}
			if next.State != c.State {
				seen = append(seen, next.State)
			}
			if a == llmbatch.ActionWait {
				b.clock.Set(next.NotBefore)
			}
			c = next
		}
		want := []llmbatch.State{llmbatch.StateSubmitted, llmbatch.StateInProgress, llmbatch.StateResultsReady, llmbatch.StateReconciled}
		if provider == batchsim.ProviderOpenAI {
			want = append([]llmbatch.State{llmbatch.StateUploaded}, want...)
		}
		if !slices.Equal(seen, want) {
			t.Errorf("states %v, want %v", seen, want)
		}
		if got := *c.Summary; got != (llmbatch.Summary{Succeeded: 5}) {
			t.Errorf("summary %+v, want 5 succeeded", got)
		}
		if c.Status.End != llmbatch.EndCompleted || c.Status.Counts.Succeeded != 5 || c.Status.Counts.Total != 5 {
			t.Errorf("final status %+v", c.Status)
		}
		for _, it := range its {
			o := s.published["m1-c0/"+it.CustomID]
			if want := `{"answer":"` + it.Request.Prompt + `"}`; string(o.Result.Body) != want {
				t.Errorf("%s: body %q, want %q", it.CustomID, o.Result.Body, want)
			}
			if o.Result.InputTokens == 0 || o.Result.OutputTokens == 0 {
				t.Errorf("%s: no usage: %+v", it.CustomID, o.Result)
			}
		}
		st := b.sim.Stats()
		if st.OpenAIBatches+st.AnthropicBatches != 1 {
			t.Errorf("provider batches %+v, want exactly 1", st)
		}
	})
}

// TestRateLimitedSubmit: a 429 on create becomes NotBefore from the
// server's Retry-After, clears the create intent (nothing was created),
// and the create goes out again once the delay has passed.
func TestRateLimitedSubmit(t *testing.T) {
	eachProvider(t, func(t *testing.T, provider string) {
		b := setup(t, provider, opts{})
		b.sim.RejectCreates(provider, 2, 7*time.Second)
		its := items("rl", 3)
		d := b.driver(&journal{}, newSink(t))
		c := llmbatch.NewChunk("rl-c0", provider, ids(its))
		ctx := context.Background()
		if provider == batchsim.ProviderOpenAI {
			var err error
			if c, _, err = d.Step(ctx, b.clock.Now(), c, its); err != nil {
				t.Fatalf("upload: %v", err)
			}
		}
		for i := 1; i <= 2; i++ {
			now := b.clock.Now()
			next, a, err := d.Step(ctx, now, c, its)
			if err != nil || a != llmbatch.ActionCreate {
				t.Fatalf("create %d: action %s, err %v", i, a, err)
			}
			if !next.NotBefore.Equal(now.Add(7*time.Second)) || !next.CreateStartedAt.IsZero() || next.Refusals != i {
				t.Fatalf("after 429 %d: not_before %v (want %v), create_started_at %v, refusals %d",
					i, next.NotBefore, now.Add(7*time.Second), next.CreateStartedAt, next.Refusals)
			}
			if a := next.Next(now.Add(6*time.Second), b.prov.NeedsUpload()); a != llmbatch.ActionWait {
				t.Fatalf("before Retry-After: next action %s, want wait", a)
			}
			c = next
			b.clock.Advance(7 * time.Second)
		}
		c = b.run(t, d, c, its)
		if c.Summary.Succeeded != 3 {
			t.Errorf("summary %+v", *c.Summary)
		}
		st := b.sim.Stats()
		if st.Rejected != 2 || st.OpenAIBatches+st.AnthropicBatches != 1 {
			t.Errorf("stats %+v: want 2 rejected, 1 batch", st)
		}
	})
}

// TestExpiredRequeued: items the provider cannot run within the window
// expire, come back as requeue "expired", and succeed when resubmitted in
// a new chunk; nothing is published twice.
func TestExpiredRequeued(t *testing.T) {
	eachProvider(t, func(t *testing.T, provider string) {
		expire := map[string]bool{"ex-001": true, "ex-004": true}
		b := setup(t, provider, opts{sim: batchsim.Config{Fault: func(r batchsim.FaultRequest) batchsim.Fault {
			if expire[r.CustomID] && r.Attempt == 1 {
				return batchsim.FaultExpire
			}
			return batchsim.FaultNone
		}}})
		its := items("ex", 6)
		s := newSink(t)
		d := b.driver(&journal{}, s)
		d.PollInterval = time.Hour // the batch runs its whole 24 h window
		c := b.run(t, d, llmbatch.NewChunk("ex-c0", provider, ids(its)), its)
		if c.Status.End != llmbatch.EndExpired {
			t.Errorf("end %q, want expired", c.Status.End)
		}
		if got := b.clock.Now().Sub(start); got < 24*time.Hour {
			t.Errorf("batch ended %s after start, before its 24 h window closed", got)
		}
		if *c.Summary != (llmbatch.Summary{Succeeded: 4, Requeued: 2}) {
			t.Errorf("summary %+v, want 4 succeeded and 2 requeued", *c.Summary)
		}
		var again []llmbatch.Item
		for _, it := range its {
			o := s.published["ex-c0/"+it.CustomID]
			if expire[it.CustomID] {
				if o.Disposition != llmbatch.DispRequeue || o.Reason != "expired" {
					t.Errorf("%s: %s %q, want requeue expired", it.CustomID, o.Disposition, o.Reason)
				}
				again = append(again, it)
			}
		}
		c2 := b.run(t, d, llmbatch.NewChunk("ex-c0-r1", provider, ids(again)), again)
		if *c2.Summary != (llmbatch.Summary{Succeeded: 2}) {
			t.Errorf("requeued chunk summary %+v, want 2 succeeded", *c2.Summary)
		}
		succeeded := map[string]int{}
		for _, o := range s.published {
			if o.Disposition == llmbatch.DispSucceeded {
				succeeded[o.CustomID]++
			}
		}
		for _, it := range its {
			if succeeded[it.CustomID] != 1 {
				t.Errorf("%s succeeded %d times, want once", it.CustomID, succeeded[it.CustomID])
			}
		}
	})
}

// TestPartialFailure: a retryable per-request error is requeued, a
// permanent one fails, a line the provider lost is requeued as
// missing_from_results, and the rest succeed: every item is accounted for.
func TestPartialFailure(t *testing.T) {
	faults := map[string]batchsim.Fault{"pf-000": batchsim.FaultServerError, "pf-002": batchsim.FaultInvalid, "pf-005": batchsim.FaultDrop}
	eachProvider(t, func(t *testing.T, provider string) {
		b := setup(t, provider, opts{sim: batchsim.Config{Fault: func(r batchsim.FaultRequest) batchsim.Fault { return faults[r.CustomID] }}})
		its := items("pf", 7)
		s := newSink(t)
		c := b.run(t, b.driver(&journal{}, s), llmbatch.NewChunk("pf-c0", provider, ids(its)), its)
		if want := (llmbatch.Summary{Succeeded: 4, Failed: 1, Requeued: 2, Missing: 1}); *c.Summary != want {
			t.Errorf("summary %+v, want %+v", *c.Summary, want)
		}
		want := map[string]string{"pf-000": "requeue", "pf-002": "failed", "pf-005": "requeue missing_from_results"}
		for _, it := range its {
			o := s.published["pf-c0/"+it.CustomID]
			got := string(o.Disposition)
			if o.Missing {
				got += " " + o.Reason
			}
			w, ok := want[it.CustomID]
			if !ok {
				w = "succeeded"
			}
			if got != w {
				t.Errorf("%s: %q (reason %q), want %q", it.CustomID, got, o.Reason, w)
			}
		}
		if r := s.published["pf-c0/pf-002"].Reason; !strings.HasPrefix(r, "errored:") || !strings.Contains(r, "invalid_request_error") {
			t.Errorf("permanent failure reason %q", r)
		}
	})
}

// TestCancel: a cancel sent while the batch runs keeps the items done by
// then and ends the rest canceled; a cancel before any submission ends
// every item canceled without a provider call.
func TestCancel(t *testing.T) {
	eachProvider(t, func(t *testing.T, provider string) {
		b := setup(t, provider, opts{})
		its := items("cx", 10)
		s := newSink(t)
		d := b.driver(&journal{}, s)
		ctx := context.Background()
		c := llmbatch.NewChunk("cx-c0", provider, ids(its))
		for c.State != llmbatch.StateSubmitted {
			var err error
			if c, _, err = d.Step(ctx, b.clock.Now(), c, its); err != nil {
				t.Fatal(err)
			}
		}
		// Halfway through processing (OpenAI validates for a minute first).
		b.clock.Advance(6 * time.Minute)
		c = c.RequestCancel()
		c, a, err := d.Step(ctx, b.clock.Now(), c, its)
		if err != nil || a != llmbatch.ActionCancel {
			t.Fatalf("cancel step: %s %v", a, err)
		}
		if c.Status.Phase != llmbatch.PhaseCanceling {
			t.Errorf("after cancel: phase %s, want canceling", c.Status.Phase)
		}
		c = b.run(t, d, c, its)
		if c.Status.End != llmbatch.EndCancelled {
			t.Errorf("end %q, want cancelled", c.Status.End)
		}
		sum := *c.Summary
		if sum.Succeeded == 0 || sum.Canceled == 0 || sum.Succeeded+sum.Canceled != 10 {
			t.Errorf("summary %+v: want some succeeded and the rest canceled", sum)
		}
		if b.sim.Stats().Cancels != 1 {
			t.Errorf("cancels %d, want 1", b.sim.Stats().Cancels)
		}

		local := llmbatch.NewChunk("cx-c1", provider, ids(its[:3])).RequestCancel()
		local = b.run(t, d, local, its[:3])
		if *local.Summary != (llmbatch.Summary{Canceled: 3, Missing: 3}) {
			t.Errorf("local cancel summary %+v", *local.Summary)
		}
		if st := b.sim.Stats(); st.OpenAIBatches+st.AnthropicBatches != 1 {
			t.Errorf("a chunk cancelled before submission reached the provider: %+v", st)
		}
	})
}

// TestCrashAtEverySave kills the driver at each save in turn (the save
// fails, as if the process died before the record reached the disk),
// restarts from the last record, and checks that the run still ends with
// every item published once, from one provider batch and one upload.
// Crashing at the final save re-runs collect on the same batch: the
// second download gives the same results and nothing is duplicated.
func TestCrashAtEverySave(t *testing.T) {
	eachProvider(t, func(t *testing.T, provider string) {
		// Count the saves of a clean run first.
		clean := setup(t, provider, opts{})
		its := items("kx", 4)
		cj := &journal{}
		if err := cj.Save(context.Background(), llmbatch.NewChunk("kx", provider, ids(its))); err != nil {
			t.Fatal(err)
		}
		clean.run(t, clean.driver(cj, newSink(t)), llmbatch.NewChunk("kx", provider, ids(its)), its)
		total := cj.saves
		if total < 5 {
			t.Fatalf("a clean run saved %d times; the test needs every stage", total)
		}
		found := 0 // restarts that adopted a batch through Find
		// k = 1 would crash the planned record itself: nothing started.
		for k := 2; k <= total; k++ {
			b := setup(t, provider, opts{})
			j := &journal{crashAt: k}
			s := newSink(t)
			c := llmbatch.NewChunk("kx", provider, ids(its))
			if err := j.Save(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			crashed := false
			d := b.driver(j, s)
			ctx := context.Background()
			for range 200 {
				next, a, err := d.Step(ctx, b.clock.Now(), c, its)
				if errors.Is(err, errCrash) {
					crashed = true
					c = j.load(t) // restart: read back the last record
					d = b.driver(j, s)
					continue
				}
				if err != nil {
					t.Fatalf("crash at save %d: step %s: %v", k, a, err)
				}
				if a == llmbatch.ActionFind && next.State == llmbatch.StateSubmitted {
					found++
				}
				c = next
				if a == llmbatch.ActionDone {
					break
				}
				if a == llmbatch.ActionWait {
					b.clock.Set(c.NotBefore)
				}
			}
			if !crashed {
				t.Errorf("crash at save %d never happened", k)
			}
			if c.State != llmbatch.StateReconciled || c.Summary.Succeeded != 4 {
				t.Fatalf("crash at save %d: state %s summary %+v", k, c.State, c.Summary)
			}
			if len(s.published) != 4 {
				t.Errorf("crash at save %d: %d items published, want 4", k, len(s.published))
			}
			st := b.sim.Stats()
			if st.OpenAIBatches+st.AnthropicBatches != 1 {
				t.Errorf("crash at save %d: %d provider batches, want 1", k, st.OpenAIBatches+st.AnthropicBatches)
			}
			if provider == batchsim.ProviderOpenAI && st.Uploads > 2 {
				t.Errorf("crash at save %d: %d uploads", k, st.Uploads)
			}
			if k == total && (s.deliveries != 2 || st.ResultDownloads < 2) {
				t.Errorf("crash at the last save: %d deliveries, %d downloads; want collect re-run", s.deliveries, st.ResultDownloads)
			}
		}
		if found != 1 {
			t.Errorf("%d restarts adopted a batch through Find, want 1 (the crash right after create)", found)
		}
	})
}

// TestOversizedManifestSplit: a manifest larger than one provider batch
// is split by the limits into several batches, all run and reconcile; the
// simulator enforces the same limits, so an unsplit submission fails.
func TestOversizedManifestSplit(t *testing.T) {
	eachProvider(t, func(t *testing.T, provider string) {
		lim := batchsim.Limits{OpenAIMaxRequests: 4, AnthropicMaxRequests: 4}
		b := setup(t, provider, opts{sim: batchsim.Config{Limits: lim}, limits: llmbatch.Limits{MaxRequests: 4}})
		its := items("big", 10)
		if err := llmbatch.ValidateItems(its); err != nil {
			t.Fatal(err)
		}
		chunks, rejected, err := llmbatch.Split(its, b.prov.Limits(), b.prov.EncodedSize)
		if err != nil || len(rejected) != 0 {
			t.Fatalf("split: %v, rejected %v", err, rejected)
		}
		if got := []int{len(chunks[0]), len(chunks[1]), len(chunks[2])}; len(chunks) != 3 || !slices.Equal(got, []int{4, 4, 2}) {
			t.Fatalf("chunks %d, want sizes 4, 4, 2", len(chunks))
		}
		s := newSink(t)
		d := b.driver(&journal{}, s)
		for i, ch := range chunks {
			c := b.run(t, d, llmbatch.NewChunk("big-c"+string(rune('0'+i)), provider, ids(ch)), ch)
			if c.Summary.Succeeded != len(ch) {
				t.Errorf("chunk %d summary %+v", i, *c.Summary)
			}
		}
		if len(s.published) != 10 {
			t.Errorf("published %d, want 10", len(s.published))
		}
		if st := b.sim.Stats(); st.OpenAIBatches+st.AnthropicBatches != 3 {
			t.Errorf("provider batches %+v, want 3", st)
		}

		// Unsplit, the provider refuses: OpenAI fails the batch after
		// validation, Anthropic refuses the create.
		over := items("over", 5)
		c := llmbatch.NewChunk("over-c0", provider, ids(over))
		if provider == batchsim.ProviderAnthropic {
			_, _, err := d.Step(context.Background(), b.clock.Now(), c, over)
			if err == nil || !strings.Contains(err.Error(), "at most 4 requests") {
				t.Errorf("unsplit create: %v, want a 400 naming the limit", err)
			}
			return
		}
		c = b.run(t, d, c, over)
		if c.Status.End != llmbatch.EndFailed || c.Summary.Failed != 5 {
			t.Errorf("unsplit OpenAI batch: end %q summary %+v, want failed", c.Status.End, *c.Summary)
		}
		if r := s.published["over-c0/over-000"].Reason; !strings.Contains(r, "too_many_requests") {
			t.Errorf("reason %q, want the batch's error code", r)
		}
	})
}

// TestSplitByBytes: the byte limit splits as the request limit does, and
// an item too large for any batch is refused alone.
func TestSplitByBytes(t *testing.T) {
	t.Parallel()
	its := items("sb", 6)
	big := its[3]
	big.Request.Prompt = strings.Repeat("x", 500)
	its[3] = big
	size := func(it llmbatch.Item) (int64, error) { return int64(len(it.Request.Prompt)) + 10, nil }
	lim := llmbatch.Limits{MaxRequests: 100, MaxBytes: 40, SepBytes: 1}
	chunks, rejected, err := llmbatch.Split(its, lim, size)
	if err != nil {
		t.Fatal(err)
	}
	// Each normal item costs len("p-sb-00x")+10+1 = 19 bytes: two per chunk.
	var got [][]string
	for _, c := range chunks {
		got = append(got, ids(c))
	}
	want := [][]string{{"sb-000", "sb-001"}, {"sb-002", "sb-004"}, {"sb-005"}}
	if len(got) != len(want) {
		t.Fatalf("chunks %v, want %v", got, want)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("chunk %d: %v, want %v", i, got[i], want[i])
		}
	}
	if len(rejected) != 1 || rejected[0] != (llmbatch.Rejected{CustomID: "sb-003", Reason: "item_too_large"}) {
		t.Errorf("rejected %v", rejected)
	}
}
