// Package auth holds ratelane's API keys and the principal a request acts
// as: a tenant, the regions it may use and a role.
package auth

import "slices"

// Role is what a key may do.
type Role string

// Roles.
const (
	// RoleProducer may enqueue jobs and read its tenant's jobs.
	RoleProducer Role = "producer"
	// RoleWorker may lease jobs and report their outcomes.
	RoleWorker Role = "worker"
	// RoleAdmin may do everything, including limits, keys and dead letters,
	// across tenants.
	RoleAdmin Role = "admin"
)

// Principal is who a request acts as.
type Principal struct {
	// KeyID is the key's public prefix; safe to log.
	KeyID string
	// Tenant scopes every job the principal creates or reads.
	Tenant string
	// Role is what the principal may do.
	Role Role
	// Regions the principal may use; empty means every region.
	Regions []string
}

// CanUseRegion reports whether the principal may touch the region.
func (p Principal) CanUseRegion(region string) bool {
	return len(p.Regions) == 0 || slices.Contains(p.Regions, region)
}

// Can reports whether the principal's role allows an action that needs
// role r: admin may do everything; otherwise the roles must match.
func (p Principal) Can(r Role) bool { return p.Role == RoleAdmin || p.Role == r }

// Roles lists every role, from least to most privileged.
var Roles = []Role{RoleProducer, RoleWorker, RoleAdmin}

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }
