package ratelimit

import (
	"net/http"
	"strings"
	"time"
)

// Policy is one quota policy from the IETF RateLimit header fields
// (draft-ietf-httpapi-ratelimit-headers): what RateLimit-Policy says about
// it, merged with what RateLimit says about its current state. [Parse]
// fills fields it did not find with their "unknown" values.
type Policy struct {
	// Name is the policy's identifier: the item of a RateLimit-Policy or
	// RateLimit member, such as "default". It is "" for the older drafts'
	// unnamed policies (RateLimit-Limit, "RateLimit: limit=...", and
	// RateLimit-Policy members that are bare integers such as "100;w=60").
	Name string
	// Quota is the policy's quota per window, in QuotaUnit (the q
	// parameter; the integer item or "limit" in older drafts); -1 when
	// unknown.
	Quota int64
	// QuotaUnit is the qu parameter: "requests", "content-bytes" or
	// "concurrent-requests". "" when not given; the draft's default is
	// "requests".
	QuotaUnit string
	// Window is the policy's time window (the w parameter, in seconds on
	// the wire); 0 when unknown.
	Window time.Duration
	// PartitionKey is the decoded pk parameter, which tells apart the
	// quotas of different clients sharing one policy; "" when absent.
	PartitionKey string
	// Remaining is the quota left in the current window (the r parameter
	// of RateLimit; "remaining" or RateLimit-Remaining in older drafts);
	// -1 when unknown. 0 means exhausted.
	Remaining int64
	// Reset is the time from now until the quota is restored (the t
	// parameter of RateLimit; "reset" or RateLimit-Reset in older drafts);
	// 0 when unknown or already past. See [Parse] for the Unix-time
	// tolerance.
	Reset time.Duration

	// resetSrc names the header that gave Reset, for Info.Delay.
	resetSrc string
}

// unixThreshold is where a reset given in seconds is taken as a Unix time
// instead of a delay: 10^9 seconds is about 31.7 years as a delay (absurd)
// and September 2001 as a Unix time. Some servers (GitLab, for one) send
// Unix times in RateLimit-Reset although every draft says delay-seconds.
const unixThreshold = 1_000_000_000

// parsePolicies reads RateLimit-Policy and RateLimit in the current
// structured-field form (draft 08 and later):
//
//	RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400
//	RateLimit: "burst";r=50;t=30
//
// the combined dictionary of draft 07 ("RateLimit: limit=100,
// remaining=50, reset=30", with "RateLimit-Policy: 100;w=60"), and the
// separate RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset fields
// of drafts 00 to 06. Current state is merged into the policy of the same
// name (and, for unnamed policies, the same quota). A field that does not
// parse is ignored as a whole, as RFC 8941 requires.
func parsePolicies(h http.Header, now time.Time) []Policy {
	var ps []Policy
	if list, ok := parseSFList(joined(h, "RateLimit-Policy")); ok {
		for _, m := range list {
			if p, ok := policyFromMember(m); ok {
				ps = append(ps, p)
			}
		}
	}
	v := joined(h, "RateLimit")
	if list, ok := parseSFList(v); ok {
		for _, m := range list {
			if p, ok := stateFromMember(m, now); ok {
				ps = mergePolicy(ps, p)
			}
		}
	} else if dict, ok := parseSFDict(v); ok {
		if p, ok := stateFromDict(dict, now); ok {
			ps = mergePolicy(ps, p)
		}
	}
	if p, ok := separateFields(h, now); ok {
		ps = mergePolicy(ps, p)
	}
	return ps
}

// newPolicy returns a Policy that says nothing yet.
func newPolicy(name string) Policy {
	return Policy{Name: name, Quota: -1, Remaining: -1}
}

// policyFromMember reads one RateLimit-Policy member: a named policy with
// q, qu, w and pk parameters, or an older draft's integer quota with w.
func policyFromMember(m sfMember) (Policy, bool) {
	if m.isInner {
		return Policy{}, false
	}
	p := newPolicy("")
	switch m.item.kind {
	case sfString, sfToken:
		p.Name = m.item.str
		if q, ok := m.param("q"); ok {
			p.Quota = count(q)
		}
	case sfInteger:
		p.Quota = count(m.item)
	default:
		return Policy{}, false
	}
	if qu, ok := m.param("qu"); ok && (qu.kind == sfString || qu.kind == sfToken) {
		p.QuotaUnit = qu.str
	}
	p.Window = window(m)
	p.PartitionKey = partitionKey(m)
	return p, p.Name != "" || p.Quota >= 0
}

// stateFromMember reads one current-form RateLimit member:
// "name";r=<remaining>;t=<seconds>;pk=:<bytes>:.
func stateFromMember(m sfMember, now time.Time) (Policy, bool) {
	if m.isInner || (m.item.kind != sfString && m.item.kind != sfToken) {
		return Policy{}, false
	}
	p := newPolicy(m.item.str)
	if r, ok := m.param("r"); ok {
		p.Remaining = count(r)
	}
	if t, ok := m.param("t"); ok {
		p.Reset, p.resetSrc = resetFrom(t, now, "ratelimit")
	}
	p.PartitionKey = partitionKey(m)
	return p, true
}

