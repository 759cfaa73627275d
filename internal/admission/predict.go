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
