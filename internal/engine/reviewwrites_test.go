package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
	"github.com/ratelane/ratelane/internal/testkit"
)

// nowherePublisher is a Publisher that delivers nothing for any job (as a
// review published nowhere: engine.Deliverer), and counts the calls that
// would have delivered.
type nowherePublisher struct{ countingPublisher }

func (*nowherePublisher) Delivers(*job.Job) bool { return false }

// publishedLog is an engine.Observer that is also a
// engine.PublishedObserver: it keeps the ids of the publications told.
type publishedLog struct {
	mu  sync.Mutex
	ids []string
}

func (*publishedLog) Finished(*job.Job, job.Outcome, store.Transition) {}
func (*publishedLog) Leased(int)                                       {}

func (l *publishedLog) Published(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids = append(l.ids, id)
}

func (l *publishedLog) told() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ids)
}

// interactiveParent returns an accepted interactive-lane "report" parent
// and n waiting interactive "fetch" parts, as an interactive review and
// its parts are inserted.
func interactiveParent(n int) (*job.Job, []*job.Job) {
	now := time.Now()
	parent := &job.Job{Kind: "report", Region: "us", Tenant: "acme", Lane: job.LaneInteractive, LimitKeys: []string{"parts:report"}}
	parent.Prepare(uuid.Must(uuid.NewV7()).String(), now, 0, true)
	var parts []*job.Job
	for i := range n {
		payload, _ := json.Marshal(fetchArgs{N: i + 1})
		p := &job.Job{Kind: "fetch", Region: "us", Tenant: "acme", Lane: job.LaneInteractive, LimitKeys: []string{"fetch"},
			Payload: payload, ParentID: parent.ID}
		p.Prepare(uuid.Must(uuid.NewV7()).String(), now, 0, false)
		parts = append(parts, p)
	}
	return parent, parts
}

// reviewWrites runs one interactive parent with one part through an idle
// engine whose "report" kind publishes through pub (nil: no Publisher)
// and returns the store writes (writer visits) from its insert to its
// publication, everything the engine wrote for it included.
func reviewWrites(t *testing.T, pub engine.Publisher) int64 {
	t.Helper()
	var n int64
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t)
		var calls atomic.Int64
		obs := &publishedLog{}
		e := start(t, engine.Config{Store: s, PollInterval: time.Hour, Observer: obs, Kinds: map[string]engine.Kind{
			"fetch":  fetchKind,
			"report": {Aggregate: sumParts(&calls), PartKinds: []string{"fetch"}, Publisher: pub, SweepEvery: time.Hour},
		}})
		synctest.Wait() // past the start sweep and the first, empty, lease
		wc := s.(store.WriteCounter)
		before := wc.WriteCounts()
		parent, parts := interactiveParent(1)
		if _, err := e.Jobs().InsertParts(context.Background(), parent, parts, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		e.Notify()
		waitState(t, s, parent.ID, job.StatePublished)
		synctest.Wait() // every write it caused has returned
		after := wc.WriteCounts()
		if got := obs.told(); len(got) != 1 || got[0] != parent.ID {
			t.Fatalf("publications told to the PublishedObserver: %v, want the parent's once", got)
		}
		n = after.Writes - before.Writes
		t.Logf("one interactive parent and its part: %d writes in %d transactions", n, after.Transactions-before.Transactions)
	})
	return n
}

// TestInteractiveReviewWrites counts the writer visits of one interactive
// parent with one part, from insert to publication: the insert, whose
// write also leases the part (insertlease.go), and the part's finish,
// whose write also carries the parent's aggregation (its part is its last
// open one: fused.go), and that also records the publication when the
// parent has nothing to deliver (no Publisher, or a Deliverer that says
// so). Before session 29 that publication was a fifth write, from the
// publication pool; before session 30 the aggregation was a fourth;
// before session 31 the part's lease was a write of its own, after the
// insert's Notify. A parent whose Publisher delivers still takes the
// publication (and its claim).
func TestInteractiveReviewWrites(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		pub  engine.Publisher
		want int64
	}{
		{"no publisher", nil, 2},
		{"delivers nothing", &nowherePublisher{}, 2},
		{"delivers", &countingPublisher{}, 4}, // + the claim and the publication
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := reviewWrites(t, c.pub); got != c.want {
				t.Fatalf("%d store writes for one interactive parent and its part, want %d", got, c.want)
			}
		})
	}
}

