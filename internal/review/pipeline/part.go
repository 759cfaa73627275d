package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
	fs, err := finding.ValidateOutput(resp.Output)
	if err != nil {
		// The error names the kind of failure, never the output.
		o := job.Outcome{Class: job.ClassInvalidOutput, Err: err.Error(), Hints: resp.Hints, Usage: resp.Usage.Total()}
		return PartResult{}, tokenUsage(p.Profile(), o)
	}
	valid, quarantined := finding.Verify(part, fs)
	res := PartResult{
		Findings: valid, Quarantined: make([]Quarantined, len(quarantined)),
		Usage: resp.Usage, Depth: depth, Provider: p.Profile().Name,
	}
	if res.Findings == nil {
		res.Findings = []finding.Finding{}
	}
	for i, q := range quarantined {
		res.Quarantined[i] = Quarantined{Finding: q.Finding, Reason: q.Reason}
	}
	o := tokenUsage(p.Profile(), job.Outcome{Class: job.ClassSuccess, Hints: resp.Hints, Usage: resp.Usage.Total()})
	return res, o
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

// PartHandler is the handler of KindPart jobs of one region: it loads the
// part's text by reference from the region's store and reviews it with the
// profile the part names. It implements engine.Handler.
type PartHandler struct {
	region    string
	objects   ObjectGetter
	providers map[string]provider.Provider
}

// NewPartHandler returns the part handler of region. Every provider must
// belong to region: a provider of another region is an error naming both.
func NewPartHandler(region string, objects ObjectGetter, providers []provider.Provider) (*PartHandler, error) {
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

// Handle runs one attempt of a part job.
func (h *PartHandler) Handle(ctx context.Context, j *job.Job) job.Outcome {
	args, err := decode[PartArgs](j.Payload)
	if err != nil {
		return job.Outcome{Class: job.ClassPermanent, Err: "part payload does not decode"}
	}
	p, ok := h.providers[args.Provider]
	if !ok {
		return job.Outcome{Class: job.ClassPermanent, Err: fmt.Sprintf("no provider %q in region %s", args.Provider, h.region)}
	}
	obj, err := h.objects.GetObject(ctx, ObjectPart, args.Object)
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
