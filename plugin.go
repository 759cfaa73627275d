package ratelane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/store"
)

// Plugin is a feature built on the core queue that brings its own job
// kinds, HTTP routes and CLI commands: reviews (package review) are one.
// A program enables a plug-in by handing it to Config.Plugins; the core
// never imports a plug-in, so a program that only wants a queue links
// none of them (and no LLM SDK). The shape follows River's explicit
// worker registration (river.AddWorker into a Workers value passed in
// river.Config) and Caddy's module provisioning: no init side effects, no
// global registry.
//
// NewClient calls Bind once per configured region, in configuration order,
// after the region's store and its one writer of job state exist and
// before its engine is built: the plug-in registers its kinds there and
// keeps what it needs of the region. A Bind error fails NewClient (a
// provider of another region, say), before any job runs. A plug-in that
// also implements Router mounts routes in Client.NewAPI; one that
// implements Commander adds commands to cmd/ratelane.
//
// Bind and the routes name internal types (the region's store and writer,
// the API's mount point), so plug-ins live in this module; programs only
// compose them.
type Plugin interface {
	// Name names the plug-in in errors and logs, e.g. "reviews".
	Name() string
	// Bind binds the plug-in to one region of a client being created.
	Bind(ctx context.Context, r *PluginRegion) error
}

// Router is a Plugin that serves HTTP routes. Client.NewAPI mounts them
// into the API server, which serves them with the same authentication,
// roles, request rate, tenant and region checks and problem+json errors as
// its own routes, and lists them in GET /v1 and the OpenAPI document.
type Router interface {
	Routes() mount.Mount
}

// Commander is a Plugin that adds subcommands to the ratelane binary.
type Commander interface {
	Commands() []Command
}

