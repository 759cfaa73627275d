package batchlane

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/review/pipeline"
)

// What a manifest predicted to finish past its deadline gets (the
// request's on_overload, as for jobs).
const (
	// OverloadReject refuses it (the default): the API answers 429 with
	// Retry-After, or 400 on deadline when even an empty lane could not
	// finish it in time.
	OverloadReject = "reject"
	// OverloadDegrade plans it at depth fast (smaller prompts, fewer
	// tokens in the provider's queue) when that finishes in time, and
	// refuses it otherwise.
	OverloadDegrade = "degrade"
	// OverloadQueue accepts it as it is: items that cannot finish end
	// deadline_exceeded.
	OverloadQueue = "queue"
)

// Intake is the predicted completion a batch was accepted with
// (admission.PredictCompletion), kept in its summary so GET shows it.
type Intake struct {
	// Policy is the request's on_overload.
	Policy string `json:"on_overload" doc:"the request's on_overload: reject, degrade or queue"`
	// PredictedFinish is when every item is predicted to be final.
	PredictedFinish time.Time `json:"predicted_finish" doc:"when every item is predicted to be final"`
	// SubmitKey is the limit key the batch's submission passes take;
	// SubmitWaitSeconds the predicted wait for the first one.
	SubmitKey         string  `json:"submit_key" doc:"the limit key the batch's submission passes take"`
	SubmitWaitSeconds float64 `json:"submit_wait_seconds" doc:"predicted wait for the first submission pass on submit_key"`
	// AheadItems and AheadTokens are the work of the same provider
	// profile already in the lane (pending or out at the provider).
	AheadItems  int64 `json:"ahead_items" doc:"items of the same provider profile already in the lane (pending or out at the provider)"`
	AheadTokens int64 `json:"ahead_tokens" doc:"their estimated tokens"`
	// QueueRequests and QueueTokens are the provider's batch queue limits
	// used (0: none known).
	QueueRequests int64 `json:"queue_requests,omitempty" doc:"the provider's batch queue limit in requests used; absent when none is known"`
	QueueTokens   int64 `json:"queue_tokens,omitempty" doc:"the provider's batch queue limit in enqueued tokens used; absent when none is known"`
	// Rounds is how many provider-batch turnarounds of TurnaroundSeconds
	// the work ahead and the manifest take through that queue.
	Rounds            int64   `json:"rounds" doc:"provider-batch turnarounds the work ahead and this manifest take through that queue"`
	TurnaroundSeconds float64 `json:"turnaround_seconds" doc:"the turnaround of one provider batch: the median of the lane's recent ones for the provider profile when turnaround_samples is set, else batch_lane.turnaround"`
	// TurnaroundSamples is how many of the lane's recent provider batches
	// the turnaround is the median of; 0 when it is the configured one.
	TurnaroundSamples int `json:"turnaround_samples,omitempty" doc:"recent provider batches of the profile whose median turnaround was used; absent when the configured one was"`
	// Degraded says the manifest was planned at depth fast because at
	// full depth it was predicted to finish past its deadline; Late that
	// it was accepted (on_overload queue) although predicted past it.
	Degraded bool `json:"degraded,omitempty" doc:"planned at depth fast: at full depth it was predicted to finish past its deadline"`
	Late     bool `json:"late,omitempty" doc:"accepted with on_overload queue although predicted to finish past its deadline"`
	// Detail explains a degraded or late intake.
	Detail string `json:"detail,omitempty" doc:"why it was degraded or accepted late"`
}

// LateError refuses a manifest predicted to finish past its deadline.
type LateError struct {
	// Finish is the predicted completion; Deadline the manifest's.
	Finish, Deadline time.Time
	// RetryAfter is when the lane's backlog will have drained enough for
	// the manifest to fit, as far as the prediction can tell.
	RetryAfter time.Duration
	// Alone is set when the manifest would be late even on an empty lane
	// with an idle submit key: retrying cannot help, only a later deadline
	// or a smaller manifest can.
	Alone bool
	// Detail says why and what to do; it names keys and counts, never
	// content.
	Detail string
}

func (e *LateError) Error() string { return e.Detail }