// reopenable returns an opener of one SQLite file in t's temporary
// directory: a process's store, and its restarted process's.
func reopenable(t *testing.T) func() store.Store {
	path := filepath.Join(t.TempDir(), "us.db")
	return func() store.Store {
		s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Region: "us"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// nowhereReportKinds are the "fetch" parts and their "report" parent,
// aggregated by sumParts (counting in calls) and published nowhere.
func nowhereReportKinds(calls *atomic.Int64) map[string]engine.Kind {
	return map[string]engine.Kind{
		"fetch":  fetchKind,
		"report": {Aggregate: sumParts(calls), PartKinds: []string{"fetch"}, Publisher: &nowherePublisher{}, SweepEvery: time.Hour},
	}
}

// afterStartSweep waits for restarted engine e's start sweep and checks
// that parent id, on s, was aggregated once in all.
func afterStartSweep(t *testing.T, e *engine.Engine, s store.Store, id string) {
	t.Helper()
	testkit.Eventually(t, time.Minute, "the start sweep", func() error {
		if e.Sweeps() < 1 {
			return errors.New("not yet")
		}
		return nil
	})
	if recs := aggregations(t, s, id); len(recs) != 1 {
		t.Fatalf("%d aggregation records, want 1", len(recs))
	}
}

// dyingAdvance is a store on which the process dies at its parent's
// advance: before the write reaches the store (afterCommit false), or
// after it committed and before the engine heard back (true). Either way
// the engine learns only that the write failed, as a process that died
// there would never learn more.
type dyingAdvance struct {
	store.Store
	afterCommit bool
	died        chan struct{}
	once        sync.Once
}

var errDied = errors.New("the process died here")

// Finish writes the parts' transitions without their parent's fused
// advance (store.Transition.Parent; TestFusedFinishCrash dies there): the
// process is to die at the parent's own Advance. When one part finished
// after the other, the last one's finish carried the advance, Advance was
// never called, and the test waited out its minute (once under make
// test's -race load). The caller's transitions are left as they were:
// their ParentAdvance's Job stays nil, which says nothing of the parent
// was written.
func (d *dyingAdvance) Finish(ctx context.Context, ts []store.Transition) ([]error, error) {
	bare := slices.Clone(ts)
	for i := range bare {
		bare[i].Parent = nil
	}
	return d.Store.Finish(ctx, bare)
}

func (d *dyingAdvance) Advance(ctx context.Context, p store.AdvanceParams) (*job.Job, error) {
	defer d.once.Do(func() { close(d.died) })
	if d.afterCommit {
		if _, err := d.Store.Advance(ctx, p); err != nil {
			return nil, err
		}
	}
	return nil, errDied
}

// dieMidway runs a first process's engine on dying, a store wrapping
// the process's own that dies at one write and then closes died, with an
// interactive parent of n parts inserted, until the store dies (what
// names the write in the failure); it stops the engine and returns the
// parent and its parts.
func dieMidway(t *testing.T, dying store.Store, died <-chan struct{}, n int, leaseFor time.Duration, what string) (*job.Job, []*job.Job) {
	t.Helper()
	ctx := context.Background()
	var calls atomic.Int64
	e, err := engine.New(engine.Config{Store: dying, Region: "us", Kinds: nowhereReportKinds(&calls), PollInterval: 5 * time.Millisecond,
		LeaseFor: leaseFor})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	parent, parts := interactiveParent(n)
	if _, err := e.Jobs().InsertParts(ctx, parent, parts, admission.Config{}); err != nil {
		t.Fatal(err)
	}
	e.Notify()
	select {
	case <-died:
	case <-time.After(time.Minute):
		t.Fatal(what)
	}
	stop, cancel := context.WithTimeout(ctx, 5*time.Second)
	e.Stop(stop)
	cancel()
	return parent, parts
}

// TestFoldedPublicationCrash: a process dies at an interactive parent's
// aggregation, whose one write advances it and records its publication
// (it has nothing to deliver). Died before the write: the parent is still
// accepted, and the engine of the restarted process (the store reopened
// from its file) aggregates and publishes it once. Died after the write
// committed: the parent is already published, with no moment at which it
// was left validated, and the restarted engine neither aggregates nor
// publishes it again. Nothing lost, nothing twice.
func TestFoldedPublicationCrash(t *testing.T) {
	t.Parallel()
	eachCrashSide(t, func(t *testing.T, afterCommit bool) {
		ctx := context.Background()
		open := reopenable(t)
		// The first process: its part runs; it dies at the advance.
		s1 := open()
		dying := &dyingAdvance{Store: s1, afterCommit: afterCommit, died: make(chan struct{})}
		parent, _ := dieMidway(t, dying, dying.died, 2, 0, "the parent was never advanced")
		j, err := s1.Get(ctx, parent.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]job.State{false: job.StateAccepted, true: job.StatePublished}[afterCommit]
		if j.State != want {
			t.Fatalf("after the death the parent is %s, want %s", j.State, want)
		}
		s1.Close()
		restartPublishes(t, open, parent.ID, 0, afterCommit)
	})
}

// eachCrashSide runs f in two parallel subtests: the process dies just
// before a write reaches the store (afterCommit false), and just after it
// committed, before the engine heard back (true).
func eachCrashSide(t *testing.T, f func(t *testing.T, afterCommit bool)) {
	for _, afterCommit := range []bool{false, true} {
		t.Run(map[bool]string{false: "before the write", true: "after the commit"}[afterCommit], func(t *testing.T) {
			t.Parallel()
			f(t, afterCommit)
		})
	}
}

// restartPublishes is the restarted process after a death at a parent's
// aggregation write: an engine on the reopened store (leaseFor 0: the
// default), whose start sweep walks every parent, publishes the parent,
// with one aggregation record in all and aggregating it again only when
// the write died before its commit. It returns the reopened store.
func restartPublishes(t *testing.T, open func() store.Store, parentID string, leaseFor time.Duration, afterCommit bool) store.Store {
	t.Helper()
	s2 := open()
	t.Cleanup(func() { s2.Close() })
	var calls2 atomic.Int64
	e2 := start(t, engine.Config{Store: s2, Kinds: nowhereReportKinds(&calls2), LeaseFor: leaseFor})
	waitState(t, s2, parentID, job.StatePublished)
	afterStartSweep(t, e2, s2, parentID)
	if wantCalls := map[bool]int64{false: 1, true: 0}[afterCommit]; calls2.Load() != wantCalls {
		t.Fatalf("the restarted engine aggregated the parent %d times, want %d", calls2.Load(), wantCalls)
	}
	return s2
}

// leaseCounter counts a store's Lease calls and those that took nothing,
// and passes MayLease on (store.LeaseProber) when the store has it.
type leaseCounter struct {
	store.Store
	leaseTally
}

func (c *leaseCounter) Lease(ctx context.Context, p store.LeaseParams) ([]*job.Job, error) {
	return c.count(c.Store.Lease(ctx, p))
}

func (c *leaseCounter) FinishLease(ctx context.Context, ts []store.Transition, p store.LeaseParams) ([]error, []*job.Job, error) {
	return c.Store.(store.FinishLeaser).FinishLease(ctx, ts, p)
}

func (c *leaseCounter) MayLease(ctx context.Context, p store.LeaseParams) (bool, error) {
	return c.Store.(store.LeaseProber).MayLease(ctx, p)
}

// TestIdleReviewsLeaseOnce: interactive reviews (a parent and one part)
// arriving one at a time, about 100 ms apart, on an engine polling every 50 ms
// (the default), as batch-isolation's baseline. Each review's part is
// leased by the one lease its insert's Notify wakes; the polls between
// reviews find nothing ready and, on SQLite, ask by a read
// (store.LeaseProber) rather than queue for the writer with an empty
// lease. Before session 29 every poll leased: 2.0 leases per review in
// the bench, one of them empty (here 3: two polls per 100 ms). A part
// still starts as soon as its insert is told (Notify), and a job inserted
// with no Notify (another node's) is still leased by the next poll.
func TestIdleReviewsLeaseOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		base := newStore(t)
		s := &leaseCounter{Store: base}
		var calls atomic.Int64
		started := make(chan time.Time, 1)
		ping := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			started <- time.Now()
			return job.Outcome{Class: job.ClassSuccess}
		})
		e := start(t, engine.Config{Store: s, PollInterval: 50 * time.Millisecond, Kinds: map[string]engine.Kind{
			"ping":   {Handler: ping},
			"fetch":  fetchKind,
			"report": {Aggregate: sumParts(&calls), PartKinds: []string{"fetch"}, SweepEvery: time.Hour},
		}})
		synctest.Wait() // past the start sweep and the first, empty, lease
		wc := base.(store.WriteCounter)
		before := wc.WriteCounts()
		l0, e0 := s.leases.Load(), s.empty.Load()
		const n = 20
		for range n {
			parent, parts := interactiveParent(1)
			inserted := time.Now()
			if _, err := e.Jobs().InsertParts(context.Background(), parent, parts, admission.Config{}); err != nil {
				t.Fatal(err)
			}
			e.Notify()
			waitState(t, base, parent.ID, job.StatePublished)
			if d := time.Since(inserted); d > 5*time.Millisecond {
				t.Fatalf("a review took %v from insert to publication, want at once (no store delay here)", d)
			}
			// 100 ms as batch-isolation's baseline, plus 3.7 ms off the
			// 50-ms poll's grid: the polls count from the last lease, at
			// this insert, so a round 100 ms put the next insert on a poll
			// (a tie in simulated time). Goroutine order then decided
			// whether that poll's read found the part: if it did, the
			// poll leased it and the insert's Notify woke a second
			// lease, empty ("21 leases (1 empty) for 20 reviews",
			// session 40). The engine now waits on at such a stale
			// wake-up (TestStaleWakeLeasesNothing forces the tie), but a
			// Notify sent as the poll's lease is starting still counts
			// as new; off the grid this measures one lease per review,
			// not goroutine order.
			time.Sleep(103700 * time.Microsecond)
		}
		after := wc.WriteCounts()
		leases, empty := s.leases.Load()-l0, s.empty.Load()-e0
		t.Logf("%d reviews: %d writes, %d leases (%d empty)", n, after.Writes-before.Writes, leases, empty)
		if leases != n || empty != 0 {
			t.Errorf("%d leases (%d empty) for %d reviews, want one each, none empty", leases, empty, n)
		}
		if w := after.Writes - before.Writes; w != 3*n {
			t.Errorf("%d store writes for %d reviews, want %d (insert, lease, finish with the aggregation)", w, n, 3*n)
		}

		// Another node's insert, no Notify here: the next poll leases it.
		other, err := engine.NewJobs(engine.JobsConfig{Store: base})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(7 * time.Millisecond) // off the poll's beat
		j := storetest.NewJob("acme", job.LaneInteractive, "k")
		j.Kind = "ping"
		inserted := time.Now()
		j.CreatedAt, j.EligibleAt = inserted, inserted
		if _, err := other.Insert(context.Background(), []*job.Job{j}, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-started:
			if d := at.Sub(inserted); d > 50*time.Millisecond {
				t.Errorf("another node's job started %v after its insert, want within the poll interval (50 ms)", d)
			}
		case <-time.After(time.Second):
			t.Fatal("another node's job never started")
		}
	})
}

