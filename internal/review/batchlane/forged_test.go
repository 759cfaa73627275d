package batchlane

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestForgedDriverJobs: a driver job ends permanent, before any provider
// call, when the batch it names is another tenant's or region's, is
// missing past the grace, or its payload names none; a young job whose
// batch is not recorded yet waits.
func TestForgedDriverJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, b := storeWithBatch(t, 1)
	now := storetest.T0.Add(time.Hour)
	called := false
	h := NewHandler(Config{Region: "us", Store: st, Providers: map[string]Entry{}, Wake: func(string) { called = true },
		Now: func() time.Time { return now }})
	driver := func(tenant, region, batch string, created time.Time) *job.Job {
		payload, _ := json.Marshal(Args{Batch: batch})
		return &job.Job{ID: "j", Kind: KindCollect, Tenant: tenant, Region: region, Payload: payload, CreatedAt: created}
	}
	for name, tc := range map[string]struct {
		j    *job.Job
		want job.Class
	}{
		"another tenant's batch":      {driver("globex", "us", b.ID, now), job.ClassPermanent},
		"another region's job":        {driver("acme", "eu", b.ID, now), job.ClassPermanent},
		"no batch named":              {driver("acme", "us", "", now), job.ClassPermanent},
		"batch never recorded":        {driver("acme", "us", "missing", now.Add(-2*orphanGrace)), job.ClassPermanent},
		"batch not recorded yet":      {driver("acme", "us", "missing", now), job.ClassPending},
		"own batch, unknown provider": {driver("acme", "us", b.ID, now), job.ClassPermanent},
	} {
		if o := h.HandleCollect(ctx, tc.j); o.Class != tc.want {
			t.Errorf("%s: %s (%s), want %s", name, o.Class, o.Err, tc.want)
		}
	}
	if got, _ := st.GetBatch(ctx, b.ID); got.Counts != (store.BatchCounts{Total: 1, Pending: 1}) || called {
		t.Fatalf("a refused job changed the batch: %+v", got.Counts)
	}
}

// storeWithBatch opens a SQLite store of region us (at path) holding one
// batch of tenant acme with n items.
func storeWithBatch(t *testing.T, n int) (st *sqlite.Store, path string, b *store.Batch) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "us.db")
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, items := storetest.NewBatch("acme", n)
	if err := st.CreateBatch(context.Background(), b, items); err != nil {
		t.Fatal(err)
	}
	return st, path, b
}
