package provider

import (
	"context"
	"encoding/json"

	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/review/rules"
)

// Rules is the offline provider: the rules reviewer, with no network and
// no quota. It answers through the same output path as a model (JSON that
// ValidateOutput checks), so every review path runs without a provider.
type Rules struct {
	profile Profile
}

// Region returns the profile's region.
func (r *Rules) Region() string { return r.profile.Region }

// Profile returns the profile.
func (r *Rules) Profile() Profile { return r.profile }

// Review runs the rules over the part's added lines. Depth does not change
// what rules see: they only ever look at added lines.
func (r *Rules) Review(ctx context.Context, req Request) (Response, error) {
	fs := rules.Review(req.Part)
	if fs == nil {
		fs = []finding.Finding{}
	}
	out, err := json.Marshal(finding.Output{Findings: fs})
	if err != nil {
		return Response{}, err
	}
	return Response{Output: out}, nil
}
