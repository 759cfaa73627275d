package httpapi

import (
	"errors"
	"net/http"
	"slices"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/job"
)

// createKeyRequest is the body of POST /v1/keys.
type createKeyRequest struct {
	Tenant  string    `json:"tenant" required:"true" doc:"tenant whose jobs the key creates and reads"`
	Role    auth.Role `json:"role" required:"true" enum:"producer,worker,admin" doc:"what the key may do"`
	Regions []string  `json:"regions,omitempty" doc:"regions the key may use; empty means every region"`
	Name    string    `json:"name,omitempty" doc:"a label for people, e.g. billing-service"`
}

// createKeyResponse carries the secret, shown this once only.
type createKeyResponse struct {
	Secret string  `json:"secret" doc:"the API key; it is stored only as a hash and never shown again"`
	Key    KeyInfo `json:"key"`
}

// keyList is the answer of GET /v1/keys.
type keyList struct {
	Keys []KeyInfo `json:"keys"`
}

func (s *Server) handleCreateKey(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
	var req createKeyRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := s.checkKeyRequest(p, &req); err != nil {
		return err
	}
	secret, info, err := s.cfg.Keys.Create(r.Context(), req.Tenant, req.Role, req.Regions, req.Name)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusCreated, createKeyResponse{Secret: secret, Key: info})
}

// checkKeyRequest validates a new key. An admin restricted to some regions
// may only create keys restricted to (a subset of) them, so a key can never
// grant more than the key that made it.
func (s *Server) checkKeyRequest(p auth.Principal, req *createKeyRequest) error {
	switch {
	case req.Tenant == "" || len(req.Tenant) > job.MaxNameLen:
		return fieldError("tenant", "tenant must be 1 to %d bytes", job.MaxNameLen)
	case !slices.Contains([]auth.Role{auth.RoleProducer, auth.RoleWorker, auth.RoleAdmin}, req.Role):
		return fieldError("role", "role must be producer, worker or admin, not %q", req.Role)
	case len(req.Name) > job.MaxNameLen:
		return fieldError("name", "name must be at most %d bytes", job.MaxNameLen)
	case len(req.Regions) > len(s.regions):
		return fieldError("regions", "this server has %d regions; name each at most once", len(s.regions))
	case len(req.Regions) == 0 && len(p.Regions) > 0:
		return problemf(http.StatusForbidden, "region-forbidden", "this admin key is limited to regions %v; name the new key's regions", p.Regions)
	}
	for _, region := range req.Regions {
		if err := s.checkRegion(p, region, "regions"); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) handleListKeys(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	keys, err := s.cfg.Keys.List(r.Context())
	if err != nil {
		return err
	}
	if keys == nil {
		keys = []KeyInfo{}
	}
	return writeJSON(w, http.StatusOK, keyList{Keys: keys})
}

func (s *Server) handleRevokeKey(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
	id := r.PathValue("id")
	if !validID(id) {
		return notFound("API key " + id)
	}
	err := s.cfg.Keys.Revoke(r.Context(), id)
	if errors.Is(err, ErrUnknownKey) {
		return notFound("API key " + id)
	}
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
