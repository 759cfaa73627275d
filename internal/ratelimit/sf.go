package ratelimit

import (
	"encoding/base64"
	"strings"
)

// This file is a small parser for the subset of HTTP Structured Field
// Values (RFC 8941, updated by RFC 9651) that the IETF RateLimit fields
// use: lists and dictionaries of items or inner lists, with parameters;
// bare items may be integers, decimals, strings, tokens, byte sequences,
// booleans and dates (RFC 9651 §3.3.7). Display strings are not supported
// and make the field fail to parse.
//
// It follows the RFC's parsing algorithms (§4.2), with one tolerance: keys
// may contain upper-case letters, which are folded to lower case, because
// some servers send "W=60". As the RFC requires, any other error fails the
// whole field, and the caller then ignores it.

// sfKind is the type of a bare item.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal        // num holds the value in thousandths
	sfString
	sfToken
	sfBytes // str holds the decoded bytes
	sfBoolean
	sfDate // num holds Unix seconds
)

// sfItem is a bare item. Integers, dates and booleans (0 or 1) are in num,
// decimals in num as thousandths; strings, tokens and bytes in str.
type sfItem struct {
	kind sfKind
	num  int64
	str  string
}

// sfParam is one parameter; key is lower case.
type sfParam struct {
	key string
	val sfItem
}

// sfMember is a list member or a dictionary value. When isInner is set,
// the member is an inner list held in inner, and item is unused.
type sfMember struct {
	key     string // dictionary key; "" in a list
	item    sfItem
	isInner bool
	inner   []sfItemParams
	params  []sfParam
}

// sfItemParams is an item inside an inner list.
type sfItemParams struct {
	item   sfItem
	params []sfParam
}

// param returns the value of the parameter named key (the last one when
// repeated, as RFC 8941 §4.2.3.2 overwrites).
func (m sfMember) param(key string) (sfItem, bool) {
	for i := len(m.params) - 1; i >= 0; i-- {
		if m.params[i].key == key {
			return m.params[i].val, true
		}
	}
	return sfItem{}, false
}

// sfParser holds the remaining input.
type sfParser struct {
	s string
	i int
}

// parseSFList parses s as a List (RFC 8941 §4.2.1).
func parseSFList(s string) ([]sfMember, bool) {
	p := &sfParser{s: strings.Trim(s, " \t")}
	var out []sfMember
	for p.i < len(p.s) {
		m, ok := p.member()
		if !ok {
			return nil, false
		}
		out = append(out, m)
		if !p.next() {
			return nil, false
		}
	}
	return out, true
}

// parseSFDict parses s as a Dictionary (RFC 8941 §4.2.2). A repeated key
// keeps its first position and takes its last value.
func parseSFDict(s string) ([]sfMember, bool) {
	p := &sfParser{s: strings.Trim(s, " \t")}
	var out []sfMember
	for p.i < len(p.s) {
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		var m sfMember
		if p.peek() == '=' {
			p.i++
			if m, ok = p.member(); !ok {
				return nil, false
			}
		} else {
			m.item = sfItem{kind: sfBoolean, num: 1}
			if m.params, ok = p.params(); !ok {
				return nil, false
			}
		}
		m.key = key
		out = setMember(out, m)
		if !p.next() {
			return nil, false
		}
	}
	return out, true
}

// setMember replaces the member with m's key, or appends m.
func setMember(ms []sfMember, m sfMember) []sfMember {
	for i := range ms {
		if ms[i].key == m.key {
			ms[i] = m
			return ms
		}
	}
	return append(ms, m)
}

// next consumes the separator after a list or dictionary member: OWS,
// then end of input or a comma that must be followed by another member.
func (p *sfParser) next() bool {
	p.skipOWS()
	if p.i == len(p.s) {
		return true
	}
	if p.s[p.i] != ',' {
		return false
	}
	p.i++
	p.skipOWS()
	return p.i < len(p.s) // a trailing comma is an error
}

// member parses an item or an inner list, with parameters.
func (p *sfParser) member() (sfMember, bool) {
	var m sfMember
	var ok bool
	if p.peek() == '(' {
		m.isInner = true
		if m.inner, ok = p.innerList(); !ok {
			return m, false
		}
	} else if m.item, ok = p.bareItem(); !ok {
		return m, false
	}
	m.params, ok = p.params()
	return m, ok
}

// innerList parses "(" *SP [ item *( 1*SP item ) *SP ] ")" (RFC 8941
// §4.2.1.2); the caller parses the parameters after ")".
func (p *sfParser) innerList() ([]sfItemParams, bool) {
	p.i++ // "("
	var out []sfItemParams
	for {
		p.skipSP()
		switch c := p.peek(); {
		case c == ')':
			p.i++
			return out, true
		case c == 0:
			return nil, false
		}
		it, ok := p.bareItem()
		if !ok {
			return nil, false
		}
		ps, ok := p.params()
		if !ok {
			return nil, false
		}
		out = append(out, sfItemParams{item: it, params: ps})
		if c := p.peek(); c != ' ' && c != ')' {
			return nil, false
		}
	}
}

