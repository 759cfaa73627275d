package admission

import "github.com/ratelane/ratelane/internal/job"

// Announced credit. An upstream that announces its policy (IETF
// RateLimit-Policy, or a limit with its remaining quota) also says, in each
// answer, how many more requests it takes before its window or bucket
// refills: the remaining quota. An adaptive key that believes the policy
// (see announced) paces at AnnouncedMargin under it, evenly, which against
// a sliding window of N per second is N whole starts a second later than
// an upstream that takes each window's N at once (s14h5: rising's
// rise-sliding ran an even 29.1/s against 30-start generations, +1.2 s of
// its +1.36 s above ideal). The remaining quota is the upstream's own word
// on what it takes now, so the key may spend it at once: each answer sets
// the key's credit to the remaining it names less the key's starts still in
// flight (they may have reached the upstream after the answered one and
// used some of it), each start spends one unit, and a start the credit
// covers passes the key's bucket and learned window (its pacing), never its
// windows, pause or concurrency cap (its declared shapes and the upstream's
// word on a refusal). A refusal or a pause zeroes it: the upstream said
// otherwise. The remaining of a window or a bucket only grows while no one
// sends, so a credit kept while no answer comes is never more than the
// upstream would take; what it cannot know is another sender on the same
// quota, which the next answer reports.

// setCredit sets an adaptive key's credit from an announced hint h applied
// at the finish of one of its starts (after End: the key's InFlight no
// longer counts the answered start): the remaining it names less the
// starts in flight, when one of the key's sliding windows bounds what the
// upstream takes (see creditGuarded), and none otherwise.
func (s *State) setCredit(h job.Hint) {
	r := float64(min(h.Remaining, MaxCost))
	// The answered start and the remaining: not the starts in flight,
	// which under lag include some not yet at the upstream (counted,
	// they made rise-bucket's burst of 5 show room for 15 on a loaded
	// run: 4 refusals, 1.547 of ideal).
	s.shown = max(s.shown, (r+1)/float64(h.Limit))
	s.credit = 0
	if s.creditGuarded(h) {
		s.credit = max(0, r-float64(s.InFlight))
	}
}

// creditGuarded reports whether a sliding window of the key, as scaled
// now, bounds what the upstream announcing h takes: it enforces the
// announced policy (see windowEnforces) and the upstream has shown room
// for its whole quota at once (a remaining of quota - 1 on some answer:
// s.shown reached 1, as a window's first request after an idle window
// shows). Answers come back out of
// order, and one that left the upstream before others already applied
// names a remaining those others have since used, so a credit can be a
// few units high. Against an upstream that counts a window, or a bucket
// whose burst is the window's limit or more, the key's window (which
// counts each start until its answer) is what holds the key to the
// upstream's allowance, and the credit only lets it use the window at
// once; against a bucket with a smaller burst, which an announced policy
// does not tell apart (it announces its rate over the window), a high
// credit is a refusal and its pause: rising's rise-bucket (15/s, burst
// 5, announcing 15 per second) was refused 3-4 times on every seed when
// every announcement gave credit.
func (s *State) creditGuarded(h job.Hint) bool {
	return s.shown >= 1 && s.windowEnforces(h)
}

// credited reports whether the key's credit covers a start of cost units.
func (s *State) credited(cost int64) bool { return s.credit > 0 && s.credit >= float64(cost) }

// spendCredit takes cost units out of the credit at a start.
func (s *State) spendCredit(cost int64) { s.credit = max(0, s.credit-float64(cost)) }
