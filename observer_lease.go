package ratelane

import "github.com/ratelane/ratelane/internal/engine"

// The region observer forwards the engine's lease faults (recovered
// leases, refused late outcomes, abandoned and stuck handlers) and its
// publications to the metrics.

func (o *observer) LeasesRecovered(n int) { o.metrics.LeasesRecovered(n) }

func (o *observer) OutcomeRefused(op string) { o.metrics.OutcomeRefused(op) }

func (o *observer) HandlerAbandoned(kind string) { o.metrics.HandlerAbandoned(kind) }

func (o *observer) StuckReturned(kind string) { o.metrics.StuckReturned(kind) }

func (o *observer) Publication(kind, result string) { o.metrics.Publication(kind, result) }

func (o *observer) PublicationsQueued(delta int) { o.metrics.PublicationsQueued(delta) }

var (
	_ engine.LeaseObserver   = (*observer)(nil)
	_ engine.PublishObserver = (*observer)(nil)
)
