package engine

import (
	"context"
	"errors"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// serveWindow is how long a kind counts as served after a lease of it
// through this writer: an external worker long-polls at least this often
// while it runs.
const serveWindow = time.Minute

// Serve records that kinds are served for good (an engine runs them) in
// both lanes.
func (w *Jobs) Serve(kinds ...string) { w.ServeIn("", kinds...) }

// ServeIn records that kinds are served for good in lane ("": both), by a
// lane-dedicated engine (Config.Lanes). A kind served in one lane counts
// as unserved in the other (ServesIn), as a kind only another node's
// workers serve does.
func (w *Jobs) ServeIn(lane job.Lane, kinds ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.served == nil {
		w.served = map[string]time.Time{}
	}
	for _, k := range kinds {
		at, was := w.served[k]
		always := was && at.IsZero()
		w.served[k] = time.Time{} // zero: always
		prev, one := w.servedIn[k]
		switch {
		case lane == "", always && !one, always && prev != lane:
			delete(w.servedIn, k) // every lane
		default:
			if w.servedIn == nil {
				w.servedIn = map[string]job.Lane{}
			}
			w.servedIn[k] = lane
		}
	}
}

// leasedKinds records that a worker asked for kinds at now.
func (w *Jobs) leasedKinds(kinds []string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.served == nil {
		w.served = map[string]time.Time{}
	}
	for _, k := range kinds {
		if at, ok := w.served[k]; !ok || !at.IsZero() {
			w.served[k] = now
		}
	}
	if len(w.served) > maxServed {
		for k, at := range w.served {
			if !at.IsZero() && now.Sub(at) > serveWindow {
				delete(w.served, k)
			}
		}
	}
}

// maxServed bounds the kinds remembered as served before stale ones are
// dropped.
const maxServed = 10000

// Serves reports whether something leases kind through this writer: an
// engine that runs it, or a worker that asked for it within serveWindow.
// Another node's workers are not seen; a kind only they serve counts as
// unserved, which makes predictions err long only while the lane is old.
func (w *Jobs) Serves(kind string, now time.Time) bool { return w.ServesIn(kind, "", now) }

// ServesIn is Serves for a job of lane ("": either): a kind an engine
// here serves only in the other lane (Config.Lanes) is unserved in this
// one.
func (w *Jobs) ServesIn(kind string, lane job.Lane, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.served[kind]
	if ok && at.IsZero() {
		only, one := w.servedIn[kind]
		return !one || lane == "" || lane == only
	}
	return ok && now.Sub(at) <= serveWindow
}

// OtherLaneOnly reports whether an engine here runs kind in one lane
// (Config.Lanes) that is not lane: its handler then does not run lane's
// jobs.
func (w *Jobs) OtherLaneOnly(kind string, lane job.Lane) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	only, one := w.servedIn[kind]
	return one && only != lane
}

// LastLeased reports when a worker last asked for kind through this writer
// (ok false: never, or forgotten); always is true when an engine here runs
// the kind. The dashboard and a waiting job's view show it; Serves is the
// yes-or-no the prediction uses.
func (w *Jobs) LastLeased(kind string) (at time.Time, always, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok = w.served[kind]
	return at, ok && at.IsZero(), ok
}

// ServeWindow is how long a kind counts as served after a worker asked for
// it through a writer (see Serves).
const ServeWindow = serveWindow

// PredictParams describes a job whose queue wait PredictWait estimates.
type PredictParams struct {
	Kind string
	Lane job.Lane
	Keys []string
	// Cost is the job's cost on each key; default 1.
	Cost int64
	// Default configures keys the store does not know yet.
	Default admission.Config
	// Backlog, when set, returns the cost queued on key ahead of a job of
	// the lane (e.g. from a cache); nil reads store.Backlog.
	Backlog func(ctx context.Context, lane job.Lane, key string) (int64, error)
	// Limit, when set, returns a key's state (store.ErrNotFound for a key
	// the store does not know yet), so that a caller that already read the
	// keys (the API, to check the job's cost) does not read them again;
	// nil reads store.GetLimit.
	Limit func(ctx context.Context, name string) (admission.State, error)
}