// stateFromDict reads draft 07's "RateLimit: limit=100, remaining=50,
// reset=30".
func stateFromDict(dict []sfMember, now time.Time) (Policy, bool) {
	p := newPolicy("")
	for _, m := range dict {
		if m.isInner {
			continue
		}
		switch m.key {
		case "limit":
			p.Quota, p.Window = count(m.item), window(m)
		case "remaining":
			p.Remaining = count(m.item)
		case "reset":
			p.Reset, p.resetSrc = resetFrom(m.item, now, "ratelimit")
		}
	}
	return p, p.says()
}

// separateFields reads drafts 00 to 06: RateLimit-Limit ("100", or
// "100, 100;w=60" where the first member is the current limit),
// RateLimit-Remaining and RateLimit-Reset (delay-seconds; an HTTP-date is
// tolerated).
func separateFields(h http.Header, now time.Time) (Policy, bool) {
	p := newPolicy("")
	if m, ok := firstMember(joined(h, "RateLimit-Limit")); ok {
		p.Quota, p.Window = count(m.item), window(m)
	}
	if m, ok := firstMember(joined(h, "RateLimit-Remaining")); ok {
		p.Remaining = count(m.item)
	}
	if v := joined(h, "RateLimit-Reset"); v != "" {
		if m, ok := firstMember(v); ok && m.item.kind == sfInteger {
			p.Reset, p.resetSrc = resetFrom(m.item, now, "ratelimit-reset")
		} else if d, ok := ParseRetryAfter(v, now); ok {
			p.Reset, p.resetSrc = d, "ratelimit-reset"
		}
	}
	return p, p.says()
}

// says reports whether p holds a usable quota, remaining or reset.
func (p Policy) says() bool {
	return p.Quota >= 0 || p.Remaining >= 0 || p.resetSrc != ""
}

// mergePolicy merges the state c into the policy it describes, or
// appends c. A policy matches when the names are equal, the partition keys
// do not conflict, and (for unnamed policies) the quotas do not conflict.
func mergePolicy(ps []Policy, c Policy) []Policy {
	for i := range ps {
		p := &ps[i]
		if p.Name != c.Name ||
			p.PartitionKey != "" && c.PartitionKey != "" && p.PartitionKey != c.PartitionKey ||
			p.Quota >= 0 && c.Quota >= 0 && p.Quota != c.Quota {
			continue
		}
		if c.Quota >= 0 {
			p.Quota = c.Quota
		}
		if c.Window > 0 {
			p.Window = c.Window
		}
		if c.PartitionKey != "" {
			p.PartitionKey = c.PartitionKey
		}
		if c.Remaining >= 0 {
			p.Remaining = c.Remaining
		}
		if c.resetSrc != "" {
			p.Reset, p.resetSrc = c.Reset, c.resetSrc
		}
		return ps
	}
	return append(ps, c)
}

// count returns a non-negative Integer item, else -1.
func count(it sfItem) int64 {
	if it.kind != sfInteger || it.num < 0 {
		return -1
	}
	return it.num
}

// seconds converts a non-negative Integer or Decimal item of seconds to a
// Duration, saturating; false for anything else.
func seconds(it sfItem) (time.Duration, bool) {
	if it.num < 0 {
		return 0, false
	}
	switch it.kind {
	case sfInteger:
		if it.num > int64(maxDuration/time.Second) {
			return maxDuration, true
		}
		return time.Duration(it.num) * time.Second, true
	case sfDecimal: // thousandths; at most 10^15, so no overflow
		return time.Duration(it.num) * time.Millisecond, true
	}
	return 0, false
}

// resetFrom converts a reset given in seconds to a Duration from now,
// taking integers of at least unixThreshold as Unix times. It returns
// src when the item was usable, "" otherwise.
func resetFrom(it sfItem, now time.Time, src string) (time.Duration, string) {
	if it.kind == sfInteger && it.num >= unixThreshold {
		return until(time.Unix(it.num, 0), now), src
	}
	if d, ok := seconds(it); ok {
		return d, src
	}
	return 0, ""
}

// window returns the member's w parameter (or "window", as an early draft
// spelled it) as a Duration; 0 when absent or malformed.
func window(m sfMember) time.Duration {
	w, ok := m.param("w")
	if !ok {
		w, ok = m.param("window")
	}
	if !ok {
		return 0
	}
	d, _ := seconds(w)
	return d
}

// partitionKey returns the member's pk parameter (a Byte Sequence; a
// String or Token is tolerated), or "".
func partitionKey(m sfMember) string {
	if pk, ok := m.param("pk"); ok && (pk.kind == sfBytes || pk.kind == sfString || pk.kind == sfToken) {
		return pk.str
	}
	return ""
}

// firstMember parses v as a List and returns its first member, which must
// be an item.
func firstMember(v string) (sfMember, bool) {
	list, ok := parseSFList(v)
	if !ok || len(list) == 0 || list[0].isInner {
		return sfMember{}, false
	}
	return list[0], true
}

// joined returns all field lines of the named header joined with ", "
// (RFC 9110 §5.3), or "".
func joined(h http.Header, name string) string {
	return strings.Join(h.Values(name), ", ")
}
