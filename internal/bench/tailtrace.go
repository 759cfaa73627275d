package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"runtime/metrics"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/store"
)

// tailTrace is the batch-isolation workload's --trace-tail recorder: every
// stage span the engine reports (ratelane.PluginRegion.OnStage), every
// request to the simulators, the sweep's manifests, every interactive
// review's submit and end, and a 10 ms timeline of the process's and the
// simulator child's CPU, the collector and the store's commits. At the
// end it writes them to a JSON file and adds tail_* figures to the
// result: what the slowest in-sweep reviews spent in each stage against
// a typical one, and what overlapped them (tailSummary). Ids, kinds,
// paths and times only: no payload, prompt or diff.
type tailTrace struct {
	t0   time.Time
	path string

	mu       sync.Mutex
	spans    []traceSpan
	requests []traceRequest
	events   []traceEvent
	reviews  []traceReview
	samples  []traceSample
	st       store.Store
}

// traceSpan is one engine.StageSpan, its times in µs from the trace's
// start.
type traceSpan struct {
	ID     string `json:"id"`
	Parent string `json:"parent,omitempty"`
	Kind   string `json:"kind,omitempty"`
	Lane   string `json:"lane"`
	Stage  string `json:"stage"`
	Start  int64  `json:"s"`
	End    int64  `json:"e"`
	// Via, Asked and Woke are a queued stage's lease: its trigger, when
	// its write was called and when the fetch loop's wait ended (µs; 0:
	// none). See engine.StageSpan.
	Via   string `json:"via,omitempty"`
	Asked int64  `json:"asked,omitempty"`
	Woke  int64  `json:"woke,omitempty"`
}

// traceRequest is one HTTP request to a simulator: the provider profile,
// the method and the path with its ids replaced ({id}), when it was sent,
// when its headers came back and when its body was closed (µs), and the
// bytes of the body read.
type traceRequest struct {
	Profile string `json:"profile"`
	Method  string `json:"method"`
	Path    string `json:"path"`
	Start   int64  `json:"s"`
	Headers int64  `json:"h"`
	End     int64  `json:"e"`
	Bytes   int64  `json:"bytes"`
}

// traceEvent is one of the bench's own events (a manifest's intake, the
// sweep's start and end), µs.
type traceEvent struct {
	What  string `json:"what"`
	Start int64  `json:"s"`
	End   int64  `json:"e"`
}

// traceReview is one interactive review: its id (the parent job's), its
// phase (baseline, sweep), whether it was submitted while the sweep ran,
// and when it was submitted and seen published (µs).
type traceReview struct {
	ID      string `json:"id"`
	Phase   string `json:"phase"`
	InSweep bool   `json:"in_sweep"`
	Start   int64  `json:"s"`
	End     int64  `json:"e"`
}

// traceSample is one 10 ms reading: the process's and the simulator
// child's CPU seconds so far, garbage collections so far, the runnable
// goroutines, and the store's transactions and writes so far; and, to
// tell a stall of the whole process from one of its parts, what the OS
// scheduler did so far (Linux; 0 elsewhere): the ms the process's threads
// waited in the run queue for a core (RunQueueMs, procSched), and the ms
// some task of the machine did (HostCPUSomeMs, /proc/pressure/cpu). A
// review whose excess latency the process's run-queue wait over its
// span matches was kept off the CPU by the machine, not held by ratelane.
type traceSample struct {
	At            int64   `json:"t"`
	CPU           float64 `json:"cpu"`
	ChildCPU      float64 `json:"child_cpu"`
	GCCycles      uint64  `json:"gc"`
	Runnable      uint64  `json:"runnable"`
	Txs           int64   `json:"txs"`
	Writes        int64   `json:"writes"`
	RunQueueMs    float64 `json:"runq_ms"`
	HostCPUSomeMs float64 `json:"host_cpu_some_ms"`
}

func newTailTrace(path string) *tailTrace { return &tailTrace{t0: time.Now(), path: path} }

// us is t in µs from the trace's start.
func (t *tailTrace) us(at time.Time) int64 { return at.Sub(t.t0).Microseconds() }

// usOrZero is us(at), 0 for the zero time (none).
func (t *tailTrace) usOrZero(at time.Time) int64 {
	if at.IsZero() {
		return 0
	}
	return t.us(at)
}

