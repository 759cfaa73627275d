package webhook

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/testkit"
)

// hookedStore runs a hook once, at the first key write (UpsertLimit or
// DeclareLimit), subscriber PutObjectIf or event document write through
// it, before the call reaches the store: another node's write landing at
// that point of this node's Put or Publish. A hook's error fails the
// call, as a store error would.
type hookedStore struct {
	store.Store
	mu       sync.Mutex
	onUpsert func() error
	onSave   func() error
	onEvent  func() error
}

// fire takes the hook *h, once.
func (s *hookedStore) fire(h *func() error) error {
	s.mu.Lock()
	f := *h
	*h = nil
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	return f()
}

func (s *hookedStore) UpsertLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, error) {
	if err := s.fire(&s.onUpsert); err != nil {
		return admission.State{}, err
	}
	return s.Store.UpsertLimit(ctx, c, now)
}

func (s *hookedStore) DeclareLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, bool, error) {
	if err := s.fire(&s.onUpsert); err != nil {
		return admission.State{}, false, err
	}
	return s.Store.DeclareLimit(ctx, c, now)
}

func (s *hookedStore) PutObjectIf(ctx context.Context, o store.Object, prev []byte) error {
	if err := s.fireFor(o.Kind); err != nil {
		return err
	}
	return s.Store.PutObjectIf(ctx, o, prev)
}

func (s *hookedStore) PutObject(ctx context.Context, o store.Object) error {
	if err := s.fireFor(o.Kind); err != nil {
		return err
	}
	return s.Store.PutObject(ctx, o)
}

// fireFor takes the hook of a document write of kind, if any.
func (s *hookedStore) fireFor(kind string) error {
	switch kind {
	case ObjectSubscriber:
		return s.fire(&s.onSave)
	case ObjectEvent:
		return s.fire(&s.onEvent)
	}
	return nil
}

// hooked opens a store of driver (newRegistryOn) and a hookedStore over
// it, through which one node of a test runs.
func hooked(t *testing.T, driver string) (store.Store, *hookedStore, *testkit.Clock) {
	t.Helper()
	_, st, c := newRegistryOn(t, driver)
	return st, &hookedStore{Store: st}, c
}

// perSecond is a spec of subscriber "s" at n deliveries per second.
func perSecond(n int) SubscriberSpec {
	return SubscriberSpec{ID: "s", URL: "https://example.com/hook", Topics: []string{"t"}, Rate: &Rate{Limit: n}}
}

// putRace is one case of TestPutKeyMatchesStoredSubscriber: another
// node's write landing inside this node's Put.
type putRace struct {
	name   string
	exists bool // "s" exists (rate 5) before the Put
	// at says where the other node's write lands in this node's
	// Put: "upsert" (any UpsertLimit) or "save" (the subscriber's
	// guarded write).
	at    string
	other func(ctx context.Context, b *Registry) error
	// want is the Put's answer: nil when its save stands (then
	// overwritten by the other node's later save, or not), the
	// conflict when its save lost, the store's error when it failed.
	want error
}

// A Put's limit key and its guarded save of the subscriber agree whatever
// another node writes in between: the key ends as the stored subscriber's
// LimitConfig. Put used to upsert the key before the save, so a save that
// lost (a conflict, a store error) left the losing spec's rate on the key,
// and a key written after another node's Put undid that node's rate. Each
// case names the Put's answer too: a conflict only when its save lost (it
// took any conflict, which would hide a settle that gave up on a won save).
func TestPutKeyMatchesStoredSubscriber(t *testing.T) {
	t.Parallel()
	errDisk := errors.New("disk full")
	putAt20 := func(ctx context.Context, b *Registry) error { // another node's Put, another rate
		_, _, _, err := b.Put(ctx, perSecond(20))
		return err
	}
	for _, tc := range []putRace{
		{"concurrent Put, different rate", true, "upsert", putAt20, nil},
		{"concurrent create, different rate", false, "upsert", putAt20, store.ErrConflict},
		{"save loses to a disable", true, "save", func(ctx context.Context, b *Registry) error {
			_, err := b.Disable(ctx, "s", "maintenance")
			return err
		}, store.ErrConflict},
		{"save loses to a Put", true, "save", putAt20, store.ErrConflict},
		{"create loses to a create", false, "save", putAt20, store.ErrConflict},
		{"save fails", true, "save", func(context.Context, *Registry) error { return errDisk }, errDisk},
	} {
		for _, driver := range drivers() {
			t.Run(tc.name+"/"+driver, func(t *testing.T) {
				t.Parallel()
				tc.run(t, driver)
			})
		}
	}
}

