// Package review is ratelane's code-review plug-in: a unified diff is
// stored once in its region, split into parts reviewed as jobs (by the
// offline rules reviewer, OpenAI, an OpenAI-compatible endpoint or
// Anthropic), validated against the diff, aggregated and published once.
//
// A program enables reviews by handing a *Plugin to ratelane.Config.Plugins:
//
//	rules, _ := review.NewProvider(review.Profile{Name: "rules", Kind: "rules", Region: "us"})
//	reviews := review.New(review.Config{Regions: map[string]review.RegionConfig{
//		"us": {Providers: []review.Provider{rules}},
//	}})
//	cfg.Plugins = append(cfg.Plugins, reviews)
//	client, err := ratelane.NewClient(ctx, cfg)
//	st, err := reviews.Submit(ctx, review.Request{Region: "us", Diff: diff})
//
// The plug-in registers the built-in kinds review (the parent, aggregated
// from its parts by the engine's parts capability), review.part and
// review.github; the routes
// POST /v1/reviews, GET /v1/reviews, GET /v1/reviews/{id} and GET
// /v1/reviews/{id}/sarif; and the inline review command of the ratelane
// binary.
//
// It is a public package, not one under internal/, because a program that
// embeds ratelane must be able to enable reviews, configure providers and
// submit diffs, and it is outside the root package because it links the
// OpenAI and Anthropic SDKs: a program that imports only ratelane does not
// (internal/deptest enforces it).
package review

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/review/batchapi"
	"github.com/ratelane/ratelane/internal/review/batchlane"
	"github.com/ratelane/ratelane/internal/review/chunk"
	"github.com/ratelane/ratelane/internal/review/pipeline"
	"github.com/ratelane/ratelane/internal/review/provider"
	"github.com/ratelane/ratelane/internal/review/reviewapi"
	"github.com/ratelane/ratelane/internal/store"
)

// Profile configures one review provider for one region: its kind (rules,
// openai, openai-compatible, anthropic), model, base URL, API key and
// limit keys.
type Profile = provider.Profile

// Provider is a reviewer bound to one region; make one with NewProvider.
type Provider = provider.Provider

// Publish says where a finished review goes: none, rdjsonl (a file name in
// RegionConfig.RDJSONLDir), webhook (a subscriber id) or github
// ("owner/repo#number").
type Publish = pipeline.Publish

// Result is a finished review: findings, quarantined findings with their
// reasons, parts, depth used and provider usage.
type Result = pipeline.Result

// Progress counts a review's parts.
type Progress = pipeline.Progress

// The built-in kinds the plug-in registers.
const (
	KindReview = pipeline.KindReview
	KindPart   = pipeline.KindPart
	KindGitHub = pipeline.KindGitHub
)

// NewProvider returns the provider a profile describes. The SDK clients it
// builds never retry on their own.
func NewProvider(p Profile) (Provider, error) { return provider.New(p) }

// RegionConfig configures reviews in one region.
type RegionConfig struct {
	// Providers are the region's providers, looked up by profile name. Each
	// must belong to the region: NewClient refuses one of another region.
	Providers []Provider
	// DefaultProvider is the profile used when a request names none;
	// default the first provider.
	DefaultProvider string
	// MaxPartTokens is the estimated-token budget of one part; default
	// 8000.
	MaxPartTokens int
	// MaxFindings caps a review's published findings; default 50.
	MaxFindings int
	// RDJSONLDir is where rdjsonl publications are written, each tenant's
	// in its own subdirectory (RDJSONLDir/<tenant>/<target>); empty
	// refuses them.
	RDJSONLDir string
	// GitHubBaseURL and GitHubToken configure GitHub publication; the base
	// URL defaults to https://api.github.com.
	GitHubBaseURL string
	GitHubToken   string
	// HTTPClient is used for GitHub; default a client with a 30 s timeout.
	HTTPClient *http.Client
	// SweepEvery is how often the engine re-checks the reviews of parts
	// finished since and its missed wake-ups, every 15th time every
	// accepted review (the parts capability's sweep,
	// engine.Kind.SweepEvery); default 2 s.
	SweepEvery time.Duration
	// Batch tunes the region's batch lane (POST /v1/batches), which sends
	// reviews to the batch APIs of the region's openai, openai-compatible
	// and anthropic profiles.
	Batch BatchConfig
}

// Config configures the plug-in.
type Config struct {
	// Regions enables reviews in each named region; a region of the client
	// that is not named answers 501 on the review routes and
	// ErrNotConfigured in Submit.
	Regions map[string]RegionConfig
}

// ErrNotConfigured is returned for a region without reviews.
var ErrNotConfigured = errors.New("review: reviews are not configured in this region")

// Plugin is the review plug-in (a ratelane.Plugin, Router and Commander).
// One Plugin serves one Client: binding a region twice is refused. It is
// safe for concurrent use once NewClient has returned.
type Plugin struct {
	cfg     Config
	mu      sync.Mutex
	regions map[string]*regionRT
}