// readHook is a leaseCounter whose next MayLease read, once armed, first
// runs the armed func on the fetch loop's goroutine: a test's insert and
// its Notify then land for certain between a poll's read and its lease,
// a tie that goroutine order otherwise decides.
type readHook struct {
	*leaseCounter
	hook atomic.Pointer[func()]
}

func (s *readHook) MayLease(ctx context.Context, p store.LeaseParams) (bool, error) {
	if h := s.hook.Swap(nil); h != nil {
		(*h)()
	}
	return s.leaseCounter.MayLease(ctx, p)
}

// TestStaleWakeLeasesNothing: an insert committed and its Notify sent
// just as a poll reads (the tie of TestIdleReviewsLeaseOnce's flake,
// "21 leases (1 empty) for 20 reviews", forced here): the poll's read
// finds the job and its lease takes it, and the wake-up that Notify
// brings finds the loop past everything it announced. It leased again
// and took nothing, a write for nothing; it now waits on. A Notify after
// that lease still leases at once.
func TestStaleWakeLeasesNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		base := newStore(t) // SQLite: a poll reads first (store.LeaseProber)
		s := &readHook{leaseCounter: &leaseCounter{Store: base}}
		started := make(chan time.Time, 2)
		ping := engine.HandlerFunc(func(context.Context, *job.Job) job.Outcome {
			started <- time.Now()
			return job.Outcome{Class: job.ClassSuccess}
		})
		e := start(t, engine.Config{Store: s, PollInterval: 50 * time.Millisecond, Kinds: map[string]engine.Kind{"ping": {Handler: ping}}})
		synctest.Wait() // past the start sweep and the first, empty, lease
		l0, e0 := s.leases.Load(), s.empty.Load()
		insert := func(key string) time.Time {
			j := storetest.NewJob("acme", job.LaneInteractive, key)
			j.Kind = "ping"
			now := time.Now()
			j.CreatedAt, j.EligibleAt = now, now
			if _, err := e.Jobs().Insert(context.Background(), []*job.Job{j}, admission.Config{}); err != nil {
				t.Error(err)
			}
			e.Notify()
			return now
		}
		var tied time.Time
		hook := func() { tied = insert("tie") }
		s.hook.Store(&hook)
		<-started // leased by the poll, 50 ms in
		synctest.Wait()
		if tied.IsZero() {
			t.Fatal("no poll read")
		}
		if leases, empty := s.leases.Load()-l0, s.empty.Load()-e0; leases != 1 || empty != 0 {
			t.Errorf("%d leases (%d empty) for one job inserted and told at a poll's read, want one, none empty", leases, empty)
		}

		time.Sleep(13 * time.Millisecond) // between polls
		inserted := insert("later")
		if at := <-started; at.Sub(inserted) != 0 {
			t.Errorf("a job told by Notify after the poll's lease started %v after its insert, want at once", at.Sub(inserted))
		}
		synctest.Wait()
		if leases, empty := s.leases.Load()-l0, s.empty.Load()-e0; leases != 2 || empty != 0 {
			t.Errorf("%d leases (%d empty) for two jobs, want two, none empty", leases, empty)
		}
	})
}

