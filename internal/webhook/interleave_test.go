package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/store"
)

// steppedStore pauses a node before each of its store calls that a Put's
// outcome depends on (the subscriber's read and guarded write, the key's
// declaration, write and read) until the test lets that one call run: the
// test, not the scheduler, decides how two nodes' Puts interleave.
type steppedStore struct {
	store.Store
	at   chan struct{} // the node is paused before a call
	next chan struct{} // the call may run
}

func newSteppedStore(st store.Store) *steppedStore {
	return &steppedStore{Store: st, at: make(chan struct{}), next: make(chan struct{})}
}

func (s *steppedStore) pause() { s.at <- struct{}{}; <-s.next }

func (s *steppedStore) GetObject(ctx context.Context, kind, id string) (store.Object, error) {
	if kind == ObjectSubscriber {
		s.pause()
	}
	return s.Store.GetObject(ctx, kind, id)
}

func (s *steppedStore) PutObjectIf(ctx context.Context, o store.Object, prev []byte) error {
	if o.Kind == ObjectSubscriber {
		s.pause()
	}
	return s.Store.PutObjectIf(ctx, o, prev)
}

func (s *steppedStore) DeclareLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, bool, error) {
	s.pause()
	return s.Store.DeclareLimit(ctx, c, now)
}

func (s *steppedStore) UpsertLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, error) {
	s.pause()
	return s.Store.UpsertLimit(ctx, c, now)
}

func (s *steppedStore) GetLimit(ctx context.Context, name string) (admission.State, error) {
	s.pause()
	return s.Store.GetLimit(ctx, name)
}

// putResult is what one Put of subscriber "s"-like specs answered:
// the rate.limit it asked for and its error. checkPuts reads only these.
type putResult struct {
	limit int // the spec's rate.limit
	err   error
}

// stepped is one node's Put run call by call.
type stepped struct {
	putResult // err is set once ended
	st        *steppedStore
	done      chan error
	paused    bool // at a call, not yet let run
	ended     bool
}

func startPut(ctx context.Context, t *testing.T, st store.Store, now func() time.Time, spec SubscriberSpec) *stepped {
	s := &stepped{putResult: putResult{limit: spec.Rate.Limit}, st: newSteppedStore(st), done: make(chan error, 1)}
	r := node(t, s.st, now)
	go func() {
		_, _, _, err := r.Put(ctx, spec)
		s.done <- err
	}()
	return s
}

// wait returns once the node is paused at a call or its Put has returned.
func (s *stepped) wait() {
	if s.paused || s.ended {
		return
	}
	select {
	case <-s.st.at:
		s.paused = true
	case s.err = <-s.done:
		s.ended = true
	}
}

// step lets n calls run, one at a time, each complete before the next
// (or fewer, when the Put returns first); n < 0 runs the Put to its end.
func (s *stepped) step(n int) {
	for i := 0; n < 0 || i < n; i++ {
		s.wait()
		if s.ended {
			return
		}
		s.paused = false
		s.st.next <- struct{}{}
		s.wait()
	}
}

