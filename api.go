package ratelane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/ratelane/ratelane/internal/auth"
	authpg "github.com/ratelane/ratelane/internal/auth/postgres"
	authsqlite "github.com/ratelane/ratelane/internal/auth/sqlite"
	"github.com/ratelane/ratelane/internal/dashboard"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/httpapi"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/store"
)

// APIConfig configures the HTTP API served by Client.NewAPI.
type APIConfig struct {
	// AdminKey, when set (RATELANE_ADMIN_KEY), is accepted as an admin key.
	// When empty, the first start generates one, writes it to
	// DataDir/admin.key (mode 0600) and returns it once in API.AdminKey.
	AdminKey string
	// KeysPostgresURL stores API keys in PostgreSQL (schema
	// ratelane_control), shared by every node. Default: the first
	// PostgreSQL region's URL; with none, an SQLite file in DataDir.
	KeysPostgresURL string
	// RequestRate and RequestBurst limit each API key's own requests;
	// defaults 100/s and 200.
	RequestRate  float64
	RequestBurst int
	// Dashboard serves the web UI under /ui/ (ratelane serve turns it on;
	// --ui=false turns it off). Its pages read everything through the API
	// with the signed-in key.
	Dashboard bool
	// SecureCookies marks the dashboard's cookies Secure on plain HTTP,
	// for a server behind a TLS-terminating proxy.
	SecureCookies bool
}

// API is the HTTP API of a Client.
type API struct {
	// Handler serves /v1, /metrics, /healthz, /readyz and, when enabled,
	// the dashboard under /ui/.
	Handler http.Handler
	// AdminKey is the admin key generated on this first start, to print
	// once; empty otherwise.
	AdminKey string
	server   *httpapi.Server
	ui       *dashboard.Dashboard // nil when the dashboard is off
	keys     *auth.Keys
}

// Drain ends the API's long polls and the dashboard's event streams, so an
// http.Server's Shutdown need not wait for them (pass it to
// RegisterOnShutdown). Requests still work; Drain is idempotent.
func (a *API) Drain() {
	a.server.Close()
	if a.ui != nil {
		a.ui.Close()
	}
}

// Close stops the API's long polls and the dashboard's streams and closes
// its key store.
func (a *API) Close() error {
	a.Drain()
	return a.keys.Close()
}

