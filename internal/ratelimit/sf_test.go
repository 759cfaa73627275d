package ratelimit

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
)

// The serializer below writes the canonical form of RFC 8941 §4.1, so that
// tests can compare parse results as strings and fuzzing can check that
// parse(serialize(parse(x))) is stable.

func serializeList(ms []sfMember) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = serializeMember(m)
	}
	return strings.Join(parts, ", ")
}

func serializeDict(ms []sfMember) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		if !m.isInner && m.item == (sfItem{kind: sfBoolean, num: 1}) {
			parts[i] = m.key + serializeParams(m.params)
		} else {
			parts[i] = m.key + "=" + serializeMember(m)
		}
	}
	return strings.Join(parts, ", ")
}

func serializeMember(m sfMember) string {
	if !m.isInner {
		return serializeItem(m.item) + serializeParams(m.params)
	}
	parts := make([]string, len(m.inner))
	for i, ip := range m.inner {
		parts[i] = serializeItem(ip.item) + serializeParams(ip.params)
	}
	return "(" + strings.Join(parts, " ") + ")" + serializeParams(m.params)
}

func serializeParams(ps []sfParam) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(";" + p.key)
		if p.val != (sfItem{kind: sfBoolean, num: 1}) {
			b.WriteString("=" + serializeItem(p.val))
		}
	}
	return b.String()
}

func serializeItem(it sfItem) string {
	switch it.kind {
	case sfInteger:
		return strconv.FormatInt(it.num, 10)
	case sfDecimal:
		sign, n := "", it.num
		if n < 0 {
			sign, n = "-", -n
		}
		frac := strings.TrimRight(strconv.FormatInt(1000+n%1000, 10)[1:], "0")
		if frac == "" {
			frac = "0"
		}
		return sign + strconv.FormatInt(n/1000, 10) + "." + frac
	case sfString:
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(it.str) + `"`
	case sfToken:
		return it.str
	case sfBytes:
		return ":" + base64.StdEncoding.EncodeToString([]byte(it.str)) + ":"
	case sfBoolean:
		return "?" + strconv.FormatInt(it.num, 10)
	case sfDate:
		return "@" + strconv.FormatInt(it.num, 10)
	}
	return "<invalid>"
}

// sfCase is a field value and its canonical serialization once parsed,
// or "FAIL" where parsing fails.
type sfCase struct {
	in   string
	want string
}

// checkParsed runs parse (named name in a failure) over each case and
// compares what serialize writes of its answer with the case's want.
func checkParsed(t *testing.T, name string, parse func(string) ([]sfMember, bool), serialize func([]sfMember) string, tests []sfCase) {
	t.Helper()
	for _, tt := range tests {
		got := "FAIL"
		if ms, ok := parse(tt.in); ok {
			got = serialize(ms)
		}
		if got != tt.want {
			t.Errorf("%s(%q) = %s; want %s", name, tt.in, got, tt.want)
		}
	}
}

