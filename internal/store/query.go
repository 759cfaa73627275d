package store

import (
	"strconv"
	"strings"
	"time"
)

// This file holds what both SQL drivers share of building a query and
// reading a row back, so that a read the two drivers run alike (the
// schedule and batch listings, their scanners) is written once; the
// drivers keep only what differs: how a query runs and how a write is
// guarded in their transactions.

// Scanner is one row as both drivers see it: database/sql's *sql.Row and
// *sql.Rows and pgx's pgx.Row and pgx.Rows all have this method. Both
// scan an integer column into *int and *int64, a NULL into a nil
// **int64, and SQLite's 0/1 as well as PostgreSQL's boolean into *bool.
type Scanner interface {
	Scan(dest ...any) error
}

// Query is one SQL statement built for both drivers: written with ?
// placeholders (SQLite's), its filters added only when they are set, and
// rendered with $1, $2, ... for PostgreSQL by Numbered. The text it is
// given must hold no ? other than placeholders (no string literal with a
// question mark, no PostgreSQL jsonb ? operator). The zero value is not
// usable; make one with NewQuery.
type Query struct {
	text  strings.Builder
	args  []any
	where bool
}

// NewQuery starts a query with text (a SELECT ... FROM ...) and the
// arguments of its placeholders.
func NewQuery(text string, args ...any) *Query {
	q := &Query{args: args}
	q.text.WriteString(text)
	return q
}

// Where adds the condition cond, with WHERE the first time and AND after,
// and the arguments of its placeholders. It returns q.
func (q *Query) Where(cond string, args ...any) *Query {
	if q.where {
		q.text.WriteString(" AND ")
	} else {
		q.text.WriteString(" WHERE ")
		q.where = true
	}
	q.text.WriteString(cond)
	q.args = append(q.args, args...)
	return q
}

// WhereSet adds cond (one placeholder, for v) only when v is not the
// empty string: the shape of every optional filter of a listing ("only
// this tenant's", "only in this state").
func (q *Query) WhereSet(cond, v string) *Query {
	if v == "" {
		return q
	}
	return q.Where(cond, v)
}

// Then appends a clause after the conditions (ORDER BY ..., LIMIT ?) and
// the arguments of its placeholders. It returns q.
func (q *Query) Then(clause string, args ...any) *Query {
	q.text.WriteString(" ")
	q.text.WriteString(clause)
	q.args = append(q.args, args...)
	return q
}

// SQL is the statement with ? placeholders, as SQLite takes it.
func (q *Query) SQL() string { return q.text.String() }

// Numbered is the statement with $1, $2, ... placeholders, as PostgreSQL
// takes it.
func (q *Query) Numbered() string {
	s := q.text.String()
	var b strings.Builder
	b.Grow(len(s) + 2*len(q.args))
	n := 0
	for {
		i := strings.IndexByte(s, '?')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		n++
		b.WriteString(s[:i])
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
		s = s[i+1:]
	}
}

// Args are the arguments of the placeholders, in order.
func (q *Query) Args() []any { return q.args }

// UnixNano converts a time to the Unix nanoseconds both drivers store
// instants as; the zero time is 0 (UnixTime's inverse).
func UnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// UnixTime converts stored Unix nanoseconds back, in UTC, as both
// drivers store instants: NULL (nil) and 0 are the zero time.
func UnixTime(n *int64) time.Time {
	if n == nil || *n == 0 {
		return time.Time{}
	}
	return time.Unix(0, *n).UTC()
}
