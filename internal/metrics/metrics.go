// Package metrics exposes ratelane's Prometheus metrics. Everything is
// registered on a prometheus.Registerer the caller passes in, never on the
// global registry, because ratelane is also a library embedded in programs
// with metrics of their own.
//
// Labels are bounded by construction and never carry content: kinds, routes
// and limit-key scopes are capped at MaxLabelValues distinct values each
// (later ones are counted as "_other"); classes, reasons, lanes and states
// are closed enums; a rate limit is labelled with its limit key's scope
// prefix (the part before the first ':', e.g. "openai" for
// "openai:gpt-4o-mini"), never the whole key, whose suffix is often a
// per-customer id. Payloads, results and error texts are never read.
//
// Metrics:
//
//	ratelane_attempts_total{kind,class}         finished attempts by job kind and outcome class
//	ratelane_rate_limited_total{scope}          rate-limited attempts by limit-key scope prefix
//	ratelane_retry_delay_seconds                histogram of scheduled retry delays
//	ratelane_terminal_total{reason}             jobs that ended terminal, by reason
//	ratelane_leases_total                       jobs leased
//	ratelane_idempotent_replays_total           enqueues answered from an idempotency key
//	ratelane_jobs{region,lane,state}            jobs by state (scraped from the stores)
//	ratelane_oldest_ready_seconds{region,lane}  age of the oldest job ready to run
//	ratelane_leases_in_flight{region}           running jobs
//	ratelane_store_up{region}                   1 when the last stats read succeeded
//	ratelane_store_writes_total{region}         writes the store committed (SQLite)
//	ratelane_store_transactions_total{region}   transactions (fsyncs) that committed them (SQLite)
//	ratelane_store_write_wait_seconds{region,lane}  a write's wait for the single writer (SQLite)
//	ratelane_store_write_behind{region,lane}    the other lane's writes run while a write waited (SQLite)
//	ratelane_batch_yield_total{region,result}   pieces of batch-lane work at the engine's yield gate: passed, held, bounded
//	ratelane_batch_yield_seconds_total{region}  time batch-lane work waited there for interactive work in flight
//	ratelane_batch_budget_total{region,result}  pieces of batch-lane work at the engine's batch budget: passed, held
//	ratelane_batch_budget_seconds_total{region} time batch-lane work waited there for a turn
//	ratelane_engine_stage_seconds{region,lane,stage}  histogram of the time jobs spent in each stage of the engine
//	ratelane_leases_recovered_total             expired leases the reaper recovered
//	ratelane_late_outcomes_refused_total{op}    late finishes and heartbeats of a lost lease, refused
//	ratelane_handlers_abandoned_total{kind}     attempts abandoned past their maximum run time
//	ratelane_handlers_stuck                     abandoned handlers whose goroutine still runs
//	ratelane_publications_total{kind,result}    publication attempts of validated jobs, by how they ended
//	ratelane_publications_queued                publications queued for or running on the engines' pools
package metrics

import (
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// MaxLabelValues caps the distinct values of each label whose values come
// from outside a closed enum (kind, scope, route). Values past the cap are
// reported as OtherLabel, so a misbehaving producer cannot blow up the
// series count.
const MaxLabelValues = 100

// OtherLabel replaces label values past MaxLabelValues and values that are
// not usable as labels (too long, not UTF-8).
const OtherLabel = "_other"

// maxLabelLen bounds one label value.
const maxLabelLen = 64

// RetryDelayBuckets are the bucket bounds of ratelane_retry_delay_seconds:
// from sub-second repair retries to the 7-day delay cap.
var RetryDelayBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 6 * 3600, 86400, 7 * 86400}