// Three nodes' Puts of one subscriber, each of one of three rates,
// interleaved call by call in schedules drawn from a seeded generator
// (the same schedules every run): whatever succeeds or conflicts, the key
// ends as the stored subscriber's LimitConfig, and so does its
// declaration (a stale one would undo an operator's PUT /v1/limits at the
// next start, SettleKeys). It fails when settleKey leaves the
// declaration unchecked. It does not make the schedule that
// TestConcurrentPutsSettleTheKey once hit by the scheduler's luck (a
// settle out of rounds needs six later saves of other rates:
// TestSettleOutlastsNewerSaves), and passes on the settle before c48463c.
func TestInterleavedPutsSettleTheKey(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, st, c := newRegistryOn(t, driver)
		rng := rand.New(rand.NewPCG(15, 42))
		rates := []int{5, 10, 20}
		const schedules = 400
		steps, failed := 0, 0
		for n := range schedules {
			id := fmt.Sprintf("s%d", n)
			spec := func(rate int) SubscriberSpec {
				s := perSecond(rate)
				s.ID = id
				return s
			}
			if n%2 == 0 { // half the schedules update, half create
				if _, _, _, err := node(t, st, c.Now).Put(ctx, spec(rates[rng.IntN(3)])); err != nil {
					t.Fatal(err)
				}
			}
			var puts []*stepped
			var order []int
			for range 3 {
				puts = append(puts, startPut(ctx, t, st, c.Now, spec(rates[rng.IntN(3)])))
			}
			for {
				var open []*stepped
				for _, p := range puts {
					if p.wait(); !p.ended {
						open = append(open, p)
					}
				}
				if len(open) == 0 {
					break
				}
				k := rng.IntN(len(open))
				open[k].step(1)
				order = append(order, k)
				steps++
			}
			results := make([]putResult, len(puts))
			for i, p := range puts {
				results[i] = p.putResult
			}
			if err := checkPuts(ctx, st, c.Now(), id, results); err != nil {
				failed++
				t.Errorf("schedule %d (the open Put stepped, by index: %v): %v", n, order, err)
				if failed == 3 {
					return
				}
			}
		}
		// Each Put makes at least three paused calls (read, save, and the
		// key's): fewer means the stepping no longer sees them.
		if steps < schedules*3*3 {
			t.Fatalf("%d calls stepped in %d schedules of three Puts: the stepping missed the Puts' store calls", steps, schedules)
		}
	})
}

// checkPuts checks where one schedule's Puts of subscriber id ended.
func checkPuts(ctx context.Context, st store.Store, now time.Time, id string, puts []putResult) error {
	ok := 0
	for _, p := range puts {
		switch {
		case p.err == nil:
			ok++
		case !errors.Is(p.err, store.ErrConflict):
			return fmt.Errorf("put: %w", p.err)
		}
	}
	if ok == 0 {
		return errors.New("every Put conflicted: one save always wins")
	}
	o, err := st.GetObject(ctx, ObjectSubscriber, id)
	if err != nil {
		return err
	}
	rec, err := decodeRecord(o.Body)
	if err != nil {
		return err
	}
	// The stored subscriber is the last winning save, whose Put answers
	// nil: a conflict there is its settle giving up, not a lost save.
	// (It cannot catch an earlier winner's give-up, as settleKey's
	// exhausted rounds were; the key's check above does.)
	if !slices.ContainsFunc(puts, func(p putResult) bool { return p.err == nil && p.limit == rec.Rate.Limit }) {
		return fmt.Errorf("the stored subscriber (limit %d) is no successful Put's", rec.Rate.Limit)
	}
	want := rec.LimitConfig(DefaultHeadroom)
	key, err := st.GetLimit(ctx, LimitKey(id))
	if err != nil {
		return err
	}
	if store.LimitFingerprint(key.Config) != store.LimitFingerprint(want) {
		return fmt.Errorf("key rate %v; the stored subscriber (limit %d) wants rate %v", key.Rate, rec.Rate.Limit, want.Rate)
	}
	// A declaration that is the stored subscriber's applies nothing.
	if _, applied, err := st.DeclareLimit(ctx, want, now); err != nil || applied {
		return fmt.Errorf("the key's declaration is not the stored subscriber's (limit %d): applied %v, %v", rec.Rate.Limit, applied, err)
	}
	return nil
}

// keyRacer runs a whole Put of another node (other, with the next of its
// rates) before each key write (DeclareLimit or UpsertLimit) of the node
// on it, while any of those Puts is left: a node slowed at every one of
// its key writes, as a goroutine descheduled under load is.
type keyRacer struct {
	store.Store
	other func(rate int) error
	left  []int
}

func (s *keyRacer) race() error {
	if len(s.left) == 0 {
		return nil
	}
	rate := s.left[0]
	s.left = s.left[1:]
	return s.other(rate)
}

func (s *keyRacer) DeclareLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, bool, error) {
	if err := s.race(); err != nil {
		return admission.State{}, false, err
	}
	return s.Store.DeclareLimit(ctx, c, now)
}

func (s *keyRacer) UpsertLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, error) {
	if err := s.race(); err != nil {
		return admission.State{}, err
	}
	return s.Store.UpsertLimit(ctx, c, now)
}

