package pipeline

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/finding"
)

// Aggregate returns the review kind's aggregator (the engine's parts
// capability calls it once every part of a review is final): it merges
// the valid findings of the succeeded parts (finding.Aggregate, at most
// maxFindings; 0 means finding.DefaultMaxFindings) into the review's
// Result, partial when a part failed. The review then goes validated and
// its Publisher delivers it once; a review none of whose parts succeeded
// ends terminal with the first failed part's reason (its Result names the
// failed parts), and one whose payload names another review's diff (a
// forged row) ends terminal with permanent_error and no result. It is a
// function of the review and its parts, with no side effect, so running it
// again after a crash or on two nodes at once is harmless.
func Aggregate(maxFindings int) engine.AggregatorFunc {
	return func(_ context.Context, parent *job.Job, parts []*job.Job) job.Outcome {
		args, err := decode[Args](parent.Payload)
		if err != nil {
			return permanent("review payload does not decode")
		}
		if args.DiffObject != "" && args.DiffObject != parent.ID {
			// A review's diff object is named after the review; any other
			// name is another review's diff.
			return permanent("review names another review's diff")
		}
		res, err := Build(args, parts, finding.AggregateOptions{MaxFindings: maxFindings})
		if err != nil {
			// Build's error names the part, never its content.
			return permanent("aggregate the parts: " + err.Error())
		}
		out, err := json.Marshal(res)
		if err != nil {
			return permanent("review result is not JSON")
		}
		if res.Parts.Total > 0 && res.Parts.Succeeded == 0 {
			// Nothing was reviewed: there is nothing to publish.
			o := permanent("no part of the review succeeded")
			if len(res.FailedParts) > 0 {
				o.Reason = job.Reason(res.FailedParts[0].Reason)
			}
			o.Result = out
			return o
		}
		return job.Outcome{Class: job.ClassSuccess, Result: out}
	}
}

// Build merges the parts of a review into its Result. Parts not yet final
// count as pending; Build never fails on a part's content.
func Build(args Args, parts []*job.Job, opts finding.AggregateOptions) (Result, error) {
	res := Result{SchemaVersion: "v1", Depth: args.Depth, Findings: []finding.Finding{}, Quarantined: []Quarantined{}}
	res.Parts.Total = max(args.Parts, len(parts))
	var lists [][]finding.Finding
	for _, pj := range parts {
		switch pj.State {
		case job.StatePublished, job.StateValidated:
			pr, err := decode[PartResult](pj.Result)
			if err != nil {
				return res, fmt.Errorf("part %s: result does not decode", pj.ID)
			}
			res.Parts.Succeeded++
			lists = append(lists, pr.Findings)
			res.Quarantined = append(res.Quarantined, pr.Quarantined...)
			res.Usage = res.Usage.Add(pr.Usage)
		case job.StateTerminal:
			res.Parts.Failed++
			pa, _ := decode[PartArgs](pj.Payload)
			res.FailedParts = append(res.FailedParts, PartFailure{Index: pa.Index, JobID: pj.ID, Reason: string(pj.Reason)})
		default:
			res.Parts.Pending++
		}
	}
	res.Partial = res.Parts.Failed > 0
	agg, err := finding.Aggregate(lists, opts)
	if err != nil {
		return res, err
	}
	if agg.Findings != nil {
		res.Findings = agg.Findings
	}
	res.Capped, res.Dropped = agg.Capped, agg.Dropped
	return res, nil
}
