package llmbatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelane/ratelane/internal/llmbatch"
	"github.com/ratelane/ratelane/internal/testkit"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start is the fixed instant every test's clock starts at.
var start = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// echo answers each request with a text derived from its prompt, so a
// test can tell which item a body belongs to.
func echo(req upstream.LLMRequest) string {
	last := ""
	if n := len(req.Messages); n > 0 {
		last = req.Messages[n-1].Text
	}
	return `{"answer":"` + last + `"}`
}

// bundle is one test's setup: a simulator on a manual clock and a
// provider client of the official SDK pointed at it.
type bundle struct {
	clock *batchsim.Clock
	sim   *batchsim.Server
	prov  llmbatch.Provider
}

type opts struct {
	sim    batchsim.Config
	limits llmbatch.Limits
}

func setup(t *testing.T, provider string, o opts) *bundle {
	t.Helper()
	clock := batchsim.NewClock(start)
	cfg := o.sim
	cfg.Now, cfg.APIKey = clock.Now, "sk-test"
	if cfg.Responder == nil {
		cfg.Responder = echo
	}
	sim, err := batchsim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc := testkit.ServerClient(t, sim, 30*time.Second)
	pc := llmbatch.Config{APIKey: "sk-test", HTTPClient: hc, Now: clock.Now, Limits: o.limits}
	var prov llmbatch.Provider
	switch provider {
	case batchsim.ProviderOpenAI:
		pc.BaseURL = sim.URL() + "/v1/"
		prov = llmbatch.NewOpenAI(pc)
	case batchsim.ProviderAnthropic:
		pc.BaseURL = sim.URL() + "/"
		prov = llmbatch.NewAnthropic(pc)
	default:
		t.Fatalf("unknown provider %q", provider)
	}
	return &bundle{clock: clock, sim: sim, prov: prov}
}

var providers = []string{batchsim.ProviderOpenAI, batchsim.ProviderAnthropic}

// eachProvider runs fn as a parallel subtest per simulated provider, in a
// parallel test: every driver test holds for both providers' SDKs.
func eachProvider(t *testing.T, fn func(t *testing.T, provider string)) {
	t.Parallel()
	for _, provider := range providers {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			fn(t, provider)
		})
	}
}

// items returns n valid items named prefix-000...
func items(prefix string, n int) []llmbatch.Item {
	out := make([]llmbatch.Item, n)
	for i := range out {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		out[i] = llmbatch.Item{CustomID: id, Request: llmbatch.Request{Model: "m-1", System: "review", Prompt: "p-" + id, MaxTokens: 64}}
	}
	return out
}

func ids(its []llmbatch.Item) []string {
	out := make([]string, len(its))
	for i, it := range its {
		out[i] = it.CustomID
	}
	return out
}

// errCrash is what a crashing journal returns: the process "died" before
// the record reached the disk.
var errCrash = errors.New("simulated kill -9")

// journal keeps the last saved chunk as JSON, as a store row would, and
// can be told to crash on its n-th save.
type journal struct {
	mu      sync.Mutex
	saves   int
	crashAt int // 0: never
	last    []byte
}

func (j *journal) Save(_ context.Context, c llmbatch.Chunk) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.saves++
	if j.saves == j.crashAt {
		return errCrash
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	j.last = b
	return nil
}

// load is what a restarted process reads back.
func (j *journal) load(t *testing.T) llmbatch.Chunk {
	t.Helper()
	j.mu.Lock()
	defer j.mu.Unlock()
	var c llmbatch.Chunk
	if err := json.Unmarshal(j.last, &c); err != nil {
		t.Fatalf("load chunk: %v", err)
	}
	return c
}

// sink publishes each item's outcome once, by custom_id, and checks that
// a redelivery (after a crash) carries the same outcome.
type sink struct {
	t          *testing.T
	mu         sync.Mutex
	published  map[string]llmbatch.Outcome
	deliveries int
}

func newSink(t *testing.T) *sink { return &sink{t: t, published: map[string]llmbatch.Outcome{}} }

func (s *sink) Deliver(_ context.Context, c llmbatch.Chunk, rep llmbatch.Report) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliveries++
	for _, o := range rep.Outcomes {
		key := c.Key + "/" + o.CustomID
		if prev, ok := s.published[key]; ok {
			if prev.Disposition != o.Disposition || string(prev.Result.Body) != string(o.Result.Body) {
				s.t.Errorf("%s redelivered differently: %s %q, then %s %q", key, prev.Disposition, prev.Result.Body, o.Disposition, o.Result.Body)
			}
			continue
		}
		s.published[key] = o
	}
	return nil
}

// run steps c until it is reconciled, advancing the clock over every
// wait, and fails the test after too many steps.
func (b *bundle) run(t *testing.T, d *llmbatch.Driver, c llmbatch.Chunk, its []llmbatch.Item) llmbatch.Chunk {
	t.Helper()
	ctx := context.Background()
	for range 2000 {
		next, a, err := d.Step(ctx, b.clock.Now(), c, its)
		if err != nil {
			t.Fatalf("step %s (%s): %v", c.Key, a, err)
		}
		c = next
		switch a {
		case llmbatch.ActionDone:
			return c
		case llmbatch.ActionWait:
			b.clock.Set(c.NotBefore)
		}
	}
	t.Fatalf("chunk %s not reconciled after 2000 steps (state %s)", c.Key, c.State)
	return c
}

func (b *bundle) driver(j llmbatch.Journal, s llmbatch.Sink) *llmbatch.Driver {
	return &llmbatch.Driver{Provider: b.prov, Journal: j, Sink: s, PollInterval: 2 * time.Minute}
}
