package sqlite

import (
	"strings"
	"testing"
)

// rowValues is a scanner that stores fixed values into *any destinations,
// as database/sql does for the driver's values.
type rowValues []any

func (r rowValues) Scan(dest ...any) error {
	for i, d := range dest {
		*d.(*any) = r[i]
	}
	return nil
}

// TestScanLeasedConverts: scanLeased turns the driver's values of
// leasedCols into the job's fields (NULLs into zero values) with a reused
// buffer, reports whether the rare column is set, and refuses a value of
// the wrong type instead of reading it as zero.
func TestScanLeasedConverts(t *testing.T) {
	row := rowValues{int64(11), `["k"]`, int64(-2), []byte(`{"a":1}`), int64(4), int64(5), int64(6),
		int64(1_000_000_000), int64(2), int64(2_000_000_000), nil}
	var b anyRow
	for i := range 2 {
		if i == 1 {
			row[10] = int64(1)
		}
		j, rowid, rare, err := scanLeased(row, &b)
		if err != nil {
			t.Fatal(err)
		}
		if len(j.LimitKeys) != 1 || j.LimitKeys[0] != "k" || j.Priority != -2 || string(j.Payload) != `{"a":1}` ||
			j.Budgets.Congestion != 4 || j.Budgets.Transient != 5 || j.Budgets.Schema != 6 ||
			j.EligibleAt.UnixNano() != 1_000_000_000 || j.Attempt != 2 || j.CreatedAt.UnixNano() != 2_000_000_000 ||
			rowid != 11 || rare != (i == 1) {
			t.Fatalf("scanned %+v, rowid %d, rare %v", j, rowid, rare)
		}
		for i, v := range b.v {
			if v != nil {
				t.Fatalf("buffer value %d kept after the row: %v", i, v)
			}
		}
	}
	bad := append(rowValues{}, row...)
	bad[2] = "high"
	if _, _, _, err := scanLeased(bad, &b); err == nil || !strings.Contains(err.Error(), "string") {
		t.Fatalf("a text priority: %v, want an error naming the type", err)
	}
}
