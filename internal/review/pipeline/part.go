package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/review/provider"
	"github.com/ratelane/ratelane/internal/store"
)

// ReviewPart makes one provider call for one part and checks its output:
// output that does not parse or fails the schema is ClassInvalidOutput (the
// schema budget), findings that fail Verify are quarantined with their
// reason. It returns the part's result and the attempt's outcome; the
// result is meaningful only when the outcome is a success. It is what a
// part job does and what the inline `ratelane review` does per part.
func ReviewPart(ctx context.Context, p provider.Provider, part *diff.Diff, depth string) (PartResult, job.Outcome) {
	resp, err := p.Review(ctx, provider.Request{Part: part, Depth: provider.Depth(depth)})
	if err != nil {
		return PartResult{}, tokenUsage(p.Profile(), provider.OutcomeOf(err))
	}
	res, err := CheckOutput(part, resp.Output, depth, p.Profile().Name, resp.Usage)
	if err != nil {
		// The error names the kind of failure, never the output.
		o := job.Outcome{Class: job.ClassInvalidOutput, Err: err.Error(), Hints: resp.Hints, Usage: resp.Usage.Total()}
		return PartResult{}, tokenUsage(p.Profile(), o)
	}
	o := tokenUsage(p.Profile(), job.Outcome{Class: job.ClassSuccess, Hints: resp.Hints, Usage: resp.Usage.Total()})
	return res, o
}

// CheckOutput is the one validation of a reviewer's answer for a part,
// whichever lane it came through (a part job, the inline command, a
// provider batch's result line): output that does not parse or fails the
// schema is an error (naming the kind of failure, never the output), and
// findings that fail Verify against the part's diff are quarantined with
// their reason.
func CheckOutput(part *diff.Diff, output []byte, depth, providerName string, usage provider.Usage) (PartResult, error) {
	fs, err := finding.ValidateOutput(output)
	if err != nil {
		return PartResult{}, err
	}
	valid, quarantined := finding.Verify(part, fs)
	res := PartResult{
		Findings: valid, Quarantined: make([]Quarantined, len(quarantined)),
		Usage: usage, Depth: depth, Provider: providerName,
	}
	if res.Findings == nil {
		res.Findings = []finding.Finding{}
	}
	for i, q := range quarantined {
		res.Quarantined[i] = Quarantined{Finding: q.Finding, Reason: q.Reason}
	}
	return res, nil
}

// tokenUsage keeps the reported usage only when parts cost tokens: a part
// that costs one request must not be reconciled in tokens.
func tokenUsage(p provider.Profile, o job.Outcome) job.Outcome {
	if p.TokensKey == "" {
		o.Usage = 0
	}
	return o
}

// ObjectGetter reads region objects; a store satisfies it.
type ObjectGetter interface {
	GetObject(ctx context.Context, kind, id string) (store.Object, error)
}

// PartStore is what a part handler reads: the part's text (an object)
// and its review (the parent job). A store satisfies it.
type PartStore interface {
	ObjectGetter
	JobGetter
}

// PartHandler is the handler of KindPart jobs of one region: it loads the
// part's text by reference from the region's store and reviews it with the
// profile the part names. It implements engine.Handler.
type PartHandler struct {
	region    string
	objects   PartStore
	providers map[string]provider.Provider
}

// NewPartHandler returns the part handler of region. Every provider must
// belong to region: a provider of another region is an error naming both.
func NewPartHandler(region string, objects PartStore, providers []provider.Provider) (*PartHandler, error) {
	h := &PartHandler{region: region, objects: objects, providers: map[string]provider.Provider{}}
	for _, p := range providers {
		if p.Region() != region {
			return nil, fmt.Errorf("review provider %q belongs to region %q and cannot serve region %q", p.Profile().Name, p.Region(), region)
		}
		h.providers[p.Profile().Name] = p
	}
	return h, nil
}

// Region returns the region the handler serves.
func (h *PartHandler) Region() string { return h.region }

// Provider returns the named provider of the handler's region.
func (h *PartHandler) Provider(name string) (provider.Provider, bool) {
	p, ok := h.providers[name]
	return p, ok
}

// Handle runs one attempt of a part job. Before loading anything it checks
// that the part's review is its parent job, of the part's own tenant and
// region, and that the object it names is a part of that review: parts are
// created by ratelane alone, so a mismatch is a bug or a forged row, and
// the part ends permanent without quoting anyone's diff.
func (h *PartHandler) Handle(ctx context.Context, j *job.Job) job.Outcome {
	args, err := decode[PartArgs](j.Payload)
	if err != nil {
		return job.Outcome{Class: job.ClassPermanent, Err: "part payload does not decode"}
	}
	if args.Review != j.ParentID || !strings.HasPrefix(args.Object, args.Review+"/") {
		return permanent("part names a review or part object other than its parent review")
	}
	if _, o, ok := checkReview(ctx, h.objects, j, args.Review); !ok {
		return o
	}
	p, ok := h.providers[args.Provider]
	if !ok {
		return job.Outcome{Class: job.ClassPermanent, Err: fmt.Sprintf("no provider %q in region %s", args.Provider, h.region)}
	}
	kind, id := args.PartObject()
	obj, err := h.objects.GetObject(ctx, kind, id)
	if errors.Is(err, store.ErrNotFound) {
		return job.Outcome{Class: job.ClassPermanent, Err: "part object is missing"}
	} else if err != nil {
		return job.Outcome{Class: job.ClassTransient, Err: "load part object"}
	}
	part, err := diff.Parse(obj.Body)
	if err != nil {
		return job.Outcome{Class: job.ClassPermanent, Err: "part object does not parse: " + err.Error()}
	}
	res, o := ReviewPart(ctx, p, part, args.Depth)
	if o.Class != job.ClassSuccess {
		return o
	}
	if o.Result, err = json.Marshal(res); err != nil {
		return job.Outcome{Class: job.ClassPermanent, Err: "part result is not JSON"}
	}
	return o
}

// checkReview loads review id for built-in job j (a part or a GitHub
// publication) and checks that it is a review of j's tenant and region.
// An unknown review and a foreign one end the job alike (permanent); a
// failed read is transient.
func checkReview(ctx context.Context, jobs JobGetter, j *job.Job, id string) (*job.Job, job.Outcome, bool) {
	if id == "" {
		return nil, permanent("job names no review"), false
	}
	rv, err := jobs.Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, permanent("review not found"), false
	case err != nil:
		return nil, job.Outcome{Class: job.ClassTransient, Err: "load review"}, false
	case rv.Kind != KindReview || rv.Tenant != j.Tenant || rv.Region != j.Region:
		return nil, permanent("review belongs to another tenant or region than the job"), false
	}
	return rv, job.Outcome{}, true
}

func permanent(msg string) job.Outcome {
	return job.Outcome{Class: job.ClassPermanent, Reason: job.ReasonPermanentError, Err: msg}
}
