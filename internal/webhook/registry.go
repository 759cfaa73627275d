package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/crashpoint"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Object kinds the registry keeps in its region's store.
const (
	// ObjectSubscriber holds one subscriber's Record, secrets included.
	ObjectSubscriber = "subscriber"
	// ObjectEvent holds one published event version and its deliveries.
	ObjectEvent = "webhook_event"
	// ObjectResponse holds the last failed answer of one delivery job.
	ObjectResponse = "webhook_response"
)

// Registry defaults.
const (
	// DefaultDisableAfter is how long a subscriber may fail continuously
	// before it is disabled: five days, as common webhook services do.
	DefaultDisableAfter = 5 * 24 * time.Hour
	// DefaultCacheFor is how long a node trusts its cached copy of a
	// subscriber; changes made on another node apply within it.
	DefaultCacheFor = 2 * time.Second
	// DefaultHeadroom is the fraction of a subscriber's declared rate the
	// limit key leaves unused; see RegistryConfig.Headroom.
	DefaultHeadroom = admission.DefaultHeadroom
	// healthEvery bounds how often a healthy subscriber's last success is
	// written back: once a minute, not once per delivery.
	healthEvery = time.Minute
)

// LimitKey returns the limit key of a subscriber's deliveries,
// "subscriber:<id>".
func LimitKey(subscriberID string) string { return "subscriber:" + subscriberID }

// RegistryConfig configures a Registry. Zero fields take the defaults
// documented on each.
type RegistryConfig struct {
	// Store is the region's store (required). Subscribers, events and
	// diagnostic responses are objects in it; deliveries are its jobs.
	Store store.Store
	// Logger receives subscriber ids and errors of the registry's own
	// bookkeeping (health records), never payloads; default slog.Default().
	Logger *slog.Logger
	// Jobs is the region's writer of job state (the engine's,
	// PluginRegion.Jobs), through which a redelivery redrives a dead
	// delivery (required). The registry never makes one of its own: a
	// second writer of one region would keep a batch credit and an
	// Observer of its own beside the engine's.
	Jobs *engine.Jobs
	// RotationWindow is how long a rotated-out secret keeps signing;
	// default DefaultRotationWindow (24 h).
	RotationWindow time.Duration
	// DisableAfter disables a subscriber that has failed continuously
	// (no success, only transient or permanent failures; 429s count as
	// neither) for this long; default DefaultDisableAfter (5 days).
	DisableAfter time.Duration
	// CacheFor is how long subscriber lookups are served from memory;
	// default DefaultCacheFor. Writes through this Registry invalidate its
	// own cache at once. Negative means no cache (tests).
	CacheFor time.Duration
	// Headroom is the fraction of a subscriber's declared rate that its
	// limit key leaves unused, in [0, 0.5); default DefaultHeadroom (3%).
	// The receiver's bucket and ours run on different clocks and requests
	// arrive with network jitter; pacing exactly at the allowance turns
	// that jitter into 429s, each of which pauses the key for a whole
	// Retry-After. A few percent lets the receiver's bucket keep slack.
	// Negative means none.
	Headroom float64
	// Lane is the lane of delivery jobs when an event names none; default
	// batch.
	Lane job.Lane
	// Notify, when set, is called after delivery jobs are inserted or
	// redriven, to wake the region's engine.
	Notify func()
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// WithDefaults returns c with every zero field set to its default.
func (c RegistryConfig) WithDefaults() RegistryConfig {
	c.RotationWindow = cmp.Or(c.RotationWindow, DefaultRotationWindow)
	c.DisableAfter = cmp.Or(c.DisableAfter, DefaultDisableAfter)
	c.CacheFor = cmp.Or(c.CacheFor, DefaultCacheFor)
	switch {
	case c.Headroom == 0:
		c.Headroom = DefaultHeadroom
	case c.Headroom < 0:
		c.Headroom = 0
	}
	c.Lane = cmp.Or(c.Lane, job.LaneBatch)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c RegistryConfig) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("webhook RegistryConfig.Store is required")
	case c.Jobs == nil:
		return errors.New("webhook RegistryConfig.Jobs is required: the region's one writer of job state (the engine's Jobs)")
	case c.Jobs.Store() != c.Store:
		return fmt.Errorf("webhook RegistryConfig.Jobs writes the store of region %q, not Store", c.Jobs.Region())
	case c.RotationWindow < 0 || c.DisableAfter < 0:
		return errors.New("webhook RegistryConfig: RotationWindow and DisableAfter must not be negative")
	case c.Headroom >= 0.5:
		return fmt.Errorf("webhook RegistryConfig.Headroom %v: want 0 to 0.5", c.Headroom)
	case !c.Lane.Valid():
		return fmt.Errorf("webhook RegistryConfig.Lane %q: want interactive or batch", c.Lane)
	}
	return nil
}

