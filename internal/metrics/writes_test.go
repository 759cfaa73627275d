package metrics

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestStoreWriteCounts: a region whose store counts its writes (SQLite)
// reports them and their transactions at every scrape, current without a
// cache.
func TestStoreWriteCounts(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t)
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "us.db"), Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m.AddRegion("us", st)
	scrape := func() string {
		return scrape(t, reg, "ratelane_store_writes_total", "ratelane_store_transactions_total")
	}
	base := st.WriteCounts()
	for i := range 3 {
		b, items := storetest.NewBatch("acme", 2)
		if err := st.CreateBatch(context.Background(), b, items); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("ratelane_store_writes_total{region=\"us\"} %d\nratelane_store_transactions_total{region=\"us\"} %d",
			base.Writes+int64(i)+1, base.Transactions+int64(i)+1)
		if got := scrape(); got != want {
			t.Fatalf("after write %d:\n%s\nwant\n%s", i+1, got, want)
		}
	}
}