// Name names the recorder's plug-in.
func (t *tailTrace) Name() string { return "bench-tail-trace" }

// Bind listens for the region's stage spans and keeps its store, whose
// commits the timeline counts.
func (t *tailTrace) Bind(_ context.Context, r *ratelane.PluginRegion) error {
	t.st = r.Store()
	return r.OnStage(t.span)
}

func (t *tailTrace) span(s engine.StageSpan) {
	sp := traceSpan{ID: s.ID, Parent: s.Parent, Kind: s.Kind, Lane: string(s.Lane), Stage: s.Stage, Start: t.us(s.Start), End: t.us(s.End),
		Via: s.Via, Asked: t.usOrZero(s.Asked), Woke: t.usOrZero(s.Woke)}
	t.mu.Lock()
	t.spans = append(t.spans, sp)
	t.mu.Unlock()
}

// event records one of the bench's events.
func (t *tailTrace) event(what string, start, end time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.events = append(t.events, traceEvent{What: what, Start: t.us(start), End: t.us(end)})
	t.mu.Unlock()
}

// review records an interactive review's submit and end.
func (t *tailTrace) review(id, phase string, start, end time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.reviews = append(t.reviews, traceReview{ID: id, Phase: phase, Start: t.us(start), End: t.us(end)})
	t.mu.Unlock()
}

// idInPath are the ids in a simulator's paths (files, batches).
var idInPath = regexp.MustCompile(`/(file-|batch_|msgbatch_)[A-Za-z0-9_-]+`)

// client is an HTTP client for profile whose requests the trace records.
func (t *tailTrace) client(profile string) *http.Client {
	return &http.Client{Transport: &traceTransport{t: t, profile: profile, next: http.DefaultTransport}}
}

type traceTransport struct {
	t       *tailTrace
	profile string
	next    http.RoundTripper
}

func (tt *traceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := tt.next.RoundTrip(req)
	rec := traceRequest{Profile: tt.profile, Method: req.Method, Path: idInPath.ReplaceAllString(req.URL.Path, "/{id}"),
		Start: tt.t.us(start), Headers: tt.t.us(time.Now())}
	if err != nil {
		rec.End = rec.Headers
		tt.t.addRequest(rec)
		return resp, err
	}
	resp.Body = &traceBody{ReadCloser: resp.Body, t: tt.t, rec: rec}
	return resp, nil
}

func (t *tailTrace) addRequest(r traceRequest) {
	t.mu.Lock()
	t.requests = append(t.requests, r)
	t.mu.Unlock()
}

// traceBody records its request when closed, with the bytes read.
type traceBody struct {
	io.ReadCloser
	t    *tailTrace
	rec  traceRequest
	once sync.Once
}

func (b *traceBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.rec.Bytes += int64(n)
	return n, err
}

func (b *traceBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		b.rec.End = b.t.us(time.Now())
		b.t.addRequest(b.rec)
	})
	return err
}

// sample reads the timeline every 10 ms until ctx ends; childCPU reads the
// simulator child's CPU (false: none).
func (t *tailTrace) sample(ctx context.Context, childCPU func() (float64, bool)) {
	ms := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/sched/goroutines/runnable:goroutines"}}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	wc, _ := t.st.(store.WriteCounter)
	self := os.Getpid()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s := traceSample{At: t.us(time.Now())}
		s.CPU, _ = procCPUSeconds(self)
		s.ChildCPU, _ = childCPU()
		metrics.Read(ms)
		if ms[0].Value.Kind() == metrics.KindUint64 {
			s.GCCycles = ms[0].Value.Uint64()
		}
		if ms[1].Value.Kind() == metrics.KindUint64 {
			s.Runnable = ms[1].Value.Uint64()
		}
		if wc != nil {
			c := wc.WriteCounts()
			s.Txs, s.Writes = c.Transactions, c.Writes
		}
		if ps := readProcSched(self); ps.ok {
			s.RunQueueMs = ps.waitNs / 1e6
		}
		if h := readHost(); h.pressureOK {
			s.HostCPUSomeMs = h.cpuSomeMicrosec / 1000
		}
		t.mu.Lock()
		t.samples = append(t.samples, s)
		t.mu.Unlock()
	}
}

