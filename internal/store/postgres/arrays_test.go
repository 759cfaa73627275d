package postgres

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// TestArrayParams: the array parameter types reach the server as the plain
// slices do: elements, order, NULL elements, an empty array and a NULL
// array.
func TestArrayParams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	one, two := int64(-1), int64(1<<40)
	for _, c := range []struct {
		name  string
		sql   string
		typed any
		plain any
	}{
		{"text", `SELECT $1::text[]::text, cardinality($1::text[])`, textArray{"a", "", "é,\"}{ x", "NULL"}, []string{"a", "", "é,\"}{ x", "NULL"}},
		{"text empty", `SELECT $1::text[]::text, cardinality($1::text[])`, textArray{}, []string{}},
		{"text null", `SELECT $1::text[]::text, cardinality($1::text[])`, textArray(nil), []string(nil)},
		{"bigint", `SELECT $1::bigint[]::text, cardinality($1::bigint[])`, int8Array{0, -5, 1 << 62}, []int64{0, -5, 1 << 62}},
		{"bigint null elements", `SELECT $1::bigint[]::text, cardinality($1::bigint[])`, nullInt8Array{&one, nil, &two}, []*int64{&one, nil, &two}},
	} {
		var got, want *string
		var gotN, wantN *int
		if err := conn.QueryRow(ctx, c.sql, c.typed).Scan(&got, &gotN); err != nil {
			t.Fatalf("%s: typed: %v", c.name, err)
		}
		if err := conn.QueryRow(ctx, c.sql, c.plain).Scan(&want, &wantN); err != nil {
			t.Fatalf("%s: plain: %v", c.name, err)
		}
		if !equalPtr(got, want) || !equalPtr(gotN, wantN) {
			t.Errorf("%s: got %v (%v), want %v (%v)", c.name, deref(got), deref(gotN), deref(want), deref(wantN))
		}
	}
}

// TestArrayParamsDoNotAllocatePerElement: encoding a 64-element text[] or
// bigint[] parameter allocates a constant number of times, where the plain
// slice allocates once per element (the reason for the types).
func TestArrayParamsDoNotAllocatePerElement(t *testing.T) {
	m := pgtype.NewMap()
	strs := make([]string, 64)
	ints := make([]int64, 64)
	for i := range strs {
		strs[i] = "job-" + string(rune('a'+i%26))
		ints[i] = int64(i) << 40
	}
	buf := make([]byte, 0, 8192)
	encode := func(oid uint32, v any) float64 {
		return testing.AllocsPerRun(100, func() {
			var err error
			if _, err = m.Encode(oid, pgtype.BinaryFormatCode, v, buf[:0]); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, c := range []struct {
		name         string
		oid          uint32
		typed, plain any
	}{
		{"text", pgtype.TextArrayOID, textArray(strs), strs},
		{"bigint", pgtype.Int8ArrayOID, int8Array(ints), ints},
		{"bigint null elements", pgtype.Int8ArrayOID, nullInt8Array(ptrs(ints)), ptrs(ints)},
	} {
		typed, plain := encode(c.oid, c.typed), encode(c.oid, c.plain)
		t.Logf("%s: %v allocations typed, %v plain", c.name, typed, plain)
		if typed > 4 || plain < 64 {
			t.Errorf("%s: %v allocations typed (want at most 4), %v plain (want at least 64)", c.name, typed, plain)
		}
	}
}

func ptrs(xs []int64) []*int64 {
	out := make([]*int64, len(xs))
	for i := range xs {
		out[i] = &xs[i]
	}
	return slices.Clip(out)
}

func equalPtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
