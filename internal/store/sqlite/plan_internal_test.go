package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/store"
)

// TestLeaseScansNeedNoSort checks what lets Heads and ReadyGroups stop
// reading after limit rows instead of binding a LIMIT (see limitScan): each
// is answered from its index in ORDER BY order, with no temporary B-tree
// sorting every matching row first.
func TestLeaseScansNeedNoSort(t *testing.T) {
	s := openTestStore(t)
	for _, c := range []struct {
		q    string
		args int
	}{
		{headsSQL, 2},
		{readyGroupsSQL(store.GroupFilter{}), 3},
		{readyGroupsSQL(store.GroupFilter{Kinds: []string{"a", "b"}}), 5},
		{readyGroupsSQL(store.GroupFilter{Tenant: "t"}), 4},
		{readyGroupsSQL(store.GroupFilter{Kinds: []string{"a"}, Tenant: "t"}), 5},
	} {
		rows, err := s.wdb.Query("EXPLAIN QUERY PLAN "+c.q, make([]any, c.args)...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		got := strings.Join(plan, "; ")
		if strings.Contains(got, "TEMP B-TREE") || !strings.Contains(got, "USING INDEX") {
			t.Errorf("%s\nplan %q: want an index scan in ORDER BY order", c.q, got)
		}
	}
}

func openTestStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "us.db"), Region: "us"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