// write writes the trace to its file.
func (t *tailTrace) write() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	// t0_unix_ns joins the trace's µs to wall-clock records of the same
	// run (a cpulabels build's COMMIT anatomy in $RATELANE_WRITESTATS).
	b, err := json.Marshal(map[string]any{"spans": t.spans, "requests": t.requests, "events": t.events,
		"reviews": t.reviews, "samples": t.samples, "t0_unix_ns": t.t0.UnixNano()})
	if err != nil {
		return err
	}
	return os.WriteFile(t.path, b, 0o644)
}

// markInSweep marks the reviews submitted before end (the sweep's).
func (t *tailTrace) markInSweep(end time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.us(end)
	for i := range t.reviews {
		t.reviews[i].InSweep = t.reviews[i].Phase == "sweep" && t.reviews[i].Start < e
	}
}

// tailParts are the parts of an interactive review's latency, in order:
// the submit (Submit's reads and CPU before the part's creation), the
// part's stages, the parent's wake after the part's finish, the parent's
// stages, and the bench's notice of the publication.
var tailParts = []string{"submit", engine.StageQueued, engine.StageStart, engine.StageRun, engine.StageFinish, "wake",
	engine.StageAggregateWait, engine.StageAggregate, engine.StagePublishWait, engine.StagePublish, "notice"}

// partsOf splits each review's latency into tailParts (ms), from the spans
// of its part (Parent == the review) and of the review itself; a review
// with a stage missing is left out. The publication's two stages are
// optional: a review whose aggregation publishes it in place (the
// built-in review kind does) has none, and counts them as 0 at the
// aggregation's end. Until session 43 they were required, so every
// review was left out and every tail_* part read 0.
func (t *tailTrace) partsOf(rs []traceReview) [][]float64 {
	type key struct{ id, stage string }
	at := map[key]traceSpan{}
	for _, s := range t.spans {
		if s.Lane != "interactive" {
			continue
		}
		id := s.ID
		if s.Parent != "" {
			id = s.Parent
		}
		at[key{id, s.Stage}] = s
	}
	var out [][]float64
	for _, r := range rs {
		get := func(st string) (traceSpan, bool) { s, ok := at[key{r.ID, st}]; return s, ok }
		var ss [len(engine.StageNames)]traceSpan
		ok := true
		for i, st := range engine.StageNames {
			var found bool
			if ss[i], found = get(st); found {
				continue
			}
			if st != engine.StagePublishWait && st != engine.StagePublish {
				ok = false
				break
			}
			// Published in place: no time at the stage before's end.
			ss[i].Start, ss[i].End = ss[i-1].End, ss[i-1].End
		}
		if !ok {
			continue
		}
		ms := func(a, b int64) float64 { return float64(b-a) / 1000 }
		p := []float64{ms(r.Start, ss[0].Start)}
		for i := 0; i < 4; i++ {
			p = append(p, ms(ss[i].Start, ss[i].End))
		}
		p = append(p, ms(ss[3].End, ss[4].Start))
		for i := 4; i < 8; i++ {
			p = append(p, ms(ss[i].Start, ss[i].End))
		}
		p = append(p, ms(ss[7].End, r.End))
		out = append(out, p)
	}
	return out
}

// overlapNames are what tailSummary counts in a review's window: the
// manifests' intake (share of the window), the batch simulator's
// requests in flight (upload, create, poll, download), the batch lane's
// handler runs (a submission, a collection) and aggregations, the
// process's and the simulator child's CPU (cores), garbage collections
// and the store's commits (per second).
var overlapNames = []string{"manifest_share", "upload", "create", "poll", "download", "batch_runs", "batch_run_share",
	"batch_aggregations", "cpu_cores", "child_cpu_cores", "gc_cycles", "commits_per_s"}

