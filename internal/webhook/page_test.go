package webhook

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratelane/ratelane/internal/store"
)

// Registry.List pages as every store listing does (store.PageSize): a
// limit above the cap is clamped to it, not reset to the default page.
// Before, the registry kept its own copy of the old SQLite fallback and
// answered a limit of 5000 with 100 subscribers of 101.
func TestRegistryListPagesAsStore(t *testing.T) {
	t.Parallel()
	r, _, _ := newRegistry(t)
	ctx := context.Background()
	n := store.DefaultListLimit + 1
	for i := range n {
		if _, _, _, err := r.Put(ctx, SubscriberSpec{ID: fmt.Sprintf("s%03d", i), URL: "https://hooks.example.com/h", Topics: []string{"t"}}); err != nil {
			t.Fatal(err)
		}
	}
	for limit, want := range map[int]int{0: store.DefaultListLimit, store.MaxListLimit + 1: n, 5000: n, 7: 7} {
		if got, err := r.List(ctx, "", limit); err != nil || len(got) != want {
			t.Errorf("List(limit %d) = %d subscribers, %v; want %d", limit, len(got), err, want)
		}
	}
}
