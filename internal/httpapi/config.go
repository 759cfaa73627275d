package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Authenticator resolves a bearer token to the principal it acts as. It
// must return an error wrapping ErrUnknownKey for a token it does not know
// and ErrRevokedKey for a revoked one (both answered 401); any other error
// means the key store could not answer and is answered 503, so that an
// outage never looks like a bad key to clients.
type Authenticator interface {
	Authenticate(ctx context.Context, bearer string) (auth.Principal, error)
}

// Errors an Authenticator or KeyManager returns so the API can answer 401
// (and 404 for revoking an unknown key) rather than 503 or 500.
var (
	// ErrUnknownKey: no API key matches the token or id.
	ErrUnknownKey = errors.New("unknown API key")
	// ErrRevokedKey: the API key was revoked.
	ErrRevokedKey = errors.New("revoked API key")
)

// KeyInfo describes an API key without its secret.
type KeyInfo struct {
	// ID is the key's public prefix; safe to log and show.
	ID string `json:"id"`
	// Name is a label for people, e.g. "billing-service".
	Name string `json:"name,omitempty"`
	// Tenant scopes the jobs the key creates and reads.
	Tenant string `json:"tenant"`
	// Role is what the key may do.
	Role auth.Role `json:"role"`
	// Regions the key may use; empty means every region.
	Regions []string `json:"regions,omitempty"`
	// CreatedAt is when the key was created.
	CreatedAt time.Time `json:"created_at"`
	// RevokedAt is when the key was revoked; zero while it is active.
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// KeyManager creates, lists and revokes API keys for the /v1/keys
// endpoints. Create returns the secret, which the API shows exactly once.
// Revoke of an id it does not know returns an error wrapping ErrUnknownKey.
type KeyManager interface {
	Create(ctx context.Context, tenant string, role auth.Role, regions []string, name string) (secret string, info KeyInfo, err error)
	List(ctx context.Context) ([]KeyInfo, error)
	Revoke(ctx context.Context, id string) error
}

// Config configures a Server. Zero fields take the defaults documented on
// each; New applies WithDefaults and validates the result.
type Config struct {
	// Regions maps each region name to its store (required). A store whose
	// Region() differs from its name is a start-up error: a region's
	// content must never land in another region's store.
	Regions map[string]store.Store
	// Jobs maps each region to the one writer of its job state
	// (engine.Jobs), required for every region: external workers' leases
	// and outcomes, cancels and redrives go through it. Pass the writer the
	// region's engine uses (ratelane.Client does), so that the engine and
	// HTTP workers share one batch-share policy, one backoff and one
	// Observer; the server never builds a writer of its own, so no region
	// ever has two.
	Jobs map[string]*engine.Jobs
	// Notify, when set, wakes the region's engine after an insert, a
	// redrive or a finished attempt, so it leases at once rather than at
	// its next poll. Long polls of this server are woken in any case.
	Notify func(region string)
	// Handles, when set, reports whether a handler for kind runs inside
	// this process in region; GET /v1/jobs/{id} says "nothing handles kind
	// X" when neither it nor a recent external worker does.
	Handles func(region, kind string) bool
	// Auth resolves bearer tokens (required).
	Auth Authenticator
	// Keys serves /v1/keys; nil means the key endpoints are not served.
	Keys KeyManager
	// Mounts add plug-ins' routes (reviews' /v1/reviews, for one), served
	// with the same authentication, role, request-rate, region and
	// problem+json handling as the core's and listed in GET /v1 and the
	// OpenAPI document. A pattern served twice is a start-up error.
	Mounts []mount.Mount
	// DefaultLimit configures limit keys first named by a job; the zero
	// value paces nothing.
	DefaultLimit admission.Config
	// InteractiveBudget is the interactive lane's latency budget; default 30 s.
	InteractiveBudget time.Duration
	// BatchBudget is the batch lane's latency budget; default 24 h.
	BatchBudget time.Duration
	// Registerer, when set, receives ratelane_api_requests_total{route,status}.
	Registerer prometheus.Registerer
	// Gatherer, when set, is served at GET /metrics; nil answers 404.
	Gatherer prometheus.Gatherer
	// Now is the clock; default time.Now. Tests replace it.
	Now func() time.Time
	// Logger receives routes, statuses and ids, never payloads; default
	// slog.Default().
	Logger *slog.Logger
	// Version is reported by /healthz, GET /v1 and the OpenAPI document;
	// default "dev".
	Version string
	// RequestRate is each API key's sustained request rate per second;
	// default 100. Negative disables request limiting.
	RequestRate float64
	// RequestBurst is how many requests a key may make at once; default
	// 2 * RequestRate (at least 1).
	RequestBurst int
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.InteractiveBudget = cmp.Or(c.InteractiveBudget, job.DefaultInteractiveBudget)
	c.BatchBudget = cmp.Or(c.BatchBudget, job.DefaultBatchBudget)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Version = cmp.Or(c.Version, "dev")
	c.RequestRate = cmp.Or(c.RequestRate, 100)
	c.RequestBurst = cmp.Or(c.RequestBurst, max(1, int(math.Ceil(2*c.RequestRate))))
	return c
}

func (c Config) validate() error {
	if len(c.Regions) == 0 {
		return errors.New("httpapi: Regions must name at least one region and its store")
	}
	for name, st := range c.Regions {
		if st == nil {
			return fmt.Errorf("httpapi: region %q has no store", name)
		}
		if st.Region() != name {
			return fmt.Errorf("httpapi: region %q is wired to the store of region %q; each region needs its own store", name, st.Region())
		}
		w := c.Jobs[name]
		if w == nil {
			return fmt.Errorf("httpapi: region %q has no writer of job state; Jobs needs the region engine's (Engine.Jobs)", name)
		}
		if w.Store() != st {
			return fmt.Errorf("httpapi: region %q: Jobs writes another store than Regions names", name)
		}
	}
	switch {
	case c.Auth == nil:
		return errors.New("httpapi: Auth is required: every /v1 endpoint but the docs needs an API key")
	case c.InteractiveBudget < time.Second || c.BatchBudget < time.Second:
		return fmt.Errorf("httpapi: InteractiveBudget and BatchBudget must be at least 1s, got %v and %v", c.InteractiveBudget, c.BatchBudget)
	case c.RequestBurst < 1:
		return fmt.Errorf("httpapi: RequestBurst must be at least 1, got %d", c.RequestBurst)
	}
	def := c.DefaultLimit
	def.Name = "default"
	if err := def.Validate(); err != nil {
		return fmt.Errorf("httpapi: DefaultLimit: %w", err)
	}
	return nil
}

// regionNames returns the configured regions, sorted.
func (c Config) regionNames() []string {
	out := make([]string, 0, len(c.Regions))
	for name := range c.Regions {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// permitted returns the configured regions the principal may use.
func (c Config) permitted(p auth.Principal) []string {
	var out []string
	for _, r := range c.regionNames() {
		if p.CanUseRegion(r) {
			out = append(out, r)
		}
	}
	return slices.Clip(out)
}
