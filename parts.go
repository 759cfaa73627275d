package ratelane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Aggregator computes a parent job's outcome from its parts, once every
// part is final: published (with its Result) or terminal (with its
// Reason). It returns the parent's outcome: a success, with the parent's
// result in Outcome.Result (JSON), makes the parent validated and then
// published (by the kind's Publisher, when it has one); ClassPermanent
// makes it terminal with Outcome.Reason (default permanent_error); any
// other class leaves the parent accepted: a transient one is tried again
// at the next sweep (Parts.SweepEvery), any other at the next walk of
// every accepted parent (at start and every 15 sweeps).
//
// The engine calls it when the last part finishes and, to repair a
// missed wake-up or a part finished by another process, at the next sweep
// or the one after; to repair a crash, at start and at the walk every 15
// sweeps; the parent's
// advance is a compare-and-set, so it happens once even when two nodes
// aggregate the same parent at once. An Aggregator may thus run more than
// once for one parent: it must compute, not act. Put side effects (a
// notification, a delivery) in the kind's Publisher, which runs once the
// advance is written and is recorded exactly once.
type Aggregator interface {
	Aggregate(ctx context.Context, parent *Job, parts []*Job) Outcome
}

// AggregateFunc adapts a function to Aggregator.
type AggregateFunc func(ctx context.Context, parent *Job, parts []*Job) Outcome

// Aggregate calls f.
func (f AggregateFunc) Aggregate(ctx context.Context, parent *Job, parts []*Job) Outcome {
	return f(ctx, parent, parts)
}

// Parts configures a kind whose jobs are parents aggregated from parts:
// fan-out work (N fetches, N chunks of a document, N calls to a paced
// upstream) whose results are combined into one. Parents are created with
// Client.InsertParts; each part runs as an ordinary job of its own kind,
// paced by its own limit keys, and the parent is advanced with the
// Aggregator's outcome once every part is final.
type Parts struct {
	// Aggregator computes the parent's outcome (required).
	Aggregator Aggregator
	// Publisher, when set, delivers the aggregated result once: the parent
	// goes validated, Publisher runs (again after a crash, so it must be
	// idempotent) and validated -> published records it once.
	Publisher Publisher
	// SweepEvery is how often the engine re-checks the parents of parts
	// finished since its last check and the wake-ups it missed, default
	// 2 s; every 15th check (and the first, at start) reads every accepted
	// parent, which repairs a crash between the last part and the
	// parent's advance.
	SweepEvery time.Duration
}

// HandleParts registers kind, in every region, as a parent aggregated from
// parts. Call it before NewClient; the parts' own kinds are registered
// with Handle as usual. A parent is never run by a handler; if an operator
// redrives one (terminal -> waiting), it is aggregated again from its
// parts as they are then.
func (c *Config) HandleParts(kind string, p Parts) { c.HandlePartsIn("", kind, p) }

// HandlePartsIn is HandleParts for one region ("" for all). An Aggregator
// or Publisher that implements RegionBound must belong to that region.
func (c *Config) HandlePartsIn(region, kind string, p Parts) {
	if c.kinds == nil {
		c.kinds = map[string]map[string]engine.Kind{}
	}
	if c.kinds[region] == nil {
		c.kinds[region] = map[string]engine.Kind{}
	}
	k := engine.Kind{Aggregate: p.Aggregator, SweepEvery: p.SweepEvery}
	if p.Publisher != nil {
		k.Publisher = p.Publisher
	}
	c.kinds[region][kind] = k
	c.bound = append(c.bound, boundResource{region: region, kind: kind, publisher: p.Publisher, aggregator: p.Aggregator})
}

// PartsResult is the result of InsertParts.
type PartsResult struct {
	// Parent is the parent job, accepted until its parts are final.
	Parent InsertResult
	// Parts are its parts, in the order given.
	Parts []InsertResult
}

// InsertParts validates and durably inserts a parent job and its parts in
// one write: all of them or none. The parent (its kind registered with
// HandleParts by whichever process aggregates it) is accepted, not run;
// each part is an ordinary waiting job whose ParentID is the parent. A
// part's Region, Tenant and Lane default to the parent's and must equal
// its region and tenant. A parent that names no LimitKeys gets
// "parts:<kind>" (its keys only pace the aggregation of a redriven
// parent). With an IdempotencyKey on the parent, parts without one get
// keys derived from it, so a replayed InsertParts returns the first
// parent and inserts no part twice. A parent with no parts is aggregated
// at once.
func (c *Client) InsertParts(ctx context.Context, parent InsertParams, parts []InsertParams) (PartsResult, error) {
	if len(parent.LimitKeys) == 0 {
		parent.LimitKeys = []string{"parts:" + parent.Kind}
	}
	now := c.cfg.Now()
	pj, err := c.prepare(parent, now)
	if err != nil {
		return PartsResult{}, fmt.Errorf("parent: %w", err)
	}
	if parent.Delay != 0 || !parent.RunAt.IsZero() {
		return PartsResult{}, errors.New("parent: a parent runs when its parts are done; schedule its parts instead (RunAt, Delay)")
	}
	pj.State = job.StateAccepted
	jobs := make([]*job.Job, len(parts))
	for i, p := range parts {
		p.Region = cmp.Or(p.Region, pj.Region)
		p.Tenant = cmp.Or(p.Tenant, pj.Tenant)
		p.Lane = cmp.Or(p.Lane, pj.Lane)
		j, err := c.prepare(p, now)
		if err != nil {
			return PartsResult{}, fmt.Errorf("part %d: %w", i, err)
		}
		if j.Region != pj.Region || j.Tenant != pj.Tenant {
			return PartsResult{}, fmt.Errorf("part %d: a part is in its parent's region %q and tenant %q, not %q and %q",
				i, pj.Region, pj.Tenant, j.Region, j.Tenant)
		}
		j.ParentID = pj.ID
		jobs[i] = j
	}
	rt := c.regions[pj.Region]
	// The store checks the costs inside its write, as InsertMany's.
	res, err := rt.jobs.InsertParts(store.WithCostCheck(ctx), pj, jobs, c.cfg.DefaultLimit)
	var ve *job.ValidationError
	if errors.As(err, &ve) {
		return PartsResult{}, err
	}
	if err != nil {
		return PartsResult{}, fmt.Errorf("ratelane: insert parts in region %q: %w", pj.Region, err)
	}
	out := PartsResult{Parent: InsertResult{Job: res[0].Job, Existing: res[0].Existing}}
	for _, r := range res[1:] {
		out.Parts = append(out.Parts, InsertResult{Job: r.Job, Existing: r.Existing})
	}
	c.notify(pj.Region)
	return out, nil
}
