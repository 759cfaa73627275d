package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/store"
)

// TestQuery: a filter is added only when set, the first condition opens
// the WHERE clause and the others are ANDed, and the PostgreSQL form
// numbers the placeholders in order, so each argument meets its own.
func TestQuery(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		q         *store.Query
		sql, nums string
		args      string
	}{
		{store.NewQuery(`SELECT a FROM t`).WhereSet(`b = ?`, "").Then(`LIMIT ?`, 5),
			`SELECT a FROM t LIMIT ?`, `SELECT a FROM t LIMIT $1`, `[5]`},
		{store.NewQuery(`SELECT a FROM t`).WhereSet(`b = ?`, "x").WhereSet(`c = ?`, "").WhereSet(`d < ?`, "y").Then(`ORDER BY a LIMIT ?`, 2),
			`SELECT a FROM t WHERE b = ? AND d < ? ORDER BY a LIMIT ?`, `SELECT a FROM t WHERE b = $1 AND d < $2 ORDER BY a LIMIT $3`, `[x y 2]`},
		{store.NewQuery(`SELECT a FROM t WHERE k = ?`, "k").Then(`AND b = ?`, 1),
			`SELECT a FROM t WHERE k = ? AND b = ?`, `SELECT a FROM t WHERE k = $1 AND b = $2`, `[k 1]`},
		{store.NewQuery(`SELECT a FROM t`).Where(`b = ? AND c > ?`, 1, 2).Where(`d = ?`, 3),
			`SELECT a FROM t WHERE b = ? AND c > ? AND d = ?`, `SELECT a FROM t WHERE b = $1 AND c > $2 AND d = $3`, `[1 2 3]`},
	} {
		if got := c.q.SQL(); got != c.sql {
			t.Errorf("SQL() = %q, want %q", got, c.sql)
		}
		if got := c.q.Numbered(); got != c.nums {
			t.Errorf("Numbered() = %q, want %q", got, c.nums)
		}
		if got := fmt.Sprint(c.q.Args()); got != c.args {
			t.Errorf("Args() = %s, want %s", got, c.args)
		}
	}
}

func TestUnixTime(t *testing.T) {
	t.Parallel()
	zero, n := int64(0), int64(1_700_000_000_123_456_789)
	for _, c := range []struct {
		in   *int64
		want time.Time
	}{
		{nil, time.Time{}},
		{&zero, time.Time{}},
		{&n, time.Unix(0, n).UTC()},
	} {
		if got := store.UnixTime(c.in); !got.Equal(c.want) || got.Location() != time.UTC {
			t.Errorf("UnixTime(%v) = %v, want %v in UTC", c.in, got, c.want)
		}
	}
}
