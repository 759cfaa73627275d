package engine_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// watchedStore is a real store that keeps the func the engine gives
// WatchInteractive (and passes it on), so that a test can ask it.
type watchedStore struct {
	store.Store
	mu   sync.Mutex
	busy func() bool
}

func (s *watchedStore) WatchInteractive(busy func() bool) {
	s.mu.Lock()
	s.busy = busy
	s.mu.Unlock()
	s.Store.(store.InteractiveWatcher).WatchInteractive(busy)
}

func (s *watchedStore) ask() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy != nil && s.busy()
}

// TestEngineTellsStoreInteractiveInFlight checks that the engine tells a
// single-writer store when its interactive work is in flight, and for a
// short grace after: the finish is written after the handler has left
// the count, and a hold that ended with the count put the batch lane's
// commit where the finish arrived.
func TestEngineTellsStoreInteractiveInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &watchedStore{Store: newStore(t)}
		release := make(chan struct{})
		running := make(chan struct{})
		h := engine.HandlerFunc(func(ctx context.Context, j *job.Job) job.Outcome {
			close(running)
			<-release
			return job.Outcome{Class: job.ClassSuccess}
		})
		e := start(t, engine.Config{Store: s, Kinds: map[string]engine.Kind{"noop": {Handler: h}}})
		synctest.Wait()
		if s.ask() {
			t.Fatal("interactive work reported in flight before any job")
		}
		j := storetest.NewJob("acme", job.LaneInteractive, "k")
		j.CreatedAt, j.EligibleAt = time.Now(), time.Now()
		if _, err := e.Jobs().Insert(context.Background(), []*job.Job{j}, admission.Config{}); err != nil {
			t.Fatal(err)
		}
		e.Notify()
		<-running
		if !s.ask() {
			t.Fatal("interactive work not reported in flight while its handler runs")
		}
		close(release)
		synctest.Wait() // the handler returned, its finish is written: no time passed
		if !s.ask() {
			t.Error("interactive work not reported in flight right after its handler returned: the finish's write is not covered")
		}
		time.Sleep(time.Second)
		if s.ask() {
			t.Error("interactive work still reported in flight a second after it ended")
		}
	})
}
