package pipeline

import (
	"strconv"
	"testing"
)

// FuzzParsePullTarget checks that ParsePullTarget never panics and that a
// target it accepts, printed back canonically, parses to the same parts.
func FuzzParsePullTarget(f *testing.F) {
	for _, s := range []string{"acme/app#42", "a/b#0", "a/b#99999999999999999999", "a#1", "/b#1", "a/b#", "a/b/c#1", "a/b#1\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		owner, repo, n, err := ParsePullTarget(s)
		if err != nil {
			return
		}
		if owner == "" || repo == "" || n < 0 {
			t.Fatalf("ParsePullTarget(%q) = %q, %q, %d", s, owner, repo, n)
		}
		back := owner + "/" + repo + "#" + strconv.Itoa(n)
		if o, r, m, err := ParsePullTarget(back); err != nil || o != owner || r != repo || m != n {
			t.Fatalf("ParsePullTarget(%q) = %q, %q, %d but its canonical form %q parses to %q, %q, %d, %v", s, owner, repo, n, back, o, r, m, err)
		}
	})
}
