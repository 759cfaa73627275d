package main

// This file reads the config file's providers section: the review
// providers of each region, with their keys taken from the environment or
// a file, never from the config file itself.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ratelane/ratelane/review"
)

// providerConfig is one entry of the config file's providers section.
type providerConfig struct {
	// Name is what POST /v1/reviews names in provider.
	Name string `json:"name"`
	// Kind is rules, openai, openai-compatible or anthropic.
	Kind string `json:"kind"`
	// Region is the region the endpoint itself belongs to (its data
	// residency), declared by the operator: it must be the region the
	// entry is listed under, as a store must hold the region it serves.
	Region string `json:"region"`
	// BaseURL is the API base (…/v1 for openai kinds, the host root for
	// anthropic); Endpoint is accepted as its synonym.
	BaseURL  string `json:"base_url"`
	Endpoint string `json:"endpoint"`
	Model    string `json:"model"`
	// APIKeyEnv names the environment variable holding the key;
	// APIKeyFile the file holding it (surrounding whitespace trimmed).
	APIKeyEnv  string `json:"api_key_env"`
	APIKeyFile string `json:"api_key_file"`
	// APIKey is read only to refuse it: a key inline in a config file is
	// copied, committed and printed with it.
	APIKey json.RawMessage `json:"api_key"`
	// Timeout bounds one call ("60s"); QuotaPause is how long the keys
	// pause after a spent-quota answer ("1h").
	Timeout    string `json:"timeout"`
	QuotaPause string `json:"quota_pause"`
	// MaxOutputTokens caps each answer.
	MaxOutputTokens int `json:"max_output_tokens"`
	// RPM and TPM are the provider's declared limits, paced on RequestsKey
	// and TokensKey (defaults "<kind>:<model>" and "<kind>:<model>:tokens").
	RPM         float64 `json:"rpm"`
	TPM         float64 `json:"tpm"`
	RequestsKey string  `json:"requests_key"`
	TokensKey   string  `json:"tokens_key"`
	// BatchQueueRequests and BatchQueueTokens are the account's batch
	// queue limits at the provider (requests, enqueued tokens), which the
	// batch lane's intake predicts completion from; 0 keeps the default.
	BatchQueueRequests int64 `json:"batch_queue_requests"`
	BatchQueueTokens   int64 `json:"batch_queue_tokens"`
}

// keySource is where provider keys are read from: the process environment
// and files (osKeys); tests pass their own.
type keySource struct {
	getenv   func(string) (string, bool)
	readFile func(string) ([]byte, error)
}

// osKeys reads keys from the real environment and file system.
var osKeys = keySource{getenv: os.LookupEnv, readFile: os.ReadFile}

// buildProviders turns the providers section into each region's review
// providers. Every mistake is an error naming the field
// (providers.REGION[i].FIELD) and never the key: an unknown kind, a
// missing or empty key, a bad URL, a provider whose declared region is
// not the region it is listed under, a region this node does not serve.
// Regions the section does not name keep the offline rules provider.
func buildProviders(section map[string][]providerConfig, served []string, keys keySource) (map[string][]review.Provider, error) {
	out := map[string][]review.Provider{}
	for _, region := range slices.Sorted(maps.Keys(section)) {
		entries := section[region]
		if !slices.Contains(served, region) {
			return nil, fmt.Errorf("providers.%s: region %q is not served by this node (regions %s)", region, region, strings.Join(served, ", "))
		}
		if len(entries) == 0 {
			return nil, fmt.Errorf("providers.%s: lists no provider; remove it to keep the offline rules provider", region)
		}
		names := map[string]bool{}
		for i, pc := range entries {
			field := fmt.Sprintf("providers.%s[%d]", region, i)
			if pc.Name != "" {
				field += fmt.Sprintf(" (%q)", pc.Name)
			}
			if names[pc.Name] {
				return nil, fmt.Errorf("%s: name %q is used twice in region %s", field, pc.Name, region)
			}
			names[pc.Name] = true
			p, err := pc.provider(region, keys)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
			out[region] = append(out[region], p)
		}
	}
	return out, nil
}

