package reviewapi

import (
	"errors"
	"net/http"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
)

// ProviderInfo is one review provider profile as the API shows it: what a
// caller names in POST /v1/reviews and how it is paced. It never carries
// the key (not even whether one is set or where it came from) nor the
// base URL, which may name an operator's internal host.
type ProviderInfo struct {
	Name            string  `json:"name" doc:"what POST /v1/reviews names in provider"`
	Kind            string  `json:"kind" enum:"rules,openai,openai-compatible,anthropic"`
	Model           string  `json:"model,omitempty"`
	Region          string  `json:"region" doc:"the one region whose diffs this provider may see"`
	Default         bool    `json:"default" doc:"used when a review names no provider"`
	RequestsKey     string  `json:"requests_key" doc:"the limit key counting its requests"`
	TokensKey       string  `json:"tokens_key,omitempty" doc:"the limit key counting its tokens, when parts cost tokens"`
	RPM             float64 `json:"rpm,omitempty" doc:"declared requests per minute, paced on requests_key"`
	TPM             float64 `json:"tpm,omitempty" doc:"declared tokens per minute, paced on tokens_key"`
	MaxOutputTokens int     `json:"max_output_tokens" doc:"the answer cap of one call, part of a part's estimated cost"`
}

// providerList is the answer of GET /v1/reviews/providers.
type providerList struct {
	Providers []ProviderInfo `json:"providers"`
}

// handleListProviders lists the provider profiles of the request's
// regions, skipping regions without reviews unless one was named.
func (s *server) handleListProviders(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	regions, err := s.h.SearchRegions(r, p)
	if err != nil {
		return err
	}
	explicit := r.URL.Query().Get("region") != ""
	out := providerList{Providers: []ProviderInfo{}}
	var unconfigured []string
	for _, region := range regions {
		ps, err := s.svc.Providers(r.Context(), region)
		switch {
		case errors.Is(err, ErrNotConfigured) && !explicit:
			unconfigured = append(unconfigured, region)
			continue
		case err != nil:
			return reviewError(err, region)
		}
		out.Providers = append(out.Providers, ps...)
	}
	if len(regions) > 0 && len(unconfigured) == len(regions) {
		return notConfigured(unconfigured...)
	}
	return mount.WriteJSON(w, http.StatusOK, out)
}