// A Put whose settle sees a newer save in every round, more rounds than
// updateTries, still ends with the key and its declaration the stored
// subscriber's, and answers its own save's success. The schedule: before
// each of this Put's key writes another node's whole Put of a new rate
// (save and settle) lands, updateTries+1 times. settleKey used to give up
// after updateTries rounds with ErrConflict, right after its last write of
// the configuration it had read, which by then was an older save's; every
// other Put had settled before that write, so the key stayed stale (and
// TestConcurrentPutsSettleTheKey, which takes ErrConflict as a lost save,
// failed when its scheduler made this schedule: 5 of 580 runs under load).
// Three Puts of three rates (TestInterleavedPutsSettleTheKey) cannot make
// it: a round that writes needs a save after the previous round's read.
func TestSettleOutlastsNewerSaves(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		a, b := twoNodesOn(t, driver)
		rates := make([]int, updateTries+1)
		for i := range rates {
			rates[i] = 100 + i
		}
		var puts []putResult // B's Puts, for checkPuts: each must succeed
		racer := &keyRacer{Store: a.st, left: rates, other: func(rate int) error {
			_, _, _, err := b.Put(ctx, perSecond(rate))
			puts = append(puts, putResult{rate, err})
			return err
		}}
		slow := node(t, racer, a.cfg.Now)
		_, _, _, err := slow.Put(ctx, perSecond(10))
		if err != nil {
			t.Errorf("the slow Put, whose save won: %v", err)
		}
		if err := checkPuts(ctx, a.st, a.cfg.Now(), "s", append(puts, putResult{10, err})); err != nil {
			t.Fatal(err)
		}
		// A settle that read what it wrote at once would pass without the
		// schedule above: each of the other Puts must have landed.
		if len(racer.left) != 0 {
			t.Fatalf("%d of the other node's Puts never ran", len(racer.left))
		}
	})
}

// A Put whose save won answers success when an operator's PUT /v1/limits
// rewrites the key in every round of its settle: the subscriber is saved
// (and a created one's secret is shown, as it is only once), the key and
// its declaration end as the stored subscriber's (the settle's last write),
// and a log line names the subscriber and its key, never its secret. It
// used to answer store.ErrConflict after updateTries rounds on the save:
// a 409 that said "read it and send it again" for a save that stood, which
// lost a created subscriber's secret, since the retry is an update.
func TestSettleUnderOperatorAnswersTheSave(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		_, st, c := newRegistryOn(t, driver)
		operator := make([]int, 4*updateTries) // more rewrites than the settle waits for
		for i := range operator {
			operator[i] = 200 + i
		}
		racer := &keyRacer{Store: st, left: operator, other: func(rate int) error {
			_, err := st.UpsertLimit(ctx, admission.Config{Name: LimitKey("s"), Rate: float64(rate), Burst: 1}, c.Now())
			return err
		}}
		var logs bytes.Buffer
		slow, err := NewRegistry(RegistryConfig{Store: racer, Jobs: newWriter(t, racer, c.Now), Now: c.Now, CacheFor: -1,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		rec, secret, created, err := slow.Put(ctx, perSecond(10))
		if err != nil {
			t.Fatalf("the Put, whose save won: %v", err)
		}
		if !created || secret == "" || rec.Version != 1 {
			t.Fatalf("put answered created %v, secret %t, version %d; want the create's record and secret", created, secret != "", rec.Version)
		}
		if err := checkPuts(ctx, st, c.Now(), "s", []putResult{{10, nil}}); err != nil {
			t.Fatal(err)
		}
		// The settle stopped on its bound, not because the operator stopped.
		if len(racer.left) == 0 {
			t.Fatal("the operator's rewrites ran out before the settle's bound: the test checks nothing")
		}
		out := logs.String()
		if !strings.Contains(out, "subscriber=s ") || !strings.Contains(out, "limit_key="+LimitKey("s")) {
			t.Fatalf("no log line naming the subscriber and its key; logged:\n%s", out)
		}
		if strings.Contains(out, secret) {
			t.Fatal("the log holds the subscriber's secret")
		}
	})
}