// provider builds one entry's provider for region.
func (pc providerConfig) provider(region string, keys keySource) (review.Provider, error) {
	switch {
	case pc.Name == "":
		return nil, errors.New("name is required")
	case pc.Kind == "":
		return nil, errors.New("kind is required: rules, openai, openai-compatible or anthropic")
	case pc.Region == "":
		return nil, fmt.Errorf("region is required: the region the endpoint belongs to (here %q)", region)
	case pc.Region != region:
		return nil, fmt.Errorf("region: the provider's endpoint declares region %q but is configured for region %q; "+
			"a region's diffs may only reach its own endpoints: list it under providers.%s or give region %s an endpoint of its own",
			pc.Region, region, pc.Region, region)
	case len(pc.APIKey) > 0:
		return nil, errors.New("api_key: a key inline in the config file is refused (the file is copied, committed and printed); " +
			"name an environment variable with api_key_env or a file with api_key_file")
	case pc.BaseURL != "" && pc.Endpoint != "" && pc.BaseURL != pc.Endpoint:
		return nil, errors.New("base_url and endpoint are the same setting; give one")
	}
	prof := review.Profile{Name: pc.Name, Kind: pc.Kind, Region: pc.Region, Model: pc.Model, BaseURL: pc.BaseURL,
		MaxOutputTokens: pc.MaxOutputTokens, RequestsKey: pc.RequestsKey, TokensKey: pc.TokensKey,
		RequestsPerMinute: pc.RPM, TokensPerMinute: pc.TPM, BatchQueueRequests: pc.BatchQueueRequests, BatchQueueTokens: pc.BatchQueueTokens}
	if prof.BaseURL == "" {
		prof.BaseURL = pc.Endpoint
	}
	for _, d := range []struct {
		field, s string
		dst      *time.Duration
	}{{"timeout", pc.Timeout, &prof.Timeout}, {"quota_pause", pc.QuotaPause, &prof.QuotaPause}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%s: want a positive duration such as 60s, not %q", d.field, d.s)
		}
		*d.dst = v
	}
	key, err := pc.key(keys)
	if err != nil {
		return nil, err
	}
	prof.APIKey = key
	p, err := review.NewProvider(prof)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// key reads the entry's API key. Errors name the variable or the file,
// never the content.
func (pc providerConfig) key(keys keySource) (string, error) {
	needs := pc.Kind == "openai" || pc.Kind == "anthropic"
	switch {
	case pc.APIKeyEnv != "" && pc.APIKeyFile != "":
		return "", errors.New("api_key_env and api_key_file: give one")
	case pc.Kind == "rules" && (pc.APIKeyEnv != "" || pc.APIKeyFile != ""):
		return "", errors.New("api_key_env, api_key_file: the rules provider needs no key")
	case pc.APIKeyEnv != "":
		v, ok := keys.getenv(pc.APIKeyEnv)
		if !ok {
			return "", fmt.Errorf("api_key_env: environment variable %s is not set", pc.APIKeyEnv)
		}
		if v = strings.TrimSpace(v); v == "" {
			return "", fmt.Errorf("api_key_env: environment variable %s is empty", pc.APIKeyEnv)
		}
		return v, nil
	case pc.APIKeyFile != "":
		b, err := keys.readFile(pc.APIKeyFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("api_key_file: %s does not exist", pc.APIKeyFile)
		case errors.Is(err, fs.ErrPermission):
			return "", fmt.Errorf("api_key_file: %s is not readable by this process", pc.APIKeyFile)
		case err != nil:
			// The path error names the file and the cause, not the content.
			return "", fmt.Errorf("api_key_file: cannot read %s", pc.APIKeyFile)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("api_key_file: %s is empty", pc.APIKeyFile)
		}
		if strings.ContainsAny(v, "\r\n") {
			return "", fmt.Errorf("api_key_file: %s holds more than one line; it must hold the key alone", pc.APIKeyFile)
		}
		return v, nil
	case needs:
		return "", fmt.Errorf("api_key_env or api_key_file is required for kind %s", pc.Kind)
	}
	return "", nil // openai-compatible endpoints (Ollama, a local vLLM) may take no key
}
