package ratelane

import "github.com/ratelane/ratelane/internal/engine"

// The region observer forwards the engine's lease faults (recovered
// leases, refused late outcomes, abandoned and stuck handlers) to the
// metrics, when they take them.

func (o observer) leaseObserver() engine.LeaseObserver {
	lo, _ := o.metrics.(engine.LeaseObserver)
	return lo
}

func (o observer) LeasesRecovered(n int) {
	if lo := o.leaseObserver(); lo != nil {
		lo.LeasesRecovered(n)
	}
}

func (o observer) OutcomeRefused(op string) {
	if lo := o.leaseObserver(); lo != nil {
		lo.OutcomeRefused(op)
	}
}

func (o observer) HandlerAbandoned(kind string) {
	if lo := o.leaseObserver(); lo != nil {
		lo.HandlerAbandoned(kind)
	}
}

func (o observer) StuckReturned(kind string) {
	if lo := o.leaseObserver(); lo != nil {
		lo.StuckReturned(kind)
	}
}

var _ engine.LeaseObserver = observer{}
