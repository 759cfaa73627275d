package postgres

import "github.com/jackc/pgx/v5/pgtype"

// The array parameters of the hot statements (the lease's MarkLeased and
// TouchGroups, the finish's endAttemptsSQL, the insert) are passed as the
// types below rather than as plain slices. pgx encodes a plain slice
// through pgtype.FlatArray, whose Index returns each element as an any:
// a string or an int64 outside 0-255 put in an interface is a heap
// allocation, one per element and array, 14 of the 70 allocations per job
// of BenchmarkLeaseFinish64 (go test -benchmem, docs/benchmarks.md
// "Session 19 (s19h3)"). These types return a pointer into the slice
// instead, which fits in an interface without an allocation, and whose
// element type pgx encodes through pgtype.TextValuer or
// pgtype.Int64Valuer. The wire format is the same.

// textArray is a text[] parameter.
type textArray []string

// Dimensions implements pgtype.ArrayGetter; a nil slice is a NULL array,
// as pgx encodes a nil []string.
func (a textArray) Dimensions() []pgtype.ArrayDimension { return dims(a == nil, len(a)) }

// Index implements pgtype.ArrayGetter.
func (a textArray) Index(i int) any { return (*textElem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a textArray) IndexType() any { return (*textElem)(nil) }

// textElem is one element of a textArray.
type textElem string

// TextValue implements pgtype.TextValuer.
func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

// int8Array is a bigint[] parameter.
type int8Array []int64

// Dimensions implements pgtype.ArrayGetter.
func (a int8Array) Dimensions() []pgtype.ArrayDimension { return dims(a == nil, len(a)) }

// Index implements pgtype.ArrayGetter.
func (a int8Array) Index(i int) any { return (*int8Elem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a int8Array) IndexType() any { return (*int8Elem)(nil) }

// nullInt8Array is a bigint[] parameter whose nil elements are NULL.
type nullInt8Array []*int64

// Dimensions implements pgtype.ArrayGetter.
func (a nullInt8Array) Dimensions() []pgtype.ArrayDimension { return dims(a == nil, len(a)) }

// Index implements pgtype.ArrayGetter. A nil element is a nil pointer in
// the interface, which pgx encodes as NULL.
func (a nullInt8Array) Index(i int) any { return (*int8Elem)(a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a nullInt8Array) IndexType() any { return (*int8Elem)(nil) }

// int8Elem is one element of an int8Array or a nullInt8Array.
type int8Elem int64

// Int64Value implements pgtype.Int64Valuer.
func (e *int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// dims is a one-dimensional array's dimensions, nil for a NULL array.
func dims(null bool, n int) []pgtype.ArrayDimension {
	if null {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}
