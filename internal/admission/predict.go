package admission

import "time"

// KeyLoad is one limit key as a queue-wait prediction sees it: its live
// state and the cost already queued on it ahead of a new job (in the job's
// lane and every lane leased before it; for a PerStart key, the number of
// those jobs).
type KeyLoad struct {
	State State
	Ahead int64
}

// WaitInput is everything PredictWait uses; it reads nothing else, so a
// prediction is pure and time-explicit.
type WaitInput struct {
	// Now is the time of the prediction.
	Now time.Time
	// Cost is the new job's own cost on each of its keys (at least 1).
	Cost int64
	// Keys are the job's limit keys.
	Keys []KeyLoad
	// Served says something leases the job's kind: an engine that runs it,
	// or an external worker that leased it recently.
	Served bool
	// OldestReady is the age of the oldest job of the lane that is ready
	// to run now; it is only read when the kind is not served.
	OldestReady time.Duration
}

// Prediction is a queue-wait estimate.
type Prediction struct {
	// Wait is the predicted time until every key admits the job and, for
	// a kind nothing serves, at least the lane's current age.
	Wait time.Duration
	// Unserved is set when nothing was seen leasing the kind: Wait is then
	// a lower bound, not an estimate, since nothing drains the queue.
	Unserved bool
}

// PredictWait estimates how long a new job would wait before it starts.
// A job needs every key, so the slowest key decides (State.Wait: every
// shape of the key, saturating). When
// nothing serves the job's kind, the keys' pace says nothing: the job
// waits at least as long as the lane's oldest ready job already has, and
// Unserved says the estimate is a lower bound. (A lane whose oldest job is
// 733 s old with nothing leasing its kind predicts 733 s, not the 0 s its
// idle keys would give.) Concurrency caps are ignored: their wait depends
// on how long jobs run, which the queue does not know.
func PredictWait(in WaitInput) Prediction {
	cost := max(in.Cost, 1)
	var p Prediction
	for i := range in.Keys {
		p.Wait = max(p.Wait, in.Keys[i].State.Wait(in.Now, in.Keys[i].Ahead+in.Keys[i].State.Charge(cost)))
	}
	if !in.Served {
		p.Unserved = true
		p.Wait = max(p.Wait, in.OldestReady)
	}
	return p
}

// BatchWork is an amount of batch-lane work: provider requests (batch
// items) and their estimated tokens (prompt and answer cap).
type BatchWork struct {
	Requests int64
	Tokens   int64
}

// CompletionInput is everything PredictCompletion uses: the wait of the
// batch's submission (PredictWait's answer, so that there is one queue-wait
// prediction) and what the provider's batch API can take at once.
type CompletionInput struct {
	// Submit is when the batch's first submission pass starts:
	// PredictWait over the submit driver's limit key (its shapes, learned
	// rate and pause, and the passes of other batches queued on it).
	Submit Prediction
	// Work is the new manifest; Ahead is what the lane already holds for
	// the same provider profile (items pending or out at the provider),
	// which goes out first.
	Work, Ahead BatchWork
	// Queue is the provider's processing-queue capacity: at most this
	// much work is in its batches at once (Anthropic bounds requests in
	// the processing queue, OpenAI enqueued tokens per model). A zero
	// field is no bound.
	Queue BatchWork
	// Turnaround is how long one provider batch takes from creation to
	// results (the lane's MinTurnaround).
	Turnaround time.Duration
}

// Completion is a batch's predicted completion.
type Completion struct {
	// Submit is the submission pass's predicted wait.
	Submit Prediction
	// Rounds is how many provider-batch turnarounds the work ahead and
	// the manifest take one after another through the provider's queue;
	// at least 1.
	Rounds int64
	// Finish is the predicted time from now until every item of the
	// manifest is final: Submit.Wait plus Rounds turnarounds, at most
	// MaxAhead.
	Finish time.Duration
}

// PredictCompletion estimates when a manifest sent to the batch lane is
// done. Its submission starts after the submit key's predicted wait
// (PredictWait: a paused or slow key, a backlog of other batches' passes);
// then the provider runs batches in rounds: everything that fits in its
// queue at once takes one turnaround, and the work ahead fills the queue
// first. The estimate errs long where it must guess: items ahead that are
// already out at the provider count as a whole round, and a round is a
// full turnaround even when only a few items spill into it.
func PredictCompletion(in CompletionInput) Completion {
	rounds := int64(1)
	for _, q := range [][2]int64{
		{in.Ahead.Requests + in.Work.Requests, in.Queue.Requests},
		{in.Ahead.Tokens + in.Work.Tokens, in.Queue.Tokens},
	} {
		if need, capacity := q[0], q[1]; capacity > 0 && need > 0 {
			rounds = max(rounds, (need+capacity-1)/capacity)
		}
	}
	c := Completion{Submit: in.Submit, Rounds: rounds}
	c.Finish = min(MaxAhead, in.Submit.Wait+dur(float64(rounds)*float64(max(in.Turnaround, 0))))
	return c
}