// run runs the case on a store of driver.
func (tc putRace) run(t *testing.T, driver string) {
	ctx := context.Background()
	st, hs, c := hooked(t, driver)
	a, b := node(t, hs, c.Now), node(t, st, c.Now)
	if tc.exists {
		if _, _, _, err := b.Put(ctx, perSecond(5)); err != nil {
			t.Fatal(err)
		}
	}
	hook := func() error { return tc.other(ctx, b) }
	if tc.at == "upsert" {
		hs.onUpsert = hook
	} else {
		hs.onSave = hook
	}
	_, _, _, putErr := a.Put(ctx, perSecond(10))
	if tc.want == nil && putErr != nil || tc.want != nil && !errors.Is(putErr, tc.want) {
		t.Fatalf("put: %v, want %v", putErr, tc.want)
	}
	if hs.onUpsert != nil || hs.onSave != nil {
		t.Fatal("the other node's write never ran")
	}
	rec, err := b.Get(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	key, err := st.GetLimit(ctx, LimitKey("s"))
	if err != nil {
		t.Fatal(err)
	}
	wantKey := rec.LimitConfig(DefaultHeadroom)
	if store.LimitFingerprint(key.Config) != store.LimitFingerprint(wantKey) {
		t.Fatalf("put err %v: key rate %v burst %v windows %+v; stored subscriber (rate %+v) wants rate %v burst %v windows %+v",
			putErr, key.Rate, key.Burst, key.Windows, *rec.Rate, wantKey.Rate, wantKey.Burst, wantKey.Windows)
	}
}

// Two nodes' Puts of one subscriber at once, each with its own rate, in
// whatever order the scheduler makes: whichever succeed or conflict, the
// key ends as the stored subscriber's.
func TestConcurrentPutsSettleTheKey(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		a, b := twoNodesOn(t, driver)
		ctx := context.Background()
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			won = map[int]bool{} // rate.limit of each Put that answered nil
		)
		for i := range 16 {
			r := a
			if i%2 == 1 {
				r = b
			}
			wg.Go(func() {
				for k := range 4 {
					_, _, _, err := r.Put(ctx, perSecond(1+i*4+k))
					if err != nil && !errors.Is(err, store.ErrConflict) {
						t.Errorf("put: %v", err)
					}
					if err == nil {
						mu.Lock()
						won[1+i*4+k] = true
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		rec, err := a.Get(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		// The last winning save's Put answers nil: a conflict from it is its
		// settle giving up, which this test used to take for a lost save.
		if !won[rec.Rate.Limit] {
			t.Fatalf("the stored subscriber (limit %d) is no successful Put's", rec.Rate.Limit)
		}
		key, err := a.st.GetLimit(ctx, LimitKey("s"))
		if err != nil {
			t.Fatal(err)
		}
		if want := rec.LimitConfig(DefaultHeadroom); store.LimitFingerprint(key.Config) != store.LimitFingerprint(want) {
			t.Fatalf("key rate %v windows %+v; the stored subscriber (version %d, limit %d) wants rate %v windows %+v",
				key.Rate, key.Windows, rec.Version, rec.Rate.Limit, want.Rate, want.Windows)
		}
		// The key's declaration is the stored subscriber's too (see settleKey:
		// a declaration landing between another Put's two key calls is
		// settled): an operator's change of the key now survives a start.
		op := key.Config
		op.Concurrency = 3 // the subscribers here declare none
		if _, err := a.st.UpsertLimit(ctx, op, a.cfg.Now().UTC()); err != nil {
			t.Fatal(err)
		}
		if n, err := a.SettleKeys(ctx); err != nil || n != 0 {
			t.Fatalf("SettleKeys after an operator's change: %d keys changed, %v; want 0 (a stale declaration undoes it)", n, err)
		}
	})
}

// A Put cut off between its save and its key write (here the key write
// fails, as a crash there would leave it) leaves the old key; the next
// start's SettleKeys makes it the stored subscriber's, once. An operator's
// change of the key after a complete Put is not a cut-off write: a start
// keeps it, and a steady start changes nothing; the subscriber's next Put
// rewrites it.
func TestSettleKeysFinishesACutOffPut(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		st, hs, c := hooked(t, driver)
		a := node(t, hs, c.Now)
		keyOf := func() admission.Config {
			t.Helper()
			key, err := st.GetLimit(ctx, LimitKey("s"))
			if err != nil {
				t.Fatal(err)
			}
			return key.Config
		}
		settle := func(want int) {
			t.Helper()
			if n, err := node(t, st, c.Now).SettleKeys(ctx); err != nil || n != want {
				t.Fatalf("SettleKeys: %d keys changed, %v; want %d", n, err, want)
			}
		}
		if _, _, _, err := a.Put(ctx, perSecond(5)); err != nil {
			t.Fatal(err)
		}
		at5 := keyOf()
		errCrash := errors.New("the process died here")
		hs.onUpsert = func() error { return errCrash }
		if _, _, _, err := a.Put(ctx, perSecond(10)); !errors.Is(err, errCrash) {
			t.Fatalf("put cut off before its key: %v", err)
		}
		rec, err := a.Get(ctx, "s")
		if err != nil || rec.Rate.Limit != 10 {
			t.Fatalf("stored subscriber %+v, %v; want the cut-off Put's rate 10", rec.Rate, err)
		}
		if store.LimitFingerprint(keyOf()) != store.LimitFingerprint(at5) {
			t.Fatal("the cut-off Put wrote its key; the test needs the old one left")
		}
		settle(1)
		if want := rec.LimitConfig(DefaultHeadroom); store.LimitFingerprint(keyOf()) != store.LimitFingerprint(want) {
			t.Fatalf("key after the start %+v; the stored subscriber wants %+v", keyOf(), want)
		}
		settle(0)
		operator := admission.Config{Name: LimitKey("s"), Rate: 2, Burst: 1}
		if _, err := st.UpsertLimit(ctx, operator, c.Now()); err != nil {
			t.Fatal(err)
		}
		settle(0)
		if got := keyOf(); got.Rate != 2 || got.Burst != 1 {
			t.Fatalf("key after a start %+v; want the operator's rate 2, burst 1 kept", got)
		}
		// The subscriber's next Put rewrites the key (docs/webhooks.md), even
		// one that changes nothing: its declaration is already the
		// subscriber's, so only settleKey's read of the key sees the
		// operator's change.
		if _, _, _, err := a.Put(ctx, perSecond(10)); err != nil {
			t.Fatal(err)
		}
		if want := rec.LimitConfig(DefaultHeadroom); store.LimitFingerprint(keyOf()) != store.LimitFingerprint(want) {
			t.Fatalf("key after the subscriber's next Put %+v; want the subscriber's %+v, not the operator's", keyOf(), want)
		}
	})
}

// A start's SettleKeys that reads a subscriber, and then declares its key
// after another node's whole Put of a new rate, leaves the key and its
// declaration the stored subscriber's: it reads the subscriber again
// after its write. It used to declare what it had read and stop, so the
// key stayed at the older save's rate (the other Put had settled before)
// until the next start.
func TestSettleKeysRacesAPut(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		st, cut, c := hooked(t, driver)
		b := node(t, st, c.Now)
		if _, _, _, err := b.Put(ctx, perSecond(5)); err != nil {
			t.Fatal(err)
		}
		errCrash := errors.New("the process died here")
		cut.onUpsert = func() error { return errCrash }
		if _, _, _, err := node(t, cut, c.Now).Put(ctx, perSecond(7)); !errors.Is(err, errCrash) {
			t.Fatalf("put cut off before its key: %v", err)
		}
		// The start: it reads the subscriber at rate 7 and its key at 5;
		// before its declaration lands, another node's Put of rate 10
		// saves and settles.
		starting := &hookedStore{Store: st}
		var putErr error
		starting.onUpsert = func() error {
			_, _, _, putErr = b.Put(ctx, perSecond(10))
			return putErr
		}
		if _, err := node(t, starting, c.Now).SettleKeys(ctx); err != nil {
			t.Fatal(err)
		}
		if starting.onUpsert != nil {
			t.Fatal("the other node's Put never ran")
		}
		if err := checkPuts(ctx, st, c.Now(), "s", []putResult{{10, putErr}}); err != nil {
			t.Fatal(err)
		}
	})
}