// Registry keeps one region's webhook subscribers and publishes events to
// them. It implements Directory, so a Deliverer can resolve subscribers
// through it, and Handler gives the job handler of Kind. It is safe for
// concurrent use; several nodes may run a Registry over one shared store.
type Registry struct {
	cfg RegistryConfig
	st  store.Store

	mu    sync.Mutex
	cache map[string]cached
	all   *cachedList
	locks sync.Map // id -> *sync.Mutex: serialises updates per subscriber
}

type cached struct {
	rec Record
	at  time.Time
}

type cachedList struct {
	recs []Record
	at   time.Time
}

// NewRegistry returns the registry of cfg.Store's region.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Registry{cfg: cfg, st: cfg.Store, cache: map[string]cached{}}, nil
}

// Region is the region whose subscribers the registry holds.
func (r *Registry) Region() string { return r.st.Region() }

// Rate is a subscriber's allowance: Limit deliveries per Period, of which
// Burst may start at once, read as Shape says.
type Rate struct {
	// Shape says how the subscriber counts Limit per Period: ShapeWindow
	// (the default, the strictest reading: at most Limit deliveries start
	// in any Period, sliding, with Burst spreading them out) or ShapeBucket
	// (a token bucket of Limit/Period per second and Burst, which can
	// exceed Limit in a sliding Period by up to half the burst). Empty
	// means ShapeWindow.
	Shape string `json:"shape,omitempty"`
	// Window says how the window shape counts: WindowSliding (the default:
	// any Period) or WindowFixed (each Period aligned to the clock, as an
	// upstream whose quota "resets at" :00 counts; the sender may then use
	// each aligned window's whole allowance, and Burst defaults to Limit).
	// Empty means WindowSliding; it applies to ShapeWindow only.
	Window string `json:"window,omitempty"`
	// Limit is the number of deliveries per Period (at least 1).
	Limit int `json:"limit"`
	// Period is the window of Limit, e.g. "1s" or "1m"; default one second.
	Period Period `json:"period,omitzero"`
	// Burst is how many deliveries may start at once from a rested
	// subscriber; default min(Limit, max(1, one second's worth)).
	Burst int `json:"burst,omitempty"`
}

// Period is a duration written in JSON as a Go duration string ("1s",
// "1m30s") or a number of seconds.
type Period time.Duration

// MarshalJSON writes the duration string.
func (p Period) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(p).String()) }

// UnmarshalJSON reads a duration string or a number of seconds.
func (p *Period) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("period %q: want a duration such as \"1s\" or \"1m\"", s)
		}
		*p = Period(d)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return errors.New("period: want a duration string or a number of seconds")
	}
	*p = Period(secs * float64(time.Second))
	return nil
}

// The shapes a subscriber's Rate may name.
const (
	ShapeWindow = "window"
	ShapeBucket = "bucket"
)

// How a window shape counts (Rate.Window).
const (
	WindowSliding = "sliding"
	WindowFixed   = "fixed"
)

// perSecond returns the declared rate in deliveries per second.
func (rt Rate) perSecond() float64 { return float64(rt.Limit) / rt.period().Seconds() }

// period is the declared period, one second when unset.
func (rt Rate) period() time.Duration {
	if p := time.Duration(rt.Period); p > 0 {
		return p
	}
	return time.Second
}

// SubscriberSpec is what an operator declares about a subscriber (PUT
// /v1/subscribers/{id}). Zero fields take the defaults documented on each.
type SubscriberSpec struct {
	// ID names the subscriber in its region: 1 to 100 letters, digits,
	// '.', '_' or '-'.
	ID string `json:"id"`
	// Tenant owns the subscriber; only its events reach it. Default
	// "default".
	Tenant string `json:"tenant,omitempty"`
	// URL is the receiver's http or https URL.
	URL string `json:"url"`
	// Topics are the event topics the subscriber receives (1 to 100);
	// "*" receives every topic.
	Topics []string `json:"topics"`
	// Rate is the subscriber's allowance; nil paces nothing (only
	// Concurrency and the subscriber's 429s apply).
	Rate *Rate `json:"rate,omitempty"`
	// Concurrency caps deliveries in flight to the subscriber; 0 means no cap.
	Concurrency int `json:"concurrency,omitempty"`
	// Adaptive lets the subscriber's 429s lower the pace and successes
	// raise it again, up to Rate.
	Adaptive bool `json:"adaptive,omitempty"`
	// Secret is the signing secret ("whsec_" + base64 of 24 to 64 bytes).
	// Empty on create generates one, returned once; empty on update keeps
	// the current secrets. A different secret replaces them at once; use
	// RotateSecret for a rotation with overlap.
	Secret string `json:"secret,omitempty"`
	// Headers are static headers sent with every delivery.
	Headers map[string]string `json:"headers,omitempty"`
	// Enabled defaults to true. Setting it to true re-enables a disabled
	// subscriber and clears its failure record.
	Enabled *bool `json:"enabled,omitempty"`
}