// Command is one subcommand of the ratelane binary, e.g. "review". Run
// receives the arguments after the command's name and the process's
// standard streams; an error it returns is printed and exits 1, or 2 when
// it matches ErrUsage (errors.Is). -h prints the flags and exits 0.
type Command struct {
	Name, Summary string
	Run           func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

// ErrUsage marks a Command error caused by the command line (exit 2).
var ErrUsage = errors.New("usage")

// PluginRegion is one region of a client as a plug-in's Bind sees it. Its
// registration methods (Handle, OnFinished, OnPublished, OnStart, OnStop) may be called
// only during Bind; its accessors any time after.
type PluginRegion struct {
	c      *Client
	name   string
	rt     *regionRT
	kinds  map[string]engine.Kind
	plugin string
	bound  bool
}

// Name returns the region's name.
func (r *PluginRegion) Name() string { return r.name }

// Client returns the client being created; its methods may be called once
// NewClient has returned (e.g. from a handler or a route).
func (r *PluginRegion) Client() *Client { return r.c }

// Config returns the client's configuration with defaults applied.
func (r *PluginRegion) Config() Config { return r.c.cfg }

// Logger returns the client's logger.
func (r *PluginRegion) Logger() *slog.Logger { return r.c.cfg.Logger }

// Store returns the region's store. A plug-in reads it and stores its own
// objects in it; job state it changes only through Jobs.
func (r *PluginRegion) Store() store.Store { return r.rt.store }

// Jobs returns the region's one writer of job state (the engine's): every
// insert, cancel, redrive, outcome and a parent's advance goes through it.
func (r *PluginRegion) Jobs() *engine.Jobs { return r.rt.jobs }

// Notify wakes the region's engine after an insert.
func (r *PluginRegion) Notify() { r.c.notify(r.name) }

// BatchWork makes ctx a piece of the region's batch-lane computing work
// done outside a handler (engine.Engine.BatchWork): a plug-in accepting
// batch work in an API request's goroutine takes the lane's CPU turn, and
// engine.Yield in the returned context rests it for the batch pacer
// between its pieces. Call end exactly once when the work is done.
func (r *PluginRegion) BatchWork(ctx context.Context) (_ context.Context, end func()) {
	if r.rt.engine == nil {
		return ctx, func() {}
	}
	return r.rt.engine.BatchWork(ctx)
}

// InteractiveArriving counts a plug-in's request that will end in an
// interactive insert as the region's interactive work in flight from now
// (engine.Engine.Arriving): the batch lane (its pacer, its yield gate, a
// SQLite writer's gap work) then sees an arriving review while its
// request is still validated and planned, not only once its insert is
// written. The insert ends the count when it is durable; call end exactly
// once on every path (defer it) so that a request that fails first ends it
// too. A region without an engine here counts nothing.
func (r *PluginRegion) InteractiveArriving(ctx context.Context) (_ context.Context, end func()) {
	if r.rt.engine == nil {
		return ctx, func() {}
	}
	return r.rt.engine.Arriving(ctx)
}

// Handle registers a built-in kind of the plug-in in this region: a kind
// with a Handler, or a parent kind with an Aggregate (the engine's parts
// capability, as reviews use it). A kind another plug-in or Config.Handle
// already registered is refused.
func (r *PluginRegion) Handle(kind string, k engine.Kind) error {
	if r.bound {
		return fmt.Errorf("ratelane: plug-in %s registered kind %q after Bind returned", r.plugin, kind)
	}
	if _, taken := r.kinds[kind]; taken {
		return fmt.Errorf("ratelane: plug-in %s: kind %q is already registered in region %q", r.plugin, kind, r.name)
	}
	if k.Handler == nil && k.Aggregate == nil {
		return fmt.Errorf("ratelane: plug-in %s: kind %q has no handler and no aggregator", r.plugin, kind)
	}
	r.kinds[kind] = k
	return nil
}

// OnFinished calls fn after every attempt that moved a job of the region,
// from whichever worker (in process or over HTTP). fn must return
// quickly. (A parent aggregated from parts needs no such hook: the
// engine's parts capability, engine.Kind.Aggregate, is woken itself.)
func (r *PluginRegion) OnFinished(fn func(j *Job, to State)) {
	r.rt.obs.finished = append(r.rt.obs.finished, fn)
}

// OnPublished calls fn with the id of every job of the region whose
// publication is recorded (validated -> published), after it is durable,
// whoever published it in this process. fn must return quickly. A caller
// waiting for a result (the batch-isolation benchmark) waits for it
// instead of polling the job.
func (r *PluginRegion) OnPublished(fn func(id string)) {
	r.rt.obs.published = append(r.rt.obs.published, fn)
}

// OnStage calls fn with every stage a job of the region passes in this
// process's engine (engine.StageNames: queued, start, run, finish, and a
// parent's aggregation and publication, each with when it began and
// ended): a per-job timeline, which the batch-isolation benchmark's
// --trace-tail reads to tell what an interactive review's slowest stage
// overlapped. fn runs on the engine's goroutines and must return quickly;
// it may be called only during Bind. Without a listener the engine keeps
// its stage histograms only.
func (r *PluginRegion) OnStage(fn func(engine.StageSpan)) error {
	if r.bound {
		return fmt.Errorf("ratelane: plug-in %s set a stage listener after Bind returned", r.plugin)
	}
	if prev := r.rt.stageTrace; prev != nil {
		r.rt.stageTrace = func(s engine.StageSpan) { prev(s); fn(s) }
	} else {
		r.rt.stageTrace = fn
	}
	return nil
}

// SetSubscribers makes l the region's webhook subscriber lookup, which
// other plug-ins reach through Subscribers; the webhooks plug-in sets it.
// It may be called only during Bind, once per region.
func (r *PluginRegion) SetSubscribers(l SubscriberLookup) error {
	if r.bound {
		return fmt.Errorf("ratelane: plug-in %s set the subscriber lookup after Bind returned", r.plugin)
	}
	if r.rt.subs != nil {
		return fmt.Errorf("ratelane: plug-in %s: region %q already has a subscriber lookup", r.plugin, r.name)
	}
	r.rt.subs = l
	return nil
}

// Subscribers returns the region's webhook subscriber lookup: the one the
// webhooks plug-in set, or, without that plug-in, one that knows no
// subscriber. Call it after NewClient has returned (plug-ins bind in
// order, and the webhooks plug-in may come later).
func (r *PluginRegion) Subscribers() SubscriberLookup {
	if r.rt.subs == nil {
		return noSubscribers{}
	}
	return r.rt.subs
}

// SubscriberLookup finds a region's webhook subscribers. It is how the
// core and other plug-ins (a review published to a subscriber) learn of
// subscribers without importing the webhooks plug-in, which implements it.
type SubscriberLookup interface {
	// SubscriberTenant returns the tenant that owns subscriber id;
	// ErrNotFound when the region has no such subscriber.
	SubscriberTenant(ctx context.Context, id string) (string, error)
}

// noSubscribers is the lookup of a client without the webhooks plug-in.
type noSubscribers struct{}

func (noSubscribers) SubscriberTenant(context.Context, string) (string, error) {
	return "", fmt.Errorf("no webhooks plug-in is configured (webhooks.New in Config.Plugins): %w", ErrNotFound)
}

// OnStart calls fn when Client.Start starts the region, after its engine.
func (r *PluginRegion) OnStart(fn func(ctx context.Context)) { r.rt.starts = append(r.rt.starts, fn) }

// OnStop calls fn when Client.Stop drains the region, after its engine.
func (r *PluginRegion) OnStop(fn func()) { r.rt.stops = append(r.rt.stops, fn) }

// bindPlugins binds every plug-in to one region, adding their kinds.
func (c *Client) bindPlugins(ctx context.Context, name string, rt *regionRT, kinds map[string]engine.Kind) error {
	for _, p := range c.cfg.Plugins {
		pr := &PluginRegion{c: c, name: name, rt: rt, kinds: kinds, plugin: p.Name()}
		err := p.Bind(ctx, pr)
		pr.bound = true
		if err != nil {
			return fmt.Errorf("plug-in %s: %w", p.Name(), err)
		}
	}
	return nil
}
