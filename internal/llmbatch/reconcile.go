package llmbatch

import (
	"fmt"
	"strings"
)

// Disposition is what becomes of one item after its batch ended.
type Disposition string

const (
	// DispSucceeded: the item has an answer (Outcome.Result.Body) to
	// validate and publish.
	DispSucceeded Disposition = "succeeded"
	// DispFailed: the item failed for good (a permanent per-request error,
	// or a batch the provider refused); Outcome.Reason says why.
	DispFailed Disposition = "failed"
	// DispCanceled: the batch was cancelled before the item ran.
	DispCanceled Disposition = "canceled"
	// DispRequeue: the item did not run or failed transiently (expired,
	// a 5xx, missing from the results); it goes back to the batch lane
	// with its budgets.
	DispRequeue Disposition = "requeue"
)

// Outcome is one item's disposition and its reason (a short machine-
// readable string, never content).
type Outcome struct {
	CustomID    string      `json:"custom_id"`
	Disposition Disposition `json:"disposition"`
	Reason      string      `json:"reason"`
	// Result is the provider's result line; the zero Result for an item
	// absent from the results (then Missing is true).
	Result  Result `json:"result"`
	Missing bool   `json:"missing,omitempty"`
}

// Report is a chunk's reconciliation: exactly one Outcome per item, in the
// chunk's order, plus what the results held that belongs to no item.
type Report struct {
	Outcomes []Outcome
	// Foreign counts result lines whose custom_id is not the chunk's
	// (ignored: a provider or a mix-up in Find; never delivered).
	Foreign int
	// Duplicates counts repeated lines for one custom_id (the first is kept).
	Duplicates int
}

// Reconcile joins results to customIDs. Every item gets one disposition:
// from its result line, or, when it has none, from how the batch ended
// (cancelled: canceled; expired: requeue "expired"; failed: failed with
// the batch's error codes; completed: requeue "missing_from_results").
// It is pure and deterministic, so collecting again after a crash gives
// the same report.
func Reconcile(customIDs []string, st Status, results []Result) Report {
	want := make(map[string]bool, len(customIDs))
	for _, id := range customIDs {
		want[id] = true
	}
	byID := make(map[string]int, len(results)) // custom_id -> index of its first line
	var rep Report
	for i := range results {
		id := results[i].CustomID
		switch _, dup := byID[id]; {
		case !want[id]:
			rep.Foreign++
		case dup:
			rep.Duplicates++
		default:
			byID[id] = i
		}
	}
	rep.Outcomes = make([]Outcome, len(customIDs))
	for i, id := range customIDs {
		j, ok := byID[id]
		if !ok {
			rep.Outcomes[i] = missing(id, st)
			continue
		}
		rep.Outcomes[i] = fromResult(results[j])
	}
	return rep
}

func fromResult(r Result) Outcome {
	o := Outcome{CustomID: r.CustomID, Result: r}
	switch r.Kind {
	case KindSucceeded:
		o.Disposition, o.Reason = DispSucceeded, "succeeded"
	case KindExpired:
		o.Disposition, o.Reason = DispRequeue, "expired"
	case KindCanceled:
		o.Disposition, o.Reason = DispCanceled, "canceled"
	case KindErrored:
		o.Disposition, o.Reason = DispFailed, "errored:"+errorName(r)
		if r.Retryable {
			o.Disposition = DispRequeue
		}
	default:
		o.Disposition, o.Reason = DispRequeue, "unknown_result_kind"
	}
	return o
}

func errorName(r Result) string {
	switch {
	case r.ErrorType != "":
		return r.ErrorType
	case r.Status != 0:
		return fmt.Sprintf("http_%d", r.Status)
	}
	return "unknown"
}

func missing(id string, st Status) Outcome {
	o := Outcome{CustomID: id, Missing: true}
	switch st.End {
	case EndCancelled:
		o.Disposition, o.Reason = DispCanceled, "canceled"
	case EndExpired:
		o.Disposition, o.Reason = DispRequeue, "expired"
	case EndFailed:
		o.Disposition, o.Reason = DispFailed, "batch_failed"
		if len(st.Errors) > 0 {
			o.Reason += ":" + strings.Join(st.Errors, ",")
		}
	default:
		o.Disposition, o.Reason = DispRequeue, "missing_from_results"
	}
	return o
}

// Summary counts the report's dispositions.
func (r Report) Summary() Summary {
	s := Summary{Foreign: r.Foreign, Duplicates: r.Duplicates}
	for _, o := range r.Outcomes {
		switch o.Disposition {
		case DispSucceeded:
			s.Succeeded++
		case DispFailed:
			s.Failed++
		case DispCanceled:
			s.Canceled++
		case DispRequeue:
			s.Requeued++
		}
		if o.Missing {
			s.Missing++
		}
	}
	return s
}

// Check verifies that r accounts for exactly customIDs: one outcome each,
// in order, every one with a known disposition and a reason. It is what
// "zero unexplained items" means.
func (r Report) Check(customIDs []string) error {
	if len(r.Outcomes) != len(customIDs) {
		return fmt.Errorf("reconciliation: %d outcomes for %d items", len(r.Outcomes), len(customIDs))
	}
	for i, o := range r.Outcomes {
		if o.CustomID != customIDs[i] {
			return fmt.Errorf("reconciliation: outcome %d is for %q, want %q", i, o.CustomID, customIDs[i])
		}
		switch o.Disposition {
		case DispSucceeded, DispFailed, DispCanceled, DispRequeue:
		default:
			return fmt.Errorf("reconciliation: item %q has no disposition", o.CustomID)
		}
		if o.Reason == "" {
			return fmt.Errorf("reconciliation: item %q has no reason", o.CustomID)
		}
	}
	return nil
}

// Requeue returns the custom_ids to send again.
func (r Report) Requeue() []string {
	var ids []string
	for _, o := range r.Outcomes {
		if o.Disposition == DispRequeue {
			ids = append(ids, o.CustomID)
		}
	}
	return ids
}
