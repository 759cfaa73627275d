package ratelane_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/testkit"
)

// TestLaneDedicatedNodes: two Clients on one region's store, one serving
// the interactive lane and one the batch lane (Config.Lanes), as an
// interactive node and a batch node at a lower priority would. Each lane's
// jobs all finish, and each node runs only its own lane's: the
// interactive node no batch job, the batch node no interactive one. On
// both drivers (PostgreSQL when RATELANE_TEST_POSTGRES_URL is set).
func TestLaneDedicatedNodes(t *testing.T) {
	onEachDriver(t, "lanes_", testLaneDedicatedNodes)
}

func testLaneDedicatedNodes(t *testing.T, region ratelane.Region) {
	ctx := context.Background()
	var mu sync.Mutex
	ran := map[string]map[ratelane.Lane]int{} // node -> lane -> jobs run
	node := func(name string, lanes ...ratelane.Lane) *ratelane.Client {
		cfg := ratelane.Config{Regions: []ratelane.Region{region}, DataDir: t.TempDir(), Lanes: lanes, Logger: quiet(), Workers: 4}
		cfg.Handle("work", ratelane.WorkFunc(func(_ context.Context, j *ratelane.Job, _ struct{}) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			if ran[name] == nil {
				ran[name] = map[ratelane.Lane]int{}
			}
			ran[name][j.Lane]++
			return nil, nil
		}))
		c, err := ratelane.NewClient(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			stop, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = c.Stop(stop)
			_ = c.Close()
		})
		return c
	}
	inter := node("interactive", ratelane.LaneInteractive)
	batch := node("batch", ratelane.LaneBatch)
	const n = 40
	var ps []ratelane.InsertParams
	for i := range n {
		lane := ratelane.LaneBatch
		if i%2 == 0 {
			lane = ratelane.LaneInteractive
		}
		ps = append(ps, ratelane.InsertParams{Kind: "work", Region: "us", Lane: lane, LimitKeys: []string{"k"}, Args: struct{}{}})
	}
	// Inserted before either node starts: both lanes are ready at once,
	// so a node that took the other lane's jobs would have them to take.
	if _, err := inter.InsertMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*ratelane.Client{inter, batch} {
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 20*time.Second, "every job published", func() bool {
		js, err := inter.List(ctx, "us", ratelane.ListParams{Kind: "work", State: ratelane.StatePublished, Limit: 100})
		return err == nil && len(js) == n
	})
	mu.Lock()
	defer mu.Unlock()
	if got := ran["interactive"]; got[ratelane.LaneBatch] != 0 || got[ratelane.LaneInteractive] != n/2 {
		t.Errorf("the interactive node ran %v, want %d interactive jobs and no batch job", got, n/2)
	}
	if got := ran["batch"]; got[ratelane.LaneInteractive] != 0 || got[ratelane.LaneBatch] != n/2 {
		t.Errorf("the batch node ran %v, want %d batch jobs and no interactive job", got, n/2)
	}
}

// TestLanesValidated: an unknown lane is a configuration error.
func TestLanesValidated(t *testing.T) {
	_, err := ratelane.NewClient(context.Background(), ratelane.Config{DataDir: t.TempDir(), Lanes: []ratelane.Lane{"bulk"}, Logger: quiet()})
	if err == nil {
		t.Fatal("NewClient accepted lane \"bulk\"")
	}
}