// Admit decides the intake of a manifest from its predicted completion
// (admission.PredictCompletion over in, whose Work is the manifest at full
// depth) against its deadline: accept it when it finishes in time;
// otherwise, by policy, degrade it to depth fast (fast returns the
// manifest's work at that depth) when that finishes in time, accept it
// late, or refuse it with a *LateError. submitKey names the submission's
// limit key in the explanations.
func Admit(policy string, now, deadline time.Time, submitKey string, in admission.CompletionInput,
	fast func() (admission.BatchWork, error)) (Intake, string, error) {
	if policy == "" {
		policy = OverloadReject
	}
	budget := deadline.Sub(now)
	full := admission.PredictCompletion(in)
	intake := newIntake(policy, now, submitKey, in, full)
	if full.Finish <= budget {
		return intake, pipeline.DepthFull, nil
	}
	late := full.Finish - budget
	why := explain(in, full, submitKey)
	switch policy {
	case OverloadQueue:
		intake.Late = true
		intake.Detail = fmt.Sprintf("accepted with on_overload queue although predicted to finish %s after its deadline (%s); "+
			"items that cannot finish end deadline_exceeded", round(late), why)
		return intake, pipeline.DepthFull, nil
	case OverloadDegrade:
		w, err := fast()
		if err != nil {
			return Intake{}, "", err
		}
		degraded := in
		degraded.Work = w
		c := admission.PredictCompletion(degraded)
		if c.Finish <= budget {
			intake = newIntake(policy, now, submitKey, degraded, c)
			intake.Degraded = true
			intake.Detail = fmt.Sprintf("planned at depth fast: at full depth it was predicted to finish %s after its deadline (%s)",
				round(late), why)
			return intake, pipeline.DepthFast, nil
		}
		late = min(late, c.Finish-budget)
		why += "; at depth fast it would still be late"
	}
	alone := in
	alone.Submit, alone.Ahead = admission.Prediction{}, admission.BatchWork{}
	e := &LateError{Finish: now.Add(full.Finish), Deadline: deadline, RetryAfter: max(time.Second, late),
		Alone: admission.PredictCompletion(alone).Finish > budget}
	if e.Alone {
		e.Detail = fmt.Sprintf("the batch cannot finish before its deadline %s even on an idle lane (%s); "+
			"set a later deadline or split the manifest", deadline.UTC().Format(time.RFC3339), why)
	} else {
		e.Detail = fmt.Sprintf("the batch is predicted to finish %s after its deadline %s (%s); retry after the Retry-After seconds, "+
			"set a later deadline, split the manifest, or send on_overload \"degrade\" (depth fast) or \"queue\" (accept it; "+
			"items that cannot finish end deadline_exceeded)", round(late), deadline.UTC().Format(time.RFC3339), why)
	}
	return Intake{}, "", e
}

func newIntake(policy string, now time.Time, submitKey string, in admission.CompletionInput, c admission.Completion) Intake {
	return Intake{Policy: policy, PredictedFinish: now.Add(c.Finish), SubmitKey: submitKey, SubmitWaitSeconds: c.Submit.Wait.Seconds(),
		AheadItems: in.Ahead.Requests, AheadTokens: in.Ahead.Tokens, QueueRequests: in.Queue.Requests, QueueTokens: in.Queue.Tokens,
		Rounds: c.Rounds, TurnaroundSeconds: in.Turnaround.Seconds()}
}

// explain says what the prediction is made of: the submission's wait, the
// work ahead, the provider's queue and the rounds.
func explain(in admission.CompletionInput, c admission.Completion, submitKey string) string {
	var parts []string
	if c.Submit.Wait > 0 {
		s := fmt.Sprintf("its submission waits about %s on limit key %s", round(c.Submit.Wait), submitKey)
		if c.Submit.Unserved {
			s += " (at least: nothing has leased the submit kind lately)"
		}
		parts = append(parts, s)
	}
	parts = append(parts, fmt.Sprintf("%d items (%d tokens) of this provider are ahead of its %d items (%d tokens)",
		in.Ahead.Requests, in.Ahead.Tokens, in.Work.Requests, in.Work.Tokens))
	var q []string
	if in.Queue.Requests > 0 {
		q = append(q, fmt.Sprintf("%d requests", in.Queue.Requests))
	}
	if in.Queue.Tokens > 0 {
		q = append(q, fmt.Sprintf("%d tokens", in.Queue.Tokens))
	}
	queue := "no known queue limit"
	if len(q) > 0 {
		queue = "a queue of " + strings.Join(q, " and ")
	}
	parts = append(parts, fmt.Sprintf("the provider's batch API (%s) takes them in %d round(s) of about %s",
		queue, c.Rounds, round(in.Turnaround)))
	return strings.Join(parts, "; ")
}

// round shows a duration to the second.
func round(d time.Duration) time.Duration { return d.Round(time.Second) }

// Learned turnaround: the intake uses the median of the lane's recent
// provider batch turnarounds of a profile instead of the configured one
// once it has MinTurnaroundSamples of them, looking at the newest
// TurnaroundBatches batches and at most MaxTurnaroundSamples chunks.
const (
	MinTurnaroundSamples = 5
	MaxTurnaroundSamples = 32
	TurnaroundBatches    = 20
)

// MedianTurnaround is the median of samples (the upper middle one of an
// even count, erring long as the prediction does), and false when there
// are fewer than MinTurnaroundSamples.
func MedianTurnaround(samples []time.Duration) (time.Duration, bool) {
	if len(samples) < MinTurnaroundSamples {
		return 0, false
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return s[len(s)/2], true
}
