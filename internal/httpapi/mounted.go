package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/job"
)

// mountRoutes appends the plug-ins' routes (Config.Mounts) to the core's
// and collects the examples' variables. A mounted route is a route like
// any other: wrap authenticates it, the documents list it. It refuses a
// pattern served twice and a public mounted route.
func (s *Server) mountRoutes(core []route) ([]route, error) {
	s.vars = maps.Clone(exampleVars)
	seen := map[string]bool{}
	for _, rt := range core {
		seen[rt.pattern()] = true
	}
	h := host{s}
	for _, m := range s.cfg.Mounts {
		for _, mr := range m(h) {
			rt := route{method: mr.Method, path: mr.Path, name: mr.Name, summary: mr.Summary, role: mr.Role,
				handle: handlerFunc(mr.Handle), request: mr.Request, response: mr.Response, media: mr.Media,
				status: mr.Status, example: mr.Example, vars: mr.Vars, resource: mr.Resource}
			for _, p := range mr.Params {
				rt.params = append(rt.params, fromMount(p))
			}
			switch {
			case seen[rt.pattern()]:
				return nil, fmt.Errorf("httpapi: mounted route %s is already served", rt.pattern())
			case rt.role == "" || rt.handle == nil:
				return nil, fmt.Errorf("httpapi: mounted route %s needs a role and a handler", rt.pattern())
			}
			seen[rt.pattern()] = true
			maps.Copy(s.vars, mr.VarDocs)
			core = append(core, rt)
		}
	}
	return core, nil
}

// mountedProblem turns a mounted route's *mount.Problem into the answer.
func mountedProblem(mp *mount.Problem) *apiError {
	e := problemf(mp.Status, mp.Slug, "%s", mp.Detail)
	if mp.Field != "" {
		e = fieldError(mp.Field, "%s", mp.Detail)
		e.p.Status, e.p.Type = mp.Status, problemBase+mp.Slug
		if t, ok := titles[mp.Slug]; ok {
			e.p.Title = t
		}
	}
	if mp.Title != "" {
		e.p.Title = mp.Title
	}
	for k, v := range mp.Header {
		for _, x := range v {
			e.withHeader(k, x)
		}
	}
	return e
}

// host is the Server as mounted routes see it (mount.Host).
type host struct{ s *Server }

func (h host) Regions() []string { return append([]string(nil), h.s.regions...) }

func (h host) CheckRegion(p auth.Principal, region, field string) error {
	return h.s.checkRegion(p, region, field)
}

func (h host) SearchRegions(r *http.Request, p auth.Principal) ([]string, error) {
	return h.s.searchRegions(r, p)
}

func (h host) IdempotencyKey(r *http.Request, body string) (string, error) {
	return idempotencyKey(r, body)
}

func (h host) Notify(region string) { h.s.notify(region) }

func (h host) OneRegion(r *http.Request, p auth.Principal) (string, error) {
	return h.s.oneRegion(r, p)
}

func (h host) FindJob(r *http.Request, p auth.Principal) (*job.Job, error) {
	j, _, err := h.s.findJob(r.Context(), r, p, ownTenant)
	return j, err
}

func (h host) Page(r *http.Request) (string, int, error) { return pageOf(r) }

func (h host) ShowResult(kind string, show func(json.RawMessage) json.RawMessage) {
	if h.s.results == nil {
		h.s.results = map[string]func(json.RawMessage) json.RawMessage{}
	}
	h.s.results[kind] = show
}

func (h host) ListJobs(r *http.Request, p auth.Principal, kind string) ([]*job.Job, string, error) {
	if r.URL.Query().Get("kind") != "" {
		return nil, "", fieldError("kind", "%s lists only its own kind; drop the kind parameter", r.URL.Path)
	}
	lp, err := listParams(r, p)
	if err != nil {
		return nil, "", err
	}
	lp.Kind = kind
	regions, err := h.s.searchRegions(r, p)
	if err != nil {
		return nil, "", err
	}
	return h.s.listAcross(r.Context(), regions, lp, nil)
}

func (h host) Decode(w http.ResponseWriter, r *http.Request, dst any, limit int64, tooLarge string) error {
	if err := checkJSONType(r); err != nil {
		return err
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	var tooBig *http.MaxBytesError
	if err == nil {
		if err = dec.Decode(&struct{}{}); errors.Is(err, io.EOF) {
			return nil
		}
		if !errors.As(err, &tooBig) {
			return problemf(http.StatusBadRequest, "malformed-json", "the body must hold exactly one JSON object, with nothing after it")
		}
	}
	if errors.As(err, &tooBig) {
		return problemf(http.StatusRequestEntityTooLarge, "payload-too-large", "the request body exceeds %d bytes; %s",
			limit, strings.TrimSuffix(tooLarge, "."))
	}
	return decodeError(err)
}

// pageOf reads after and limit (see readLimit).
func pageOf(r *http.Request) (string, int, error) {
	q := r.URL.Query()
	after := q.Get("after")
	if len(after) > 200 {
		return "", 0, fieldError("after", "after is at most 200 bytes")
	}
	limit, err := readLimit(q)
	return after, limit, err
}