// Record is a stored subscriber. Its JSON form (what the API shows) never
// contains secrets.
type Record struct {
	ID          string            `json:"id"`
	Tenant      string            `json:"tenant"`
	Region      string            `json:"region"`
	URL         string            `json:"url"`
	Topics      []string          `json:"topics"`
	Rate        *Rate             `json:"rate,omitempty"`
	Concurrency int               `json:"concurrency,omitempty"`
	Adaptive    bool              `json:"adaptive,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Enabled     bool              `json:"enabled"`
	// DisabledReason says why the subscriber was switched off.
	DisabledReason string    `json:"disabled_reason,omitempty"`
	DisabledAt     time.Time `json:"disabled_at,omitzero"`
	// Secrets sign deliveries; never shown.
	Secrets Secrets `json:"-"`
	// SecretRotatingUntil is when a rotated-out secret stops signing.
	SecretRotatingUntil time.Time `json:"secret_rotating_until,omitzero"`
	Health              Health    `json:"health"`
	CreatedAt           time.Time `json:"created_at"`
	UpdatedAt           time.Time `json:"updated_at"`
	// Version counts the record's writes; every write is a compare-and-
	// set on the stored record, so two nodes updating one subscriber at
	// once never lose an update silently.
	Version int64 `json:"version"`
}

// Health is what the registry knows of a subscriber's recent deliveries.
// LastSuccessAt is written at most once a minute while deliveries succeed.
type Health struct {
	LastSuccessAt time.Time `json:"last_success_at,omitzero"`
	// FailingSince is the first failure after the last success; zero
	// while the subscriber is healthy.
	FailingSince  time.Time `json:"failing_since,omitzero"`
	LastFailureAt time.Time `json:"last_failure_at,omitzero"`
	LastStatus    int       `json:"last_status,omitempty"`
	LastError     string    `json:"last_error,omitempty"`
}

// stored is a Record as kept in the store: with its secrets.
type stored struct {
	Record
	Secrets Secrets `json:"secrets"`
}

// LimitConfig is the admission configuration of the record's limit key.
// For the default window shape it is [admission.UpstreamWindow]: a sliding
// window of exactly the declared limit per period (it counts a start until
// its answer: see admission.State.End), and a bucket with half the declared burst
// (rounded up) that spreads the window's starts, at 1.5 times the declared
// rate when the burst is a whole window (the window bounds the rate) and
// at the rate less headroom otherwise or when the key is adaptive
// ([admission.AdaptiveUpstreamWindow]: the rate is its ceiling); it never
// overruns a sliding window of the declared limit. For a fixed window it is
// [admission.UpstreamFixedWindow]: a guarded fixed window of the declared
// limit per aligned period, with a bucket at the declared rate only when
// the burst is below the limit or the key is adaptive (its ceiling). For the bucket shape it is [admission.UpstreamBucket], the
// bucket alone.
func (rec Record) LimitConfig(headroom float64) admission.Config {
	c := admission.Config{Name: LimitKey(rec.ID)}
	if rec.Rate != nil {
		switch {
		case rec.Rate.Shape == ShapeBucket:
			c = admission.UpstreamBucket(c.Name, rec.Rate.perSecond(), float64(rec.Rate.Burst), headroom)
		case rec.Rate.Window == WindowFixed:
			c = admission.UpstreamFixedWindow(c.Name, float64(rec.Rate.Limit), rec.Rate.period(), float64(rec.Rate.Burst), headroom)
			if rec.Adaptive && c.Rate == 0 { // discovery needs a bucket as its ceiling
				c.Rate, c.Burst = rec.Rate.perSecond(), float64(rec.Rate.Limit)
			}
		case rec.Adaptive: // its bucket's rate is its ceiling, not a spreading rate
			c = admission.AdaptiveUpstreamWindow(c.Name, float64(rec.Rate.Limit), rec.Rate.period(), float64(rec.Rate.Burst), headroom)
		default:
			c = admission.UpstreamWindow(c.Name, float64(rec.Rate.Limit), rec.Rate.period(), float64(rec.Rate.Burst), headroom)
		}
		c.Adaptive = rec.Adaptive
	}
	c.Concurrency = rec.Concurrency
	return c
}

func (rec Record) subscribes(topic string) bool {
	return slices.Contains(rec.Topics, topic) || slices.Contains(rec.Topics, "*")
}

var (
	idPattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
	topicPattern = regexp.MustCompile(`^(\*|[A-Za-z0-9][A-Za-z0-9._:/-]{0,127})$`)
)

// validate checks a spec, collecting every violation.
func (spec SubscriberSpec) validate() error {
	ve := &job.ValidationError{}
	add := func(field, format string, args ...any) {
		ve.Fields = append(ve.Fields, job.FieldError{Field: field, Detail: fmt.Sprintf(format, args...)})
	}
	if !idPattern.MatchString(spec.ID) {
		add("id", "id must be 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	if spec.Tenant != "" && (len(spec.Tenant) > job.MaxNameLen || strings.ContainsAny(spec.Tenant, "\x00\r\n\t")) {
		add("tenant", "tenant must be at most %d bytes without control characters", job.MaxNameLen)
	}
	if u, err := url.Parse(spec.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || len(spec.URL) > 2048 {
		add("url", "url must be an absolute http or https URL of at most 2048 bytes, without user info")
	} else if why := neverHost(u.Hostname()); why != "" {
		add("url", "url: %s", why)
	}
	if len(spec.Topics) == 0 || len(spec.Topics) > 100 {
		add("topics", "a subscriber names 1 to 100 topics, got %d", len(spec.Topics))
	}
	for _, t := range spec.Topics {
		if !topicPattern.MatchString(t) {
			add("topics", "topic %q must be \"*\" or 1 to 128 letters, digits, '.', '_', ':', '/' or '-'", t)
		}
	}
	if spec.Rate != nil {
		validateRate(*spec.Rate, add)
	}
	if spec.Concurrency < 0 || spec.Concurrency > 10_000 {
		add("concurrency", "concurrency must be 0 (no cap) to 10000, got %d", spec.Concurrency)
	}
	if spec.Adaptive && spec.Rate == nil {
		add("adaptive", "an adaptive subscriber needs a rate")
	}
	if spec.Secret != "" {
		if _, err := ParseSecret(spec.Secret); err != nil {
			add("secret", "secret must be \"whsec_\" followed by standard base64 of %d to %d bytes", MinSecretBytes, MaxSecretBytes)
		}
	}
	if err := ValidateHeaders(spec.Headers); err != nil {
		add("headers", "%s", err.Error())
	}
	if len(ve.Fields) > 0 {
		return ve
	}
	return nil
}

func validateRate(rt Rate, add func(field, format string, args ...any)) {
	period := time.Duration(rt.Period)
	switch {
	case rt.Limit < 1 || rt.Limit > 1_000_000:
		add("rate.limit", "rate.limit must be 1 to 1000000 deliveries per period, got %d", rt.Limit)
	case period < 0 || period > 24*time.Hour || (period > 0 && period < time.Millisecond):
		add("rate.period", "rate.period must be 1ms to 24h, got %v", period)
	case rt.Burst < 0 || rt.Burst > 1_000_000:
		add("rate.burst", "rate.burst must be 0 (default) to 1000000, got %d", rt.Burst)
	case rt.Shape != "" && rt.Shape != ShapeWindow && rt.Shape != ShapeBucket:
		add("rate.shape", "rate.shape must be %q (default) or %q, got %q", ShapeWindow, ShapeBucket, rt.Shape)
	case rt.Window != "" && rt.Window != WindowSliding && rt.Window != WindowFixed:
		add("rate.window", "rate.window must be %q (default) or %q, got %q", WindowSliding, WindowFixed, rt.Window)
	case rt.Window != "" && rt.Shape == ShapeBucket:
		add("rate.window", "rate.window applies to shape %q, not %q", ShapeWindow, ShapeBucket)
	}
}

// Put creates or replaces a subscriber and upserts its limit key
// LimitKey(id) from Rate, Concurrency and Adaptive. It returns the stored
// record, the signing secret when one was generated (shown once: it is
// never returned again) and whether the subscriber was created. Errors are
// a *job.ValidationError for an invalid spec, or the store's; one wrapping
// store.ErrConflict means this Put's save lost to a concurrent write and
// nothing of it was stored, never that its key is still settling.
//
// The key follows the stored subscriber, not the spec: the store has no
// transaction over a document and a key, so Put saves the subscriber
// first (a guarded write) and then writes the key from what is stored
// (settleKey). A create whose save stood answers its record and secret
// even when that settle fails (logged): the secret is shown only once.
// A save that loses writes no key; an update's key written late, after
// another node's Put, is rewritten from what is stored. A
// create also writes the key before its save, so that no delivery
// published in between runs on an unpaced key (Publish creates unknown
// keys unpaced); settleKey repairs it when that save loses. A crash (or a
// store error) between the save and the key leaves the old key until the
// next start (SettleKeys) or the subscriber's next Put, which always
// rewrites it.
func (r *Registry) Put(ctx context.Context, spec SubscriberSpec) (Record, string, bool, error) {
	if err := spec.validate(); err != nil {
		return Record{}, "", false, err
	}
	now := r.cfg.Now().UTC()
	prev, prevBody, err := r.loadRaw(ctx, spec.ID)
	created := errors.Is(err, ErrSubscriberNotFound)
	if err != nil && !created {
		return Record{}, "", false, err
	}
	rec, generated := r.merge(spec, prev, created, now)
	c := rec.LimitConfig(r.cfg.Headroom)
	// The key's checks run before any write: a spec whose key the store
	// would refuse saves no subscriber either.
	if err := store.CheckLimit(c); err != nil {
		return Record{}, "", false, fmt.Errorf("subscriber %s: limit key: %w", spec.ID, err)
	}
	if created {
		if err := r.upsertKey(ctx, spec.ID, c, now); err != nil {
			return Record{}, "", false, err
		}
	}
	// A concurrent Put or update of the same subscriber answers a
	// conflict: replacing it would drop the other writer's change.
	if rec, err = r.saveIf(ctx, rec, prev, prevBody); err != nil {
		if created { // the key written above may not be the winner's
			err = errors.Join(err, r.settleKey(ctx, spec.ID, now))
		}
		return Record{}, "", false, err
	}
	crashpoint.Hit(crashpoint.SubscriberBeforeKey)
	// settleKey writes the key: its first round declares the stored
	// subscriber's configuration (this save's, or a later one's) and
	// rewrites the key if it still differs, an operator's change
	// included. A separate write first would repeat that round's work.
	if err := r.settleKey(ctx, spec.ID, now); err != nil {
		if !created {
			// An update is safe to retry: the retry settles the key.
			return Record{}, "", false, err
		}
		// A create's save stood, and its key was written before it
		// (upsertKey). Its generated secret is shown only in this
		// answer, and a retry would be an update that never shows it,
		// so an error here would lose the secret for good. The key is
		// the create's own unless another node's Put raced it, and then
		// that Put's settle, the next Put or the next start settles it.
		r.cfg.Logger.Warn("webhook: subscriber created; settling its limit key failed, left to the next Put or start",
			"subscriber", spec.ID, "version", rec.Version, "error", err)
	}
	return rec, generated, created, nil
}

// upsertKey writes a new subscriber's limit key as c before its save (Put),
// so that no delivery published in between runs unpaced, and records c as
// the key's declaration (store.DeclareLimit), the key's record of what
// the registry last wrote, which SettleKeys reads. A declaration it
// already holds applies nothing, so the key is then written as an
// UpsertLimit.
//
// The two calls are not one transaction, and an UpsertLimit leaves the
// declaration as it was: another node's applied DeclareLimit between them
// leaves the key as c under the other node's declaration. This Put's
// settleKey, which follows its save whether the save wins or loses,
// reads what is stored and ends that. Only a node stopped between its
// declaration and its settle (a crash, a cancelled request) leaves a
// stale declaration; its one effect is that an operator's PUT /v1/limits
// on that key made afterwards is undone at the next start (the
// declaration differs), back to the subscriber's own shape, the safe
// side. Closing that window needs a store call that writes a key and its
// declaration unconditionally.
func (r *Registry) upsertKey(ctx context.Context, id string, c admission.Config, now time.Time) error {
	_, applied, err := r.st.DeclareLimit(ctx, c, now)
	if err == nil && !applied {
		_, err = r.st.UpsertLimit(ctx, c, now)
	}
	if err != nil {
		return fmt.Errorf("subscriber %s: limit key: %w", id, err)
	}
	return nil
}

// SettleKeys finishes the key writes that a crash cut off, at start-up
// (the webhooks plug-in's Bind): a Put saves its subscriber before it
// writes the key, and the store has no transaction over both. Every key
// whose configuration is not its stored subscriber's is declared as the
// subscriber's (store.DeclareLimit), which changes it only when the
// registry's last write of it declared something else: a Put cut off
// after its save, or a key written before keys were declared. A key whose
// difference is an operator's PUT /v1/limits after the subscriber's Put
// is left as it is. A key it changes is then settled as a Put's is
// (settleKey): the subscriber is read again after the write, so a Put
// saved in between is not undone. It returns how many keys changed; a
// steady start reads the subscribers and their keys and writes nothing.
func (r *Registry) SettleKeys(ctx context.Context) (int, error) {
	recs, err := r.subscribers(ctx)
	if err != nil {
		return 0, err
	}
	names := make([]string, len(recs))
	for i, rec := range recs {
		names[i] = LimitKey(rec.ID)
	}
	have, err := r.st.LimitConfigs(ctx, names)
	if err != nil {
		return 0, err
	}
	settled, now := 0, r.cfg.Now().UTC()
	for _, rec := range recs {
		c := rec.LimitConfig(r.cfg.Headroom)
		if old, ok := have[c.Name]; ok && store.LimitFingerprint(old) == store.LimitFingerprint(c) {
			continue
		}
		_, applied, err := r.st.DeclareLimit(ctx, c, now)
		if err != nil {
			return settled, fmt.Errorf("subscriber %s: limit key: %w", rec.ID, err)
		}
		if !applied {
			continue
		}
		settled++
		// Read again after the write, as a Put does: another node's
		// Put may have saved and settled between this read of the
		// subscriber and this declaration, which then left its key at
		// the older save's (TestSettleKeysRacesAPut).
		if err := r.settleKey(ctx, rec.ID, now); err != nil {
			return settled, err
		}
		r.cfg.Logger.Info("webhook: a subscriber's limit key settled to the stored subscriber at start", "subscriber", rec.ID)
	}
	return settled, nil
}

// settleKey makes subscriber id's limit key and its declaration the
// stored subscriber's, after this node saved it: it reads the stored
// record, declares its configuration (store.DeclareLimit: a write only
// when the declaration is another) and reads the key; while either was
// another, it writes and reads again. It stops at a round that writes
// nothing: so the last write of a key, or of its declaration, is followed
// by its writer's reads of the record, the declaration and the key, and
// the three end alike, whichever node's write lands last. A deleted
// subscriber keeps its key (Delete).
//
// A round that reads a newer save than the round before does not count
// toward the bound: that save's own Put settles after it, but this
// node's write of the configuration it read before may land after that
// settle, and only this node's next round sees it. It used to give up
// after updateTries rounds whatever they read, with store.ErrConflict,
// right after such a write: a Put slowed at each of its key writes (under
// load, -race) while newer Puts kept landing left the key at an older
// save's configuration with every other Put settled, and answered a
// conflict for a save that had won (TestSettleOutlastsNewerSaves; the
// cause of TestConcurrentPutsSettleTheKey's failures, 5 of 580 runs).
// Only updateTries rounds in a row that read the same record, with the
// key or its declaration still changing under them (an operator's
// PUT /v1/limits at each), end it early: with nil and a warning that
// names the subscriber and its key, after a read that follows this node's
// write of that record's configuration. The save stands whatever the key
// does, and a writer after this node's last write is an operator, whose
// change after a Put is kept (SettleKeys), or another node, whose own
// settle reads after its write. It used to answer store.ErrConflict, a
// 409 at the API, for a save that had won (TestSettleUnderOperatorAnswersTheSave).
// ctx ending between rounds ends it with ctx's error, as a crash would
// (SettleKeys finishes it at the next start).
//
// It checks what is stored, not the configuration this node believes it
// wrote last: another node's write can land between this node's write
// and its read of the record (a declaration and a key write are two
// transactions), and a check of the belief then passed with the key, or
// its declaration, left as the other node's.
func (r *Registry) settleKey(ctx context.Context, id string, now time.Time) error {
	seen, same := int64(-1), 0 // the version the last round read; rounds in a row that read it
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("subscriber %s: limit key: %w", id, err)
		}
		rec, err := r.load(ctx, id)
		if errors.Is(err, ErrSubscriberNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if rec.Version != seen {
			seen, same = rec.Version, 0
		} else if same++; same >= updateTries {
			// The save stands, so the Put succeeds: a conflict would
			// tell the caller to send it again, and a create's secret,
			// shown only by its own answer, would be lost. This node's
			// last write was this record's configuration; what wrote
			// after it is an operator (whose change after a Put is kept)
			// or another node's settle, which reads again after it.
			r.cfg.Logger.Warn("webhook: subscriber saved; its limit key was rewritten in every settle round, left as its last writer made it",
				"subscriber", id, "limit_key", LimitKey(id), "version", rec.Version, "rounds", same)
			return nil
		}
		c := rec.LimitConfig(r.cfg.Headroom)
		_, applied, err := r.st.DeclareLimit(ctx, c, now)
		if err != nil {
			return fmt.Errorf("subscriber %s: limit key: %w", id, err)
		}
		if applied {
			continue // written: read again
		}
		key, err := r.st.GetLimit(ctx, c.Name)
		if err != nil {
			return fmt.Errorf("subscriber %s: limit key: %w", id, err)
		}
		if store.LimitFingerprint(key.Config) == store.LimitFingerprint(c) {
			return nil
		}
		// Declared as c, keyed as another: a write landed between
		// another node's two calls (upsertKey), or an operator's
		// PUT /v1/limits beside this Put, which rewrites the key as
		// a Put always does.
		if _, err := r.st.UpsertLimit(ctx, c, now); err != nil {
			return fmt.Errorf("subscriber %s: limit key: %w", id, err)
		}
	}
}

// merge builds the record of spec over the previous one.
func (r *Registry) merge(spec SubscriberSpec, prev Record, created bool, now time.Time) (Record, string) {
	rec := Record{
		ID: spec.ID, Tenant: spec.Tenant, Region: r.Region(), URL: spec.URL, Topics: slices.Clone(spec.Topics),
		Concurrency: spec.Concurrency, Adaptive: spec.Adaptive, Headers: spec.Headers, Enabled: true,
		CreatedAt: now, UpdatedAt: now,
	}
	rec.Tenant = cmp.Or(rec.Tenant, job.DefaultTenant)
	if spec.Rate != nil {
		rt := *spec.Rate
		rt.Period = cmp.Or(rt.Period, Period(time.Second))
		rt.Shape = cmp.Or(rt.Shape, ShapeWindow)
		if rt.Burst == 0 && rt.Window == WindowFixed {
			rt.Burst = rt.Limit // each aligned window's whole allowance, as it opens
		}
		rt.Burst = cmp.Or(rt.Burst, min(rt.Limit, max(1, int(math.Ceil(rt.perSecond())))))
		rec.Rate = &rt
	}
	if !created {
		rec.CreatedAt, rec.Secrets, rec.Health = prev.CreatedAt, prev.Secrets, prev.Health
		rec.Enabled, rec.DisabledReason, rec.DisabledAt = prev.Enabled, prev.DisabledReason, prev.DisabledAt
	}
	if spec.Enabled != nil {
		rec.Enabled = *spec.Enabled
		if rec.Enabled && !prev.Enabled {
			rec.DisabledReason, rec.DisabledAt, rec.Health = "", time.Time{}, Health{}
		} else if !rec.Enabled && prev.Enabled || !rec.Enabled && created {
			rec.DisabledReason, rec.DisabledAt = "disabled by an operator", now
		}
	}
	generated := ""
	switch {
	case spec.Secret != "" && spec.Secret != rec.Secrets.Current:
		rec.Secrets = Secrets{Current: spec.Secret}
	case rec.Secrets.Current == "":
		generated = NewSecret()
		rec.Secrets = Secrets{Current: generated}
	}
	rec.SecretRotatingUntil = rotatingUntil(rec.Secrets, now)
	return rec, generated
}

func rotatingUntil(s Secrets, now time.Time) time.Time {
	if s.Previous != "" && now.Before(s.PreviousExpiresAt) {
		return s.PreviousExpiresAt
	}
	return time.Time{}
}

// Get returns one subscriber, read from the store (not the cache). An
// unknown id gives an error wrapping ErrSubscriberNotFound and
// store.ErrNotFound.
func (r *Registry) Get(ctx context.Context, id string) (Record, error) {
	return r.load(ctx, id)
}

// List returns up to limit subscribers with ids after after, in id order;
// limit pages as store.PageSize (0 means 100, above 1000 is 1000).
func (r *Registry) List(ctx context.Context, after string, limit int) ([]Record, error) {
	objs, err := r.st.ListObjects(ctx, ObjectSubscriber, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(objs))
	for _, o := range objs {
		rec, err := decodeRecord(o.Body)
		if err != nil {
			return nil, fmt.Errorf("subscriber %s: %w", o.ID, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// Delete removes a subscriber. Its queued deliveries end as
// subscriber_gone when they next run; its limit key stays (it holds no
// content). An unknown id wraps ErrSubscriberNotFound.
func (r *Registry) Delete(ctx context.Context, id string) error {
	err := r.st.DeleteObject(ctx, ObjectSubscriber, id)
	r.invalidate(id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("subscriber %s: %w: %w", id, ErrSubscriberNotFound, err)
	}
	return err
}

// RotateSecret makes a new current secret, returned once, and keeps the
// old one signing alongside it for window (<= 0 means the configured
// RotationWindow), so the subscriber can switch its verifier at any time
// within it.
func (r *Registry) RotateSecret(ctx context.Context, id string, window time.Duration) (Record, string, error) {
	if window <= 0 {
		window = r.cfg.RotationWindow
	}
	next := NewSecret()
	rec, err := r.update(ctx, id, func(rec *Record, now time.Time) bool {
		rec.Secrets = rec.Secrets.Rotate(next, now, window)
		rec.SecretRotatingUntil = rotatingUntil(rec.Secrets, now)
		return true
	})
	if err != nil {
		return Record{}, "", err
	}
	return rec, next, nil
}

// Disable switches a subscriber off with a reason; its deliveries end as
// permanent until it is enabled again with Put.
func (r *Registry) Disable(ctx context.Context, id, reason string) (Record, error) {
	return r.update(ctx, id, func(rec *Record, now time.Time) bool {
		if !rec.Enabled {
			return false
		}
		rec.Enabled, rec.DisabledReason, rec.DisabledAt = false, reason, now
		return true
	})
}

// Subscriber implements Directory from the cache (refreshed every
// CacheFor).
func (r *Registry) Subscriber(ctx context.Context, id string) (Subscriber, error) {
	rec, err := r.lookup(ctx, id)
	if err != nil {
		return Subscriber{}, err
	}
	return rec.subscriber(), nil
}

func (rec Record) subscriber() Subscriber {
	return Subscriber{ID: rec.ID, URL: rec.URL, Region: rec.Region, Tenant: rec.Tenant, Secrets: rec.Secrets, Headers: rec.Headers, Enabled: rec.Enabled}
}

// lookup returns a subscriber from the cache when fresh enough.
func (r *Registry) lookup(ctx context.Context, id string) (Record, error) {
	now := r.cfg.Now()
	r.mu.Lock()
	c, ok := r.cache[id]
	r.mu.Unlock()
	if ok && now.Sub(c.at) < r.cfg.CacheFor {
		return c.rec, nil
	}
	rec, err := r.load(ctx, id)
	if err != nil {
		return Record{}, err
	}
	r.mu.Lock()
	r.cache[id] = cached{rec: rec, at: now}
	r.mu.Unlock()
	return rec, nil
}

// load reads a subscriber from the store.
func (r *Registry) load(ctx context.Context, id string) (Record, error) {
	rec, _, err := r.loadRaw(ctx, id)
	return rec, err
}

// loadRaw reads a subscriber and the stored body it was decoded from, the
// guard of a write that follows (saveIf).
func (r *Registry) loadRaw(ctx context.Context, id string) (Record, []byte, error) {
	o, err := r.st.GetObject(ctx, ObjectSubscriber, id)
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, nil, fmt.Errorf("subscriber %s: %w: %w", id, ErrSubscriberNotFound, err)
	}
	if err != nil {
		return Record{}, nil, err
	}
	rec, err := decodeRecord(o.Body)
	return rec, o.Body, err
}

func decodeRecord(b []byte) (Record, error) {
	var s stored
	if err := json.Unmarshal(b, &s); err != nil {
		return Record{}, fmt.Errorf("decode subscriber: %w", err)
	}
	s.Record.Secrets = s.Secrets
	return s.Record, nil
}

// saveIf writes rec as the next version of prev, read as prevBody (nil:
// rec is new), and drops this node's cached copies. It returns an error
// wrapping store.ErrConflict when the stored record changed since it was
// read, by this node or another.
func (r *Registry) saveIf(ctx context.Context, rec, prev Record, prevBody []byte) (Record, error) {
	rec.Version = prev.Version + 1
	body, err := json.Marshal(stored{Record: rec, Secrets: rec.Secrets})
	if err != nil {
		return Record{}, err
	}
	err = r.st.PutObjectIf(ctx, store.Object{Kind: ObjectSubscriber, ID: rec.ID, Body: body, UpdatedAt: rec.UpdatedAt}, prevBody)
	r.invalidate(rec.ID)
	if err != nil {
		return Record{}, fmt.Errorf("subscriber %s: %w", rec.ID, err)
	}
	return rec, nil
}

func (r *Registry) invalidate(id string) {
	r.mu.Lock()
	delete(r.cache, id)
	r.all = nil
	r.mu.Unlock()
}

// updateTries bounds how often update re-reads a record that another node
// changed between its read and its write, and how many rounds in a row on
// one stored record settleKey makes before it stops with a warning.
const updateTries = 5

// update applies fn to the stored record and saves it when fn reports a
// change, as a compare-and-set on the record it read: when another node
// wrote in between, fn is applied again to the fresh record, up to
// updateTries times; then the conflict is returned (wrapping
// store.ErrConflict). Updates of one subscriber through this Registry are
// serialised, so only other nodes make it retry.
func (r *Registry) update(ctx context.Context, id string, fn func(rec *Record, now time.Time) bool) (Record, error) {
	mu, _ := r.locks.LoadOrStore(id, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	var err error
	for range updateTries {
		var prev Record
		var prevBody []byte
		if prev, prevBody, err = r.loadRaw(ctx, id); err != nil {
			return Record{}, err
		}
		rec, now := prev, r.cfg.Now().UTC()
		if !fn(&rec, now) {
			return rec, nil
		}
		rec.UpdatedAt = now
		if rec, err = r.saveIf(ctx, rec, prev, prevBody); !errors.Is(err, store.ErrConflict) {
			return rec, err
		}
	}
	return Record{}, err
}

// subscribers returns every subscriber of the region, from a list cached
// for CacheFor.
func (r *Registry) subscribers(ctx context.Context) ([]Record, error) {
	now := r.cfg.Now()
	r.mu.Lock()
	all := r.all
	r.mu.Unlock()
	if all != nil && now.Sub(all.at) < r.cfg.CacheFor {
		return all.recs, nil
	}
	var recs []Record
	after := ""
	for {
		page, err := r.List(ctx, after, 1000)
		if err != nil {
			return nil, err
		}
		recs = append(recs, page...)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].ID
	}
	r.mu.Lock()
	r.all = &cachedList{recs: recs, at: now}
	r.mu.Unlock()
	return recs, nil
}

// versionID formats a version so that object ids sort numerically.
func versionID(v int64) string { return fmt.Sprintf("%020d", v) }
