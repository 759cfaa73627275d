package httpapi

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// checkRegion refuses a region this server does not have (400, naming
// field) or the key may not use (403).
func (s *Server) checkRegion(p auth.Principal, region, field string) error {
	if _, ok := s.cfg.Regions[region]; !ok {
		return fieldError(field, "unknown region %q; this server has regions %s", region, strings.Join(s.regions, ", "))
	}
	if !p.CanUseRegion(region) {
		return problemf(http.StatusForbidden, "region-forbidden", "this API key may use regions %s, not %q",
			strings.Join(p.Regions, ", "), region)
	}
	return nil
}

// searchRegions returns the regions a request addresses: the region query
// parameter when given (checked), else every region the key may use.
func (s *Server) searchRegions(r *http.Request, p auth.Principal) ([]string, error) {
	if region := r.URL.Query().Get("region"); region != "" {
		return []string{region}, s.checkRegion(p, region, "region")
	}
	regions := s.cfg.permitted(p)
	if len(regions) == 0 {
		return nil, problemf(http.StatusForbidden, "region-forbidden", "this API key may use none of this server's regions (%s)",
			strings.Join(s.regions, ", "))
	}
	return regions, nil
}

// oneRegion resolves the region of an endpoint about one region's object
// (a limit key): the region query parameter, or the only region the key may
// use; with several, the parameter is required.
func (s *Server) oneRegion(r *http.Request, p auth.Principal) (string, error) {
	regions, err := s.searchRegions(r, p)
	if err != nil {
		return "", err
	}
	if len(regions) > 1 {
		return "", fieldError("region", "region is required: pass ?region= one of %s", strings.Join(regions, ", "))
	}
	return regions[0], nil
}

// visibility says whose jobs a lookup may return.
type visibility int

const (
	// ownTenant: producer and worker keys see their tenant's jobs; admins
	// every tenant's. It is the only visibility: leases are scoped by
	// tenant too, so no route acts on another tenant's job.
	ownTenant visibility = iota
)

// validID bounds path ids so that junk never reaches the stores.
func validID(id string) bool {
	return id != "" && len(id) <= 64 && !strings.ContainsAny(id, "\x00/ ")
}

// findJob looks a job up by id in the request's regions (findIn).
func (s *Server) findJob(ctx context.Context, r *http.Request, p auth.Principal, vis visibility) (*job.Job, store.Store, error) {
	return findIn(s, r, p, "job", func(st store.Store, id string) (*job.Job, error) { return st.Get(ctx, id) },
		func(j *job.Job) bool { return vis != ownTenant || p.Role == auth.RoleAdmin || j.Tenant == p.Tenant })
}

// findIn looks the path's id up with get in each of the request's regions:
// what findJob and findSchedule search. A row that owned refuses (another
// tenant's) is answered exactly like a missing one (404, naming what), so
// ids of other tenants cannot be probed.
func findIn[T any](s *Server, r *http.Request, p auth.Principal, what string, get func(st store.Store, id string) (T, error), owned func(T) bool) (T, store.Store, error) {
	var none T
	id := r.PathValue("id")
	regions, err := s.searchRegions(r, p)
	if err != nil {
		return none, nil, err
	}
	if !validID(id) {
		return none, nil, notFound(what + " " + id)
	}
	for _, region := range regions {
		st := s.cfg.Regions[region]
		v, err := get(st, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return none, nil, err
		}
		if !owned(v) {
			break
		}
		return v, st, nil
	}
	return none, nil, notFound(what + " " + id)
}

// listAcross lists jobs from several regions newest first with one id
// cursor (ids are UUIDv7, globally ordered by creation). keep filters the
// page after the cut, so a page may be shorter than the limit while
// next is still set; clients page until next is empty.
func (s *Server) listAcross(ctx context.Context, regions []string, lp store.ListParams, keep func(*job.Job) bool) ([]*job.Job, string, error) {
	want := lp.Limit
	lp.Limit = want + 1
	var all []*job.Job
	for _, region := range regions {
		js, err := s.cfg.Regions[region].List(ctx, lp)
		if err != nil {
			return nil, "", err
		}
		all = append(all, js...)
	}
	sort.Slice(all, func(a, b int) bool { return all[a].ID > all[b].ID })
	next := ""
	if len(all) > want {
		all = all[:want]
		next = all[want-1].ID
	}
	if keep != nil {
		all = slices.DeleteFunc(all, func(j *job.Job) bool { return !keep(j) })
	}
	return all, next, nil
}