// dyingFinish is a store on which the process dies at the finish that
// carries a parent's advance (store.Transition.Parent): before the write
// reaches the store (afterCommit false), or after it committed and before
// the engine heard back. From then on every finish fails, as the dead
// process writes nothing more.
type dyingFinish struct {
	store.Store
	afterCommit bool
	died        chan struct{}
	dead        atomic.Bool
}

func (d *dyingFinish) Finish(ctx context.Context, ts []store.Transition) ([]error, error) {
	if d.dead.Load() {
		return nil, errDied
	}
	if !slices.ContainsFunc(ts, func(t store.Transition) bool { return t.Parent != nil }) {
		return d.Store.Finish(ctx, ts)
	}
	d.dead.Store(true)
	defer close(d.died)
	if d.afterCommit {
		if _, err := d.Store.Finish(ctx, ts); err != nil {
			return nil, err
		}
	}
	return nil, errDied
}

// TestFusedFinishCrash: a process dies at the write of an interactive
// parent's last part's finish, which carries the parent's aggregation.
// Died before the write: the part is still running and the parent
// accepted; the restarted process recovers the part's lease, runs it
// again, and its finish aggregates and publishes the parent once. Died
// after the commit: part and parent are both final (the parent
// published, with one aggregation record), and the restarted engine runs
// and aggregates nothing again. Nothing lost, nothing twice.
func TestFusedFinishCrash(t *testing.T) {
	t.Parallel()
	eachCrashSide(t, func(t *testing.T, afterCommit bool) {
		ctx := context.Background()
		open := reopenable(t)
		s1 := open()
		dying := &dyingFinish{Store: s1, afterCommit: afterCommit, died: make(chan struct{})}
		parent, parts := dieMidway(t, dying, dying.died, 1, time.Second, "the part's finish never carried its parent's advance")
		p, err := s1.Get(ctx, parent.ID)
		if err != nil {
			t.Fatal(err)
		}
		part, err := s1.Get(ctx, parts[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		wantParent := map[bool]job.State{false: job.StateAccepted, true: job.StatePublished}[afterCommit]
		wantPart := map[bool]job.State{false: job.StateRunning, true: job.StatePublished}[afterCommit]
		if p.State != wantParent || part.State != wantPart {
			t.Fatalf("after the death the parent is %s and its part %s, want %s and %s", p.State, part.State, wantParent, wantPart)
		}
		s1.Close()

		// The restarted process recovers the part's lease (a second) and runs it again.
		s2 := restartPublishes(t, open, parent.ID, time.Second, afterCommit)
		publishedAfter(t, s2, parts[0].ID, map[bool]int{false: 2, true: 1}[afterCommit])
	})
}

// publishedAfter checks that job id, on s, is published after attempts
// attempts.
func publishedAfter(t *testing.T, s store.Store, id string, attempts int) {
	t.Helper()
	j, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != job.StatePublished || j.Attempt != attempts {
		t.Fatalf("job %s is %s after %d attempts, want published after %d", id, j.State, j.Attempt, attempts)
	}
}

// partsReads is a store whose List records the largest page a caller
// asked of a parent's parts.
type partsReads struct {
	*leaseCounter
	pages, large atomic.Int64
}

func (r *partsReads) List(ctx context.Context, p store.ListParams) ([]*job.Job, error) {
	if p.Parent != "" {
		r.pages.Add(1)
		if p.Limit > engine.FusedMaxParts+1 {
			r.large.Add(1)
		}
	}
	return r.leaseCounter.List(ctx, p)
}

// TestFusedReadIsBounded: every part of an interactive parent that may
// end reads its siblings to learn whether it is the last open one, so an
// unbounded read made a parent of n parts read n² rows. The read asks for
// one row more than the fused path takes, and a parent with more parts
// than that is aggregated after its last finish, as before session 30:
// once, over every part.
func TestFusedReadIsBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := &partsReads{leaseCounter: &leaseCounter{Store: newStore(t)}}
		var calls atomic.Int64
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{
			"fetch":  fetchKind,
			"report": {Aggregate: sumParts(&calls), PartKinds: []string{"fetch"}},
		}})
		n := engine.FusedMaxParts + 1
		parent, parts := interactiveParent(n)
		if _, err := e.Jobs().InsertParts(context.Background(), parent, parts, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		e.Notify()
		got := waitState(t, s, parent.ID, job.StatePublished)
		var r report
		if err := json.Unmarshal(got.Result, &r); err != nil || r.Parts != n || r.Sum != n*(n+1)/2 {
			t.Fatalf("parent result %s (%v), want %d parts summing to %d", got.Result, err, n, n*(n+1)/2)
		}
		t.Logf("%d reads of the parent's parts, %d of them larger than %d rows; %d aggregations", s.pages.Load(), s.large.Load(), engine.FusedMaxParts+1, calls.Load())
		// The wake-ups of the usual aggregation read every part too, but
		// once per wake-up, and the finishes' wake-ups of one parent
		// coalesce; unbounded, each of the n finishes read them all.
		if s.large.Load() >= int64(n) {
			t.Fatalf("%d reads of more than %d of the parent's parts for %d parts: each part's finish read them all", s.large.Load(), engine.FusedMaxParts+1, n)
		}
	})
}