func TestParseSFList(t *testing.T) {
	t.Parallel()
	tests := []sfCase{
		// RFC 8941 §3.1 and §3.1.1 examples.
		{"sugar, tea, rum", "sugar, tea, rum"},
		{"sugar,tea,rum", "sugar, tea, rum"},
		{`("foo" "bar"), ("baz"), ("bat" "one"), ()`, `("foo" "bar"), ("baz"), ("bat" "one"), ()`},
		{`("foo"; a=1;b=2);lvl=5, ("bar" "baz");lvl=1`, `("foo";a=1;b=2);lvl=5, ("bar" "baz");lvl=1`},
		// RFC 8941 §3.1.2 example.
		{"abc;a=1;b=2; cde_456, (ghi;jk=4 l);q=\"9\";r=w", `abc;a=1;b=2;cde_456, (ghi;jk=4 l);q="9";r=w`},
		// RFC 8941 §3.3 item types.
		{"42, -42, 4.5, -0.25, 1.000", "42, -42, 4.5, -0.25, 1.0"},
		{`"hello world", "a\"b\\c"`, `"hello world", "a\"b\\c"`},
		{"foo123/456, *tok:x", "foo123/456, *tok:x"},
		{":cHJldGVuZCB0aGlzIGlzIGJpbmFyeSBjb250ZW50Lg==:", ":cHJldGVuZCB0aGlzIGlzIGJpbmFyeSBjb250ZW50Lg==:"},
		{":YQ:", ":YQ==:"}, // missing padding is tolerated (§4.2.7)
		{"?1, ?0", "?1, ?0"},
		{"@1659578233", "@1659578233"}, // RFC 9651 §3.3.7
		// The RateLimit draft's shapes.
		{`"default";q=100;w=60,"daily";q=1000;w=86400`, `"default";q=100;w=60, "daily";q=1000;w=86400`},
		{`"default";r=50;t=30`, `"default";r=50;t=30`},
		// Whitespace.
		{"  a ,\tb  ", "a, b"},
		{"", ""},
		// Limits of numbers (RFC 8941 §3.3.1, §3.3.2).
		{"999999999999999", "999999999999999"},
		{"-999999999999999", "-999999999999999"},
		{"1000000000000000", "FAIL"},
		{"999999999999.999", "999999999999.999"},
		{"1000000000000.0", "FAIL"},
		{"1.2345", "FAIL"},
		{"1.", "FAIL"},
		{"-", "FAIL"},
		{"--1", "FAIL"},
		{"1.2.3", "FAIL"},
		// Tolerance: upper-case keys fold to lower case.
		{"a;W=60", "a;w=60"},
		// Malformed.
		{"a,", "FAIL"},
		{",a", "FAIL"},
		{"a b", "FAIL"},
		{"a;", "FAIL"},
		{"a;=1", "FAIL"},
		{"a;1=1", "FAIL"},
		{`"unterminated`, "FAIL"},
		{`"bad\escape"`, "FAIL"},
		{"\"tab\tinside\"", "FAIL"},
		{"\"caf\xc3\xa9\"", "FAIL"},
		{":not base64!:", "FAIL"},
		{":abc", "FAIL"},
		{"?2", "FAIL"},
		{"?", "FAIL"},
		{"@1.5", "FAIL"},
		{"@", "FAIL"},
		{`%"display"`, "FAIL"},
		{"(a b", "FAIL"},
		{"(a,b)", "FAIL"},
		{"(a)(b)", "FAIL"},
		{"limit=10", "FAIL"},
	}
	checkParsed(t, "parseSFList", parseSFList, serializeList, tests)
}

func TestParseSFDict(t *testing.T) {
	t.Parallel()
	tests := []sfCase{
		// RFC 8941 §3.2 examples.
		{`en="Applepie", da=:w4ZibGV0w6ZydGU=:`, `en="Applepie", da=:w4ZibGV0w6ZydGU=:`},
		{"a=?0, b, c; foo=bar", "a=?0, b, c;foo=bar"},
		{"rating=1.5, feelings=(joy sadness)", "rating=1.5, feelings=(joy sadness)"},
		{"a=(1 2), b=3, c=4;aa=bb, d=(5 6);valid", "a=(1 2), b=3, c=4;aa=bb, d=(5 6);valid"},
		// draft-07's combined RateLimit field.
		{"limit=100, remaining=50, reset=30", "limit=100, remaining=50, reset=30"},
		// A repeated key keeps its place and takes the last value (§4.2.2).
		{"a=1, b=2, a=3", "a=3, b=2"},
		{"", ""},
		{"a=", "FAIL"},
		{"a=1,", "FAIL"},
		{`"a"=1`, "FAIL"},
		{"1=a", "FAIL"},
		{"a=1 b=2", "FAIL"},
	}
	checkParsed(t, "parseSFDict", parseSFDict, serializeDict, tests)
}