// Metrics holds ratelane's metrics. It implements engine.Observer; pass it
// as engine.Config.Observer (metrics_test.go asserts it; this package does
// not import engine, so the engine may import it). It is safe for concurrent use.
type Metrics struct {
	attempts    *prometheus.CounterVec
	rateLimited *prometheus.CounterVec
	retryDelay  prometheus.Histogram
	terminal    *prometheus.CounterVec
	leases      prometheus.Counter
	replays     prometheus.Counter
	recovered   prometheus.Counter
	refused     *prometheus.CounterVec
	abandoned   *prometheus.CounterVec
	stuck       prometheus.Gauge
	published   *prometheus.CounterVec
	pubQueued   prometheus.Gauge
	ticks       *prometheus.CounterVec
	stats       *statsCollector
	keys        *keyCollector
	writes      *writeCollector
	yield       *yieldCollector

	kinds, scopes *bounded
}

// counter and counterVec make a counter the way every one here is made:
// a name and a help text (and labels), no constant labels.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// New creates the metrics and registers them on reg. It fails when reg
// already holds metrics of the same names.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		attempts: counterVec("ratelane_attempts_total",
			"Finished job attempts by job kind and outcome class.", "kind", "class"),
		rateLimited: counterVec("ratelane_rate_limited_total",
			"Rate-limited attempts by limit-key scope (the key's prefix before the first ':'). An attempt whose 429 applies to keys of several scopes counts once per scope.", "scope"),
		retryDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelane_retry_delay_seconds",
			Help:    "Delay of each scheduled retry.",
			Buckets: RetryDelayBuckets,
		}),
		terminal: counterVec("ratelane_terminal_total",
			"Jobs that ended terminal (dead letters), by reason.", "reason"),
		leases: counter("ratelane_leases_total",
			"Jobs leased by the engine."),
		replays: counter("ratelane_idempotent_replays_total",
			"Enqueue requests answered with the job of an earlier request with the same idempotency key."),
		recovered: counter("ratelane_leases_recovered_total",
			"Expired leases the reaper recovered (the worker crashed, stalled or lost its lease); each costs the job one transient attempt."),
		refused: counterVec("ratelane_late_outcomes_refused_total",
			"Finishes (op=finish) and heartbeats (op=heartbeat) of an in-process worker that had lost its lease, refused by the store's guard; they changed nothing.", "op"),
		abandoned: counterVec("ratelane_handlers_abandoned_total",
			"Attempts abandoned because their handler ignored its cancelled context past the kind's maximum run time.", "kind"),
		stuck: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelane_handlers_stuck",
			Help: "Abandoned handlers whose goroutine is still running. Each may hold memory, connections or a worker slot; alert when it stays above zero.",
		}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelane_publications_total",
			Help: "Publication attempts of validated jobs by kind and result: published; failed (the publisher returned an error, retried later); held (another caller held the publication claim); lost (the claim was lost while the publisher ran).",
		}, []string{"kind", "result"}),
		pubQueued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelane_publications_queued",
			Help: "Validated jobs queued for or being published on the engines' publication pools of this process. A value that stays high means publishers are slower than validation.",
		}),
		ticks:  newTicksCounter(),
		stats:  newStatsCollector(),
		keys:   newKeyCollector(),
		writes: newWriteCollector(),
		yield:  newYieldCollector(),
		kinds:  newBounded(MaxLabelValues),
		scopes: newBounded(MaxLabelValues),
	}
	for _, c := range []prometheus.Collector{m.attempts, m.rateLimited, m.retryDelay, m.terminal, m.leases, m.replays,
		m.recovered, m.refused, m.abandoned, m.stuck, m.published, m.pubQueued, m.ticks, m.stats, m.keys, m.writes, m.yield} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Finished records one finished attempt: its outcome class, a rate limit's
// scope, a scheduled retry's delay and a terminal reason. It reads only the
// job's kind and limit keys, never its payload or result.
func (m *Metrics) Finished(j *job.Job, o job.Outcome, t store.Transition) {
	class := classLabel(t.Record.Outcome)
	if class == "" {
		class = classLabel(o.Class)
	}
	m.attempts.WithLabelValues(m.kinds.label(j.Kind), class).Inc()
	if o.Class == job.ClassRateLimited {
		for _, s := range m.rateLimitScopes(j, o) {
			m.rateLimited.WithLabelValues(s).Inc()
		}
	}
	if t.To == job.StateRetryScheduled {
		m.retryDelay.Observe(t.Record.Delay.Seconds())
	}
	if t.To == job.StateTerminal {
		m.terminal.WithLabelValues(reasonLabel(t.Reason)).Inc()
	}
}