// A create whose save stood answers its record and generated secret even
// when the settle of its key fails after the save: the secret is shown
// only in that answer, and a retry is an update that never shows it, so
// an error there lost the secret for good. An update still answers the
// error (its retry settles the key). Either way the key stays the stored
// subscriber's, written before the create's save.
func TestCreateAnswersItsSecretWhenTheSettleFails(t *testing.T) {
	t.Parallel()
	errDisk := errors.New("disk full")
	eachDriver(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		st, hs, c := hooked(t, driver)
		a := node(t, hs, c.Now)
		failSettle := func() error { // after the save: the settle's key write fails
			hs.mu.Lock()
			hs.onUpsert = func() error { return errDisk }
			hs.mu.Unlock()
			return nil
		}
		hs.onSave = failSettle
		rec, secret, created, err := a.Put(ctx, perSecond(10))
		if err != nil || !created || secret == "" {
			t.Fatalf("create: created %v, secret shown %v, err %v; want the create and its secret", created, secret != "", err)
		}
		if hs.onUpsert != nil {
			t.Fatal("the settle never wrote the key, so its failure was not tried")
		}
		stored, err := a.Get(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if stored.Version != rec.Version || stored.Secrets.Current != secret {
			t.Fatalf("stored version %d (answered %d); stored secret is the answered one: %v", stored.Version, rec.Version, stored.Secrets.Current == secret)
		}
		key, err := st.GetLimit(ctx, LimitKey("s"))
		if err != nil {
			t.Fatal(err)
		}
		if store.LimitFingerprint(key.Config) != store.LimitFingerprint(stored.LimitConfig(DefaultHeadroom)) {
			t.Fatalf("key rate %v is not the stored subscriber's %v", key.Rate, stored.LimitConfig(DefaultHeadroom).Rate)
		}

		hs.onSave = failSettle
		if _, _, created, err := a.Put(ctx, perSecond(20)); !errors.Is(err, errDisk) || created {
			t.Fatalf("update whose settle failed: created %v, err %v; want %v", created, err, errDisk)
		}
		// Why the update answers its error rather than its saved record:
		// the save stood but the key still paces the old rate, and only a
		// retry (or the next start) settles it. The retry is safe: the
		// same PUT again changes nothing of the subscriber, shows no new
		// secret, and settles the key.
		saved, err := a.Get(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if key, err := st.GetLimit(ctx, LimitKey("s")); err != nil || saved.Rate.Limit != 20 ||
			store.LimitFingerprint(key.Config) != store.LimitFingerprint(stored.LimitConfig(DefaultHeadroom)) {
			t.Fatalf("after the failed settle: saved limit %d, key rate %v (err %v); want the update saved and the create's key", saved.Rate.Limit, key.Config.Rate, err)
		}
		again, secret, created, err := a.Put(ctx, perSecond(20))
		if err != nil || created || secret != "" {
			t.Fatalf("retried update: created %v, new secret %v, err %v; want a plain update", created, secret != "", err)
		}
		if again.URL != saved.URL || again.Secrets.Current != saved.Secrets.Current || again.Rate.Limit != saved.Rate.Limit {
			t.Fatalf("the retry changed the subscriber: %+v, was %+v", again, saved)
		}
		key, err = st.GetLimit(ctx, LimitKey("s"))
		if err != nil || store.LimitFingerprint(key.Config) != store.LimitFingerprint(again.LimitConfig(DefaultHeadroom)) {
			t.Fatalf("the retry left the key at %v (err %v), want the stored subscriber's", key.Config.Rate, err)
		}
	})
}