// overlap is what overlapped [s, e) (µs), in overlapNames' order.
func (t *tailTrace) overlap(s, e int64) []float64 {
	out := make([]float64, len(overlapNames))
	win := float64(max(1, e-s))
	over := func(a, b int64) int64 { return max(0, min(b, e)-max(a, s)) }
	for _, ev := range t.events {
		if ev.What == "manifest" {
			out[0] += float64(over(ev.Start, ev.End)) / win
		}
	}
	for _, r := range t.requests {
		if r.Profile != "batch" || over(r.Start, max(r.End, r.Start+1)) == 0 {
			continue
		}
		switch {
		case r.Method == "POST" && r.Path == "/v1/files":
			out[1]++
		case r.Method == "POST" && r.Path == "/v1/batches":
			out[2]++
		case r.Method == "GET" && r.Path == "/v1/batches/{id}":
			out[3]++
		case r.Method == "GET" && r.Path == "/v1/files/{id}/content":
			out[4]++
		}
	}
	for _, sp := range t.spans {
		if sp.Lane != "batch" {
			continue
		}
		o := over(sp.Start, max(sp.End, sp.Start+1))
		if o == 0 {
			continue
		}
		switch {
		case sp.Stage == engine.StageRun:
			out[5]++
			out[6] += float64(o) / win
		case sp.Stage == engine.StageAggregate:
			out[7]++
		}
	}
	// The samples bracketing the window: the last at or before s, the
	// first at or after e.
	i := max(0, sort.Search(len(t.samples), func(i int) bool { return t.samples[i].At > s })-1)
	j := min(len(t.samples)-1, sort.Search(len(t.samples), func(i int) bool { return t.samples[i].At >= e }))
	if j > i {
		a, b := t.samples[i], t.samples[j]
		secs := float64(b.At-a.At) / 1e6
		out[8] = (b.CPU - a.CPU) / secs
		out[9] = (b.ChildCPU - a.ChildCPU) / secs
		out[10] = float64(b.GCCycles - a.GCCycles)
		out[11] = float64(b.Txs-a.Txs) / secs
	}
	return out
}

// summarize adds the tail_* figures to r: over the slowest 2 % of the
// reviews submitted while the sweep ran (at least 2), each part's mean
// against the in-sweep reviews' median and the baseline's, and what
// overlapped their windows against the in-sweep reviews' mean.
func (t *tailTrace) summarize(r *Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	slices.SortFunc(t.samples, func(a, b traceSample) int { return int(a.At - b.At) })
	var in, base []traceReview
	for _, rv := range t.reviews {
		switch {
		case rv.InSweep:
			in = append(in, rv)
		case rv.Phase == "baseline":
			base = append(base, rv)
		}
	}
	if len(in) == 0 {
		return
	}
	slices.SortFunc(in, func(a, b traceReview) int { return int((b.End - b.Start) - (a.End - a.Start)) })
	worst := in[:min(len(in), max(2, len(in)/50))]
	tp, ip, bp := t.partsOf(worst), t.partsOf(in), t.partsOf(base)
	r.add("tail_reviews", float64(len(worst)), "the slowest 2 % of the reviews submitted while the sweep ran (--trace-tail)")
	r.add("tail_latency_ms", float64(worst[len(worst)-1].End-worst[len(worst)-1].Start)/1000, "ms, the least latency among them")
	r.add("tail_parts_reviews", float64(len(tp)), "of them, how many have every stage's span (the tail_* parts are theirs; 0: the parts below are not measured)")
	col := func(rows [][]float64, k int) []float64 {
		var v []float64
		for _, row := range rows {
			v = append(v, row[k])
		}
		return v
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(max(1, len(v)))
	}
	for k, name := range tailParts {
		r.add("tail_"+name+"_ms", mean(col(tp, k)), "ms, mean over the slowest in-sweep reviews")
		r.add("tail_"+name+"_typical_ms", Median(col(ip, k)), "ms, median over every in-sweep review")
		r.add("tail_"+name+"_baseline_ms", mean(col(bp, k)), "ms, mean over the baseline's reviews")
	}
	var wo, all [][]float64
	for _, rv := range worst {
		wo = append(wo, t.overlap(rv.Start, rv.End))
	}
	for _, rv := range in {
		all = append(all, t.overlap(rv.Start, rv.End))
	}
	for k, name := range overlapNames {
		r.add("tail_overlap_"+name, mean(col(wo, k)), "mean over the slowest in-sweep reviews' windows")
		r.add("tail_overlap_"+name+"_typical", mean(col(all, k)), "mean over every in-sweep review's window")
	}
	t.splitByRuns(r, in)
	queued := t.queuedSpans()
	queuedCauses(r, queued, base, "baseline")
	queuedCauses(r, queued, in, "sweep")
}

// queuedSpans maps each interactive review's id to its part's queued
// stage span (one map for both phases' queuedCauses).
func (t *tailTrace) queuedSpans() map[string]traceSpan {
	queued := map[string]traceSpan{}
	for _, s := range t.spans {
		if s.Lane == "interactive" && s.Stage == engine.StageQueued && s.Parent != "" {
			queued[s.Parent] = s
		}
	}
	return queued
}

