package rltype

import "time"

// Defaults shared by the library, the engine, the HTTP API and the CLI, so
// that a zero configuration field means the same everywhere.
const (
	// DefaultInteractiveBudget is the interactive lane's latency budget:
	// past it, batch yields and the API refuses or degrades new
	// interactive work.
	DefaultInteractiveBudget = 30 * time.Second
	// DefaultBatchBudget is the batch lane's latency budget.
	DefaultBatchBudget = 24 * time.Hour
	// DefaultRetention is how long finished jobs are kept before pruning.
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultWorkers is how many jobs an engine runs at once.
	DefaultWorkers = 16
	// DefaultLeaseFor is the lease period of a job, in process or leased
	// over HTTP.
	DefaultLeaseFor = 30 * time.Second
)