// New returns the plug-in for cfg; hand it to ratelane.Config.Plugins.
func New(cfg Config) *Plugin { return &Plugin{cfg: cfg, regions: map[string]*regionRT{}} }

// Name is "reviews".
func (p *Plugin) Name() string { return "reviews" }

// Routes returns the /v1/reviews routes (ratelane.Router).
// They include the batch lane's /v1/batches routes.
func (p *Plugin) Routes() mount.Mount {
	reviews, batches := reviewapi.Routes(service{p}), batchapi.Routes(batchService{p})
	return func(h mount.Host) []mount.Route { return append(reviews(h), batches(h)...) }
}

var (
	_ ratelane.Plugin    = (*Plugin)(nil)
	_ ratelane.Router    = (*Plugin)(nil)
	_ ratelane.Commander = (*Plugin)(nil)
)

// regionRT is one region's review runtime.
type regionRT struct {
	region    string
	cfg       RegionConfig
	r         *ratelane.PluginRegion
	st        store.Store
	parts     *pipeline.PartHandler
	github    *pipeline.GitHub
	publisher *pipeline.ReviewPublisher

	batchProviders map[string]batchlane.Entry
	// batchYield is where a manifest's intake rests between its pieces:
	// BatchConfig.Yield in tests; nil means engine.Yield.
	batchYield func(context.Context)
	batches    *batchlane.Handler
}

// Bind enables reviews in one region when the Config names it: it checks
// that every provider belongs to the region and registers the three review
// kinds and the batch lane's two drivers. A review is a parent aggregated
// from its parts by the engine's parts capability (engine.Kind.Aggregate):
// the engine advances it with pipeline.Aggregate's outcome once every part
// is final, exactly once across nodes and crashes, and then publishes it.
// A review sent through the batch lane has no part jobs: its parts are its
// batch items, and its aggregate stays pending until they are final (the
// batch lane wakes it through engine.Jobs.PartsChangedIn, with its lane).
func (p *Plugin) Bind(ctx context.Context, r *ratelane.PluginRegion) error {
	rc, ok := p.cfg.Regions[r.Name()]
	if !ok {
		return nil
	}
	for _, pr := range rc.Providers {
		if pr.Region() != r.Name() {
			return fmt.Errorf("kind %q in region %q is wired to provider %q of region %q; configure each region's providers in its own RegionConfig",
				KindPart, r.Name(), pr.Profile().Name, pr.Region())
		}
	}
	if err := declareLimits(ctx, r, rc); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.regions[r.Name()]; dup {
		return fmt.Errorf("region %q is already bound: a review.Plugin serves one Client", r.Name())
	}
	rt, err := newRegionRT(r, rc)
	if err != nil {
		return err
	}
	for kind, k := range map[string]engine.Kind{
		KindPart: {Handler: engine.HandlerFunc(rt.parts.Handle)},
		// The review's other children (its webhook and GitHub deliveries)
		// are not parts.
		KindReview: {Aggregate: pipeline.Aggregate(pipeline.AggregateConfig{MaxFindings: rc.MaxFindings, Batches: rt.st, Now: r.Config().Now}),
			PartKinds: []string{KindPart},
			Publisher: rt.publisher, SweepEvery: rc.SweepEvery},
		KindGitHub: {Handler: engine.HandlerFunc(rt.github.Handle)},
	} {
		if err := r.Handle(kind, k); err != nil {
			return err
		}
	}
	if err := rt.bindBatches(r, rc); err != nil {
		return err
	}
	p.regions[r.Name()] = rt
	return nil
}

// declareLimits configures, in the region's store, the limit keys of the
// providers that declare their limits (Profile.RequestsPerMinute,
// TokensPerMinute), as the config's limits are at start: a window of the
// declared allowance per minute, paced by a bucket below it. A tokens key
// must admit the largest part the region can cut (its estimated tokens
// plus the answer's cap), else such a part could never start: that is
// refused here, naming the profile.
func declareLimits(ctx context.Context, r *ratelane.PluginRegion, rc RegionConfig) error {
	maxPart := rc.MaxPartTokens
	if maxPart <= 0 {
		maxPart = chunk.DefaultMaxTokens
	}
	declared := map[string]string{} // key -> the profile that declared it
	for _, l := range r.Config().Limits {
		declared[l.Name] = "the client's Limits"
	}
	for _, pr := range rc.Providers {
		prof := pr.Profile().WithDefaults()
		var limits []admission.Config
		if prof.RequestsPerMinute > 0 {
			rq := admission.UpstreamWindow(prof.RequestsKey, prof.RequestsPerMinute, time.Minute, 0, admission.DefaultHeadroom)
			rq.PerStart = true // one request per part, whatever its tokens
			limits = append(limits, rq)
		}
		if prof.TokensPerMinute > 0 {
			largest := float64(maxPart + pipeline.PromptOverheadTokens + prof.MaxOutputTokens)
			if prof.TokensPerMinute < largest {
				return fmt.Errorf("provider %q in region %q: tpm %g is below the largest part's estimated cost, %g tokens (max part tokens %d + prompt %d + max_output_tokens %d): such a part could never start",
					prof.Name, r.Name(), prof.TokensPerMinute, largest, maxPart, pipeline.PromptOverheadTokens, prof.MaxOutputTokens)
			}
			// Twice the largest part, halved by UpstreamWindow: the
			// bucket's burst admits one largest part at once.
			limits = append(limits, admission.UpstreamWindow(prof.TokensKey, prof.TokensPerMinute, time.Minute, 2*largest, admission.DefaultHeadroom))
		}
		for _, l := range limits {
			if by, dup := declared[l.Name]; dup {
				return fmt.Errorf("provider %q in region %q: limit key %q is also configured by %s; give each its own key (requests_key, tokens_key) or declare the limit in one place",
					prof.Name, r.Name(), l.Name, by)
			}
			declared[l.Name] = fmt.Sprintf("provider %q", prof.Name)
			if err := l.Validate(); err != nil {
				return fmt.Errorf("provider %q in region %q: limit key %q: %w", prof.Name, r.Name(), l.Name, err)
			}
			// Declared: applied only when the declaration changed since
			// it was last applied, so an operator's PUT /v1/limits to the
			// key lasts across restarts until rpm/tpm change.
			if _, _, err := r.Store().DeclareLimit(ctx, l, r.Config().Now()); err != nil {
				return fmt.Errorf("provider %q in region %q: limit key %q: %w", prof.Name, r.Name(), l.Name, err)
			}
		}
	}
	return nil
}

func newRegionRT(r *ratelane.PluginRegion, rc RegionConfig) (*regionRT, error) {
	st, cfg := r.Store(), r.Config()
	parts, err := pipeline.NewPartHandler(r.Name(), st, rc.Providers)
	if err != nil {
		return nil, err
	}
	rt := &regionRT{region: r.Name(), cfg: rc, r: r, st: st, parts: parts}
	rt.github = &pipeline.GitHub{BaseURL: rc.GitHubBaseURL, Token: rc.GitHubToken, Client: rc.HTTPClient, Jobs: st, Now: cfg.Now}
	rt.publisher = &pipeline.ReviewPublisher{Region: r.Name(), Jobs: r.Jobs(), DefaultLimit: cfg.DefaultLimit,
		RDJSONLDir: rc.RDJSONLDir, Now: cfg.Now}
	return rt, nil
}

// runtime returns a region's review runtime.
func (p *Plugin) runtime(region string) (*regionRT, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rt := p.regions[region]
	if rt == nil {
		return nil, fmt.Errorf("%w: %q", ErrNotConfigured, region)
	}
	return rt, nil
}

func (rt *regionRT) providerFor(name string) (Provider, error) {
	if name == "" {
		name = rt.cfg.DefaultProvider
	}
	if name == "" && len(rt.cfg.Providers) > 0 {
		name = rt.cfg.Providers[0].Profile().Name
	}
	if p, ok := rt.parts.Provider(name); ok {
		return p, nil
	}
	return nil, fmt.Errorf("review: no review provider %q in region %q", name, rt.region)
}

// ProviderInfo describes one provider profile of a region without its key
// or endpoint: what GET /v1/reviews/providers and ratelane reviews
// providers show.
type ProviderInfo struct {
	Name            string  `json:"name"`
	Kind            string  `json:"kind"`
	Model           string  `json:"model,omitempty"`
	Region          string  `json:"region"`
	Default         bool    `json:"default"`
	RequestsKey     string  `json:"requests_key"`
	TokensKey       string  `json:"tokens_key,omitempty"`
	RPM             float64 `json:"rpm,omitempty"`
	TPM             float64 `json:"tpm,omitempty"`
	MaxOutputTokens int     `json:"max_output_tokens"`
}

// Providers lists a region's provider profiles in configuration order,
// marking the default; ErrNotConfigured for a region without reviews.
func (p *Plugin) Providers(region string) ([]ProviderInfo, error) {
	rt, err := p.runtime(region)
	if err != nil {
		return nil, err
	}
	def := rt.cfg.DefaultProvider
	if def == "" && len(rt.cfg.Providers) > 0 {
		def = rt.cfg.Providers[0].Profile().Name
	}
	out := make([]ProviderInfo, 0, len(rt.cfg.Providers))
	for _, pr := range rt.cfg.Providers {
		prof := pr.Profile().WithDefaults()
		out = append(out, ProviderInfo{Name: prof.Name, Kind: prof.Kind, Model: prof.Model, Region: prof.Region,
			Default: prof.Name == def, RequestsKey: prof.RequestsKey, TokensKey: prof.TokensKey,
			RPM: prof.RequestsPerMinute, TPM: prof.TokensPerMinute, MaxOutputTokens: prof.MaxOutputTokens})
	}
	return out, nil
}