// queuedSlow is the queued stage past which queuedCauses attributes a
// review: twice an idle review's whole latency, and past every stage's
// typical time.
const queuedSlow = 10 * time.Millisecond

// queuedCauseNames are queuedCauses' causes: the lease that ended a slow
// queued stage (engine.StageSpan.Via) and, for the insert's own lease,
// whether its write or the time before it took longer.
var queuedCauseNames = []string{"insert_write", "insert_before_write", "wake", "poll", "finish", "other"}

// queuedCause names what ended queued stage q: the insert's write
// (insert_write: most of the stage from the insert's call of its write,
// which leased the job, to its answer: the writer's queue and the
// commit), the insert before its write (Submit's CPU), a wake-up of the
// fetch loop (the insert did not lease it), the poll timer (no wake-up
// leased it), a finish's write, or anything else.
func queuedCause(q traceSpan) string {
	switch {
	case q.Via == "insert" && q.Asked != 0 && q.End-q.Asked >= q.Asked-q.Start:
		return "insert_write"
	case q.Via == "insert":
		return "insert_before_write"
	case strings.HasPrefix(q.Via, "wake:"):
		return "wake"
	case q.Via == "poll":
		return "poll"
	case strings.HasPrefix(q.Via, "finish:"):
		return "finish"
	}
	return "other"
}

// queuedCauses adds, for the reviews rs of phase, how many had a queued
// stage over queuedSlow (their spans in queued, tailTrace.queuedSpans),
// how many of them each cause ended (queuedCause), and the share of their
// queued time spent in the write of the lease that ended it (its call to
// its answer).
func queuedCauses(r *Result, queued map[string]traceSpan, rs []traceReview, phase string) {
	n := map[string]int{}
	slow := 0
	var inWrite, total int64
	for _, rv := range rs {
		q, ok := queued[rv.ID]
		if !ok || time.Duration(q.End-q.Start)*time.Microsecond <= queuedSlow {
			continue
		}
		slow++
		n[queuedCause(q)]++
		total += q.End - q.Start
		if q.Asked != 0 {
			inWrite += q.End - max(q.Asked, q.Start)
		}
	}
	pre := "tail_queued_over_10ms_" + phase
	r.add(pre+"_reviews", float64(slow), phase+" reviews whose part's queued stage took over 10 ms (--trace-tail)")
	for _, c := range queuedCauseNames {
		r.add(pre+"_"+c, float64(n[c]), "of them, those whose queued stage ended so (tailtrace.go queuedCause)")
	}
	r.add(pre+"_write_share", float64(inWrite)/float64(max(1, total)), "share of their queued time in the write of the lease that ended it")
}

// splitByRuns adds, for each batch driver kind (a submission, a
// collection), the in-sweep reviews whose window overlapped one of its
// runs and the others: how many, and their p50, p95 and p99.
func (t *tailTrace) splitByRuns(r *Result, in []traceReview) {
	for _, k := range []struct{ kind, name string }{{"review.batch.submit", "submit"}, {"review.batch.collect", "collect"}} {
		var runs []traceSpan
		for _, sp := range t.spans {
			if sp.Lane == "batch" && sp.Stage == engine.StageRun && sp.Kind == k.kind {
				runs = append(runs, sp)
			}
		}
		var with, without []time.Duration
		for _, rv := range in {
			lat := time.Duration(rv.End-rv.Start) * time.Microsecond
			if slices.ContainsFunc(runs, func(sp traceSpan) bool { return sp.Start < rv.End && sp.End > rv.Start }) {
				with = append(with, lat)
			} else {
				without = append(without, lat)
			}
		}
		for _, g := range []struct {
			name string
			xs   []time.Duration
		}{{"during_" + k.name, with}, {"outside_" + k.name, without}} {
			r.add("tail_"+g.name+"_reviews", float64(len(g.xs)), "in-sweep reviews whose window overlapped a "+k.name+" run (or did not)")
			for _, q := range []float64{0.50, 0.95, 0.99} {
				r.add(fmt.Sprintf("tail_%s_p%.0f_ms", g.name, 100*q), Percentile(g.xs, q), "ms, those reviews")
			}
		}
	}
}