// NewAPI builds the HTTP API over the client's regions: its key store (with
// the admin bootstrap), metrics and routes.
func (c *Client) NewAPI(ctx context.Context, cfg APIConfig) (*API, error) {
	keys, err := c.openKeys(ctx, cfg)
	if err != nil {
		return nil, err
	}
	printed, err := auth.Bootstrap(ctx, keys, cfg.AdminKey, c.cfg.DataDir)
	if err != nil {
		keys.Close()
		return nil, err
	}
	regions := map[string]store.Store{}
	writers := map[string]*engine.Jobs{}
	for name, rt := range c.regions {
		regions[name] = rt.store
		writers[name] = rt.jobs
	}
	srv, err := httpapi.New(httpapi.Config{
		Regions: regions, Jobs: writers, Mounts: c.mounts(), Notify: c.notify, Handles: c.handles, Auth: authAdapter{keys}, Keys: keyAdapter{keys},
		DefaultLimit: c.cfg.DefaultLimit, InteractiveBudget: c.cfg.InteractiveBudget, BatchBudget: c.cfg.BatchBudget,
		Registerer: c.registry, Gatherer: c.registry, Now: c.cfg.Now, Logger: c.cfg.Logger, Version: Version,
		RequestRate: cfg.RequestRate, RequestBurst: cfg.RequestBurst,
	})
	if err != nil {
		keys.Close()
		return nil, err
	}
	handler := srv.Handler()
	if cfg.Dashboard {
		ui, err := dashboard.New(dashboard.Config{API: srv.Handler(), Auth: authAdapter{keys}, Secure: cfg.SecureCookies,
			Now: c.cfg.Now, Logger: c.cfg.Logger, Version: Version})
		if err != nil {
			keys.Close()
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("/ui/", ui.Handler())
		mux.Handle("/", srv.Handler())
		return &API{Handler: mux, AdminKey: printed, server: srv, ui: ui, keys: keys}, nil
	}
	return &API{Handler: handler, AdminKey: printed, server: srv, keys: keys}, nil
}

func (c *Client) openKeys(ctx context.Context, cfg APIConfig) (*auth.Keys, error) {
	url := cfg.KeysPostgresURL
	for _, r := range c.cfg.Regions {
		if url == "" && r.PostgresURL != "" {
			url = r.PostgresURL
		}
	}
	if url != "" {
		b, err := authpg.Open(ctx, authpg.Config{URL: url})
		if err != nil {
			return nil, fmt.Errorf("ratelane: open the API key store: %w", err)
		}
		return auth.NewKeys(b, c.cfg.Now), nil
	}
	b, err := authsqlite.Open(ctx, filepath.Join(c.cfg.DataDir, authsqlite.FileName))
	if err != nil {
		return nil, fmt.Errorf("ratelane: open the API key store: %w", err)
	}
	return auth.NewKeys(b, c.cfg.Now), nil
}

// mounts returns the routes of the plug-ins that serve some (Router).
func (c *Client) mounts() []mount.Mount {
	var out []mount.Mount
	for _, p := range c.cfg.Plugins {
		if r, ok := p.(Router); ok {
			out = append(out, r.Routes())
		}
	}
	return out
}

// handles reports whether a handler for kind runs in region (registered
// with Handle or HandleIn, or built in: webhooks, a plug-in's kinds): the API says "nothing handles kind X" otherwise.
func (c *Client) handles(region, kind string) bool {
	rt, ok := c.regions[region]
	if !ok {
		return false
	}
	_, ok = rt.kinds[kind]
	return ok
}

func (c *Client) notify(region string) {
	if rt, ok := c.regions[region]; ok && rt.engine != nil {
		rt.engine.Notify()
	}
}

// authAdapter maps the key store's errors onto the API's, so unknown and
// revoked keys answer 401 and a store outage 503.
type authAdapter struct{ keys *auth.Keys }

func (a authAdapter) Authenticate(ctx context.Context, bearer string) (auth.Principal, error) {
	p, err := a.keys.Authenticate(ctx, bearer)
	switch {
	case errors.Is(err, auth.ErrUnknownKey):
		return p, fmt.Errorf("%w: %w", httpapi.ErrUnknownKey, err)
	case errors.Is(err, auth.ErrRevokedKey):
		return p, fmt.Errorf("%w: %w", httpapi.ErrRevokedKey, err)
	}
	return p, err
}

// keyAdapter serves /v1/keys from the key store. httpapi.KeyInfo has
// auth.KeyInfo's fields one for one (its JSON tags differ), so it converts
// rather than copies: a field added to one side only fails to compile.
type keyAdapter struct{ keys *auth.Keys }

func (k keyAdapter) Create(ctx context.Context, tenant string, role auth.Role, regions []string, name string) (string, httpapi.KeyInfo, error) {
	secret, info, err := k.keys.Create(ctx, tenant, role, regions, name)
	return secret, httpapi.KeyInfo(info), err
}

func (k keyAdapter) List(ctx context.Context) ([]httpapi.KeyInfo, error) {
	infos, err := k.keys.List(ctx)
	out := make([]httpapi.KeyInfo, len(infos))
	for i, in := range infos {
		out[i] = httpapi.KeyInfo(in)
	}
	return out, err
}

func (k keyAdapter) Revoke(ctx context.Context, id string) error {
	err := k.keys.Revoke(ctx, id)
	if errors.Is(err, auth.ErrNotFound) {
		return fmt.Errorf("%w: %w", httpapi.ErrUnknownKey, err)
	}
	return err
}