// rateLimitScopes returns the distinct scope labels a rate limit applies
// to: the outcome's scope key, or all of the job's keys when it named none.
func (m *Metrics) rateLimitScopes(j *job.Job, o job.Outcome) []string {
	keys := j.LimitKeys
	if o.Scope != "" {
		keys = []string{o.Scope}
	}
	var scopes []string
	for _, k := range keys {
		s := m.scopes.label(Scope(k))
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	return scopes
}

// Leased records n jobs leased.
func (m *Metrics) Leased(n int) { m.leases.Add(float64(n)) }

// LeasesRecovered records n expired leases recovered by the reaper.
func (m *Metrics) LeasesRecovered(n int) { m.recovered.Add(float64(n)) }

// OutcomeRefused records one late write of a lost lease refused by the
// store: op is "finish" or "heartbeat" (anything else is counted as
// "_other").
func (m *Metrics) OutcomeRefused(op string) {
	if op != "finish" && op != "heartbeat" {
		op = OtherLabel
	}
	m.refused.WithLabelValues(op).Inc()
}

// HandlerAbandoned records an attempt of kind abandoned past its maximum
// run time; its goroutine counts as stuck until StuckReturned.
func (m *Metrics) HandlerAbandoned(kind string) {
	m.abandoned.WithLabelValues(m.kinds.label(kind)).Inc()
	m.stuck.Inc()
}

// StuckReturned records that an abandoned handler finally returned.
func (m *Metrics) StuckReturned(string) { m.stuck.Dec() }

// Publication records one publication attempt of a job of kind; result
// is "published", "failed", "held" or "lost" (anything else is counted as
// "_other").
func (m *Metrics) Publication(kind, result string) {
	switch result {
	case "published", "failed", "held", "lost":
	default:
		result = OtherLabel
	}
	m.published.WithLabelValues(m.kinds.label(kind), result).Inc()
}

// PublicationsQueued adds delta to the publications queued or running.
func (m *Metrics) PublicationsQueued(delta int) { m.pubQueued.Add(float64(delta)) }

// IdempotentReplay records one enqueue answered from an earlier request with
// the same idempotency key. The HTTP API calls it.
func (m *Metrics) IdempotentReplay() { m.replays.Inc() }

// Scope returns the scope prefix of a limit key: the part before the first
// ':' ("openai" for "openai:gpt-4o-mini", "subscriber" for
// "subscriber:store_17"). A key without ':' is its own scope; an empty
// prefix is "_none".
func Scope(key string) string {
	prefix, _, _ := strings.Cut(key, ":")
	if prefix == "" {
		return "_none"
	}
	return prefix
}

// bounded hands out label values, admitting at most max distinct ones.
type bounded struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

func newBounded(max int) *bounded { return &bounded{max: max, seen: map[string]struct{}{}} }

func (b *bounded) label(v string) string {
	if v == "" || len(v) > maxLabelLen || !utf8.ValidString(v) {
		return OtherLabel
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[v]; ok {
		return v
	}
	if len(b.seen) >= b.max {
		return OtherLabel
	}
	b.seen[v] = struct{}{}
	return v
}

var knownClasses = []job.Class{
	job.ClassSuccess, job.ClassRateLimited, job.ClassTransient, job.ClassInvalidOutput,
	job.ClassPermanent, job.ClassLeaseExpired, job.ClassCancelled, job.ClassRedriven, job.ClassPending,
}

// classLabel maps a class to itself when known; the engine treats unknown
// classes as permanent, but the label says "_other" so they stand out.
func classLabel(c job.Class) string {
	if c == "" {
		return ""
	}
	for _, k := range knownClasses {
		if k == c {
			return string(c)
		}
	}
	return OtherLabel
}

func reasonLabel(r job.Reason) string {
	for _, k := range job.Reasons {
		if k == r {
			return string(r)
		}
	}
	return OtherLabel
}