// params parses *( ";" *SP key [ "=" bare-item ] ) (RFC 8941 §4.2.3.2).
func (p *sfParser) params() ([]sfParam, bool) {
	var out []sfParam
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		val := sfItem{kind: sfBoolean, num: 1}
		if p.peek() == '=' {
			p.i++
			if val, ok = p.bareItem(); !ok {
				return nil, false
			}
		}
		out = append(out, sfParam{key: key, val: val})
	}
	return out, true
}

// key parses ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ),
// folding upper-case letters to lower case (a tolerance; see the file
// comment).
func (p *sfParser) key() (string, bool) {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		isAlpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !(isAlpha || c == '*' || p.i > start && (isDigit(c) || strings.IndexByte("_-.", c) >= 0)) {
			break
		}
		p.i++
	}
	if p.i == start {
		return "", false
	}
	return strings.ToLower(p.s[start:p.i]), true
}

// bareItem parses one bare item (RFC 8941 §4.2.3.1, RFC 9651 §4.2.3.1).
func (p *sfParser) bareItem() (sfItem, bool) {
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		return p.token()
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.i++
		it, ok := p.number()
		if !ok || it.kind != sfInteger {
			return sfItem{}, false
		}
		return sfItem{kind: sfDate, num: it.num}, true
	}
	return sfItem{}, false
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// integer digits and 1 to 3 fraction digits) (RFC 8941 §4.2.4).
func (p *sfParser) number() (sfItem, bool) {
	sign := int64(1)
	if p.peek() == '-' {
		sign = -1
		p.i++
	}
	var n, frac int64
	intDigits, fracDigits, dot := 0, 0, false
scan:
	for ; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		switch {
		case isDigit(c) && !dot:
			n = n*10 + int64(c-'0')
			intDigits++
		case isDigit(c):
			frac = frac*10 + int64(c-'0')
			fracDigits++
		case c == '.' && !dot && intDigits > 0:
			dot = true
		default:
			break scan
		}
		if intDigits > 15 || dot && (intDigits > 12 || fracDigits > 3) {
			return sfItem{}, false
		}
	}
	if intDigits == 0 || dot && fracDigits == 0 {
		return sfItem{}, false
	}
	if !dot {
		return sfItem{kind: sfInteger, num: sign * n}, true
	}
	for i := fracDigits; i < 3; i++ {
		frac *= 10
	}
	return sfItem{kind: sfDecimal, num: sign * (n*1000 + frac)}, true
}

// str parses a String: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE
// with printable ASCII only (RFC 8941 §4.2.5).
func (p *sfParser) str() (sfItem, bool) {
	p.i++ // opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '"':
			return sfItem{kind: sfString, str: b.String()}, true
		case c == '\\':
			if p.i == len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return sfItem{}, false
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c < 0x20 || c > 0x7e:
			return sfItem{}, false
		default:
			b.WriteByte(c)
		}
	}
	return sfItem{}, false // no closing quote
}

// token parses ( ALPHA / "*" ) *( tchar / ":" / "/" ) (RFC 8941 §4.2.6).
func (p *sfParser) token() (sfItem, bool) {
	start := p.i
	p.i++
	for p.i < len(p.s) && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return sfItem{kind: sfToken, str: p.s[start:p.i]}, true
}

// bytes parses ":" base64 ":" (RFC 8941 §4.2.7), accepting missing
// padding as the RFC allows.
func (p *sfParser) bytes() (sfItem, bool) {
	end := strings.IndexByte(p.s[p.i+1:], ':')
	if end < 0 {
		return sfItem{}, false
	}
	enc := p.s[p.i+1 : p.i+1+end]
	p.i += end + 2
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(enc, "="))
		if err != nil {
			return sfItem{}, false
		}
	}
	return sfItem{kind: sfBytes, str: string(b)}, true
}

// boolean parses "?0" or "?1" (RFC 8941 §4.2.8).
func (p *sfParser) boolean() (sfItem, bool) {
	if p.i+1 >= len(p.s) || (p.s[p.i+1] != '0' && p.s[p.i+1] != '1') {
		return sfItem{}, false
	}
	n := int64(p.s[p.i+1] - '0')
	p.i += 2
	return sfItem{kind: sfBoolean, num: n}, true
}

// peek returns the next byte, or 0 at the end of input.
func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sfParser) skipSP() {
	for p.peek() == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for c := p.peek(); c == ' ' || c == '\t'; c = p.peek() {
		p.i++
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isTchar reports whether c is a tchar (RFC 9110 §5.6.2).
func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