// PredictWait is the one queue-wait prediction (admission.PredictWait) over
// the region's live state: each key's state and backlog, whether this
// writer sees anything serving the kind, and, when nothing does, the
// lane's oldest ready job (a store scan, so only then).
func (w *Jobs) PredictWait(ctx context.Context, p PredictParams) (admission.Prediction, error) {
	now := w.cfg.Now()
	in := admission.WaitInput{Now: now, Cost: p.Cost, Served: w.ServesIn(p.Kind, p.Lane, now)}
	for _, name := range p.Keys {
		get := w.cfg.Store.GetLimit
		if p.Limit != nil {
			get = p.Limit
		}
		k, err := get(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			def := p.Default
			def.Name = name
			k, err = admission.NewState(def), nil
		}
		if err != nil {
			return admission.Prediction{}, err
		}
		var ahead int64
		if k.Rate > 0 || len(k.Windows) > 0 { // only paced keys need the backlog
			if ahead, err = w.backlog(ctx, p, name); err != nil {
				return admission.Prediction{}, err
			}
		}
		in.Keys = append(in.Keys, admission.KeyLoad{State: k, Ahead: ahead})
	}
	if !in.Served {
		age, err := w.oldestReady(ctx, p.Lane, now)
		if err != nil {
			return admission.Prediction{}, err
		}
		in.OldestReady = age
	}
	return admission.PredictWait(in), nil
}

// statsTTL is how long a lane's oldest-ready age read from the store is
// reused: a store read (Store.OldestReady, two index lookups per lane) on
// every enqueue of a kind this node does not serve would still be one
// read per request.
const statsTTL = time.Second

// oldestReady returns the age of the lane's oldest ready job, from a read
// at most statsTTL old (aged by the time since).
//
// One read at a time: while a refresh is under way, other callers use the
// previous read (aged). Without that, every enqueue arriving in the read's
// time (it scans the jobs table) read again, and under load those scans
// were a third of the API's CPU (pprof of the http-enqueue benchmark).
func (w *Jobs) oldestReady(ctx context.Context, lane job.Lane, now time.Time) (time.Duration, error) {
	w.mu.Lock()
	if c := w.stats; c != nil && (w.statsReading || time.Since(c.fetched) < statsTTL) {
		defer w.mu.Unlock()
		if age, ok := c.oldest[lane]; ok {
			return max(0, age+now.Sub(c.at)), nil
		}
		return 0, nil // no ready job then, nor inserted since (inserted notes them)
	}
	w.statsReading = true
	w.mu.Unlock()
	// OldestReady, not Stats: Stats also counts every job (a scan of the
	// table), which was ~12% of the CPU of bench http-batch with kinds no
	// node serves; the ages are a few index lookups.
	oldest, err := w.cfg.Store.OldestReady(ctx, now)
	w.mu.Lock()
	w.statsReading = false
	w.mu.Unlock()
	if err != nil {
		return 0, err
	}
	age := oldest[lane] // before the cache shares the map with inserted
	w.mu.Lock()
	w.stats = &statsCache{oldest: oldest, at: now, fetched: time.Now()}
	w.mu.Unlock()
	return age, nil
}

// inserted notes new waiting jobs in the cached ages: a lane that had no
// ready job has one from its eligible time on, so the cache need not be
// dropped (and the table scanned again) on every insert.
func (c *statsCache) inserted(j *job.Job) {
	if j.State != job.StateWaiting {
		return
	}
	if _, ok := c.oldest[j.Lane]; !ok {
		c.oldest[j.Lane] = c.at.Sub(j.EligibleAt) // negative until eligible
	}
}

// statsCache is the last Stats read of oldestReady; its map is its own.
type statsCache struct {
	oldest  map[job.Lane]time.Duration
	at      time.Time // the writer's clock at the read
	fetched time.Time // wall clock: freshness of a cache, not a scheduling decision
}

func (w *Jobs) backlog(ctx context.Context, p PredictParams, key string) (int64, error) {
	if p.Backlog != nil {
		return p.Backlog(ctx, p.Lane, key)
	}
	got, err := w.cfg.Store.Backlog(ctx, p.Lane, []string{key})
	return got[key], err
}
