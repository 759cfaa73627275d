package chunk

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/diff/difftest"
)

// genDiff builds a random but valid git diff with nFiles files.
func genDiff(r *rand.Rand, nFiles int) string {
	var b strings.Builder
	for fi := range nFiles {
		path := fmt.Sprintf("dir%d/file_%d.go", r.IntN(3), fi)
		isNew := r.IntN(6) == 0
		fmt.Fprintf(&b, "diff --git a/%s b/%s\n", path, path)
		if isNew {
			b.WriteString("new file mode 100644\n--- /dev/null\n")
		} else {
			fmt.Fprintf(&b, "--- a/%s\n", path)
		}
		fmt.Fprintf(&b, "+++ b/%s\n", path)
		oldN, newN := 1, 1
		for range 1 + r.IntN(4) {
			if !isNew {
				gap := r.IntN(30)
				oldN, newN = oldN+gap, newN+gap
			}
			oldN, newN = genHunk(&b, r, isNew, oldN, newN)
			if isNew {
				break
			}
		}
	}
	return b.String()
}

// genHunk writes one hunk starting at oldN/newN and returns the next line
// numbers after it.
func genHunk(b *strings.Builder, r *rand.Rand, isNew bool, oldN, newN int) (int, int) {
	var lines []string
	var oldC, newC, changes int
	for i := range 1 + r.IntN(60) {
		op := []string{" ", "+", "-"}[r.IntN(3)]
		if isNew {
			op = "+"
		}
		if i == 0 && op == " " {
			op = "+" // guarantee a change
		}
		text := strings.Repeat(fmt.Sprintf("tok%d ", r.IntN(100)), r.IntN(12))
		lines = append(lines, op+text)
		if op != "+" {
			oldC++
		}
		if op != "-" {
			newC++
		}
		if op != " " {
			changes++
		}
	}
	oldS, newS := oldN, newN
	if oldC == 0 {
		oldS--
	}
	if newC == 0 {
		newS--
	}
	fmt.Fprintf(b, "@@ -%d,%d +%d,%d @@ func f%d()\n", oldS, oldC, newS, newC, r.IntN(9))
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return oldN + oldC, newN + newC
}

func entrySet(t *testing.T, parts []Part) []diff.Entry {
	t.Helper()
	var all []diff.Entry
	for _, p := range parts {
		d, err := diff.Parse([]byte(p.Text))
		if err != nil {
			t.Fatalf("part %d does not parse: %v\n%s", p.Index, err, p.Text)
		}
		all = append(all, d.Entries()...)
		checkSpans(t, p, d)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Path != all[j].Path {
			return all[i].Path < all[j].Path
		}
		return all[i].Line < all[j].Line
	})
	return all
}

// checkSpans asserts that a part's Files lists exactly the lines it shows.
func checkSpans(t *testing.T, p Part, d *diff.Diff) {
	t.Helper()
	var want, got []string
	for _, e := range d.Entries() {
		want = append(want, fmt.Sprintf("%s:%d", e.Path, e.Line))
	}
	for _, fs := range p.Files {
		for _, r := range fs.Ranges {
			for n := r.Start; n <= r.End; n++ {
				got = append(got, fmt.Sprintf("%s:%d", fs.Path, n))
			}
		}
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("part %d spans %v, shows %v", p.Index, got, want)
	}
}

func sortedEntries(d *diff.Diff) []diff.Entry {
	e := d.Entries()
	sort.Slice(e, func(i, j int) bool {
		if e[i].Path != e[j].Path {
			return e[i].Path < e[j].Path
		}
		return e[i].Line < e[j].Line
	})
	return e
}

// TestSplitPreservesEntries is the chunking property: in full mode the
// parts, re-parsed, show exactly the original (path, line, kind, text)
// entries, each once; in fast mode every added line and a subset of context.
func TestSplitPreservesEntries(t *testing.T) {
	t.Parallel()
	for seed := range uint64(150) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, 42))
			d, err := diff.Parse([]byte(genDiff(r, 1+r.IntN(6))))
			if err != nil {
				t.Fatal(err)
			}
			maxTokens := []int{64, 100, 300, 1000, 100000}[seed%5]
			checkProperty(t, d, maxTokens)
		})
	}
}

func TestSplitTestdata(t *testing.T) {
	t.Parallel()
	for _, d := range difftest.All(t) {
		for _, maxTokens := range []int{64, 200, 8000} {
			checkProperty(t, d, maxTokens)
		}
	}
}

func checkProperty(t *testing.T, d *diff.Diff, maxTokens int) {
	t.Helper()
	full, err := Split(d, Options{MaxTokens: maxTokens, Mode: ModeFull})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := entrySet(t, full), sortedEntries(d); !reflect.DeepEqual(got, want) {
		t.Fatalf("full mode: entries differ after split (max %d): got %d want %d", maxTokens, len(got), len(want))
	}
	fast, err := Split(d, Options{MaxTokens: maxTokens, Mode: ModeFast})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range entrySet(t, fast) {
		if k, txt := d.Lookup(e.Path, e.Line); k != e.Kind || txt != e.Text {
			t.Fatalf("fast mode shows %+v, original has %v %q", e, k, txt)
		}
		seen[fmt.Sprintf("%s:%d", e.Path, e.Line)] = true
	}
	for _, e := range d.Entries() {
		if e.Kind == diff.Added && !seen[fmt.Sprintf("%s:%d", e.Path, e.Line)] {
			t.Fatalf("fast mode lost added line %s:%d", e.Path, e.Line)
		}
	}
	for i, parts := range [][]Part{full, fast} {
		for j, p := range parts {
			if p.Index != j || p.Tokens != EstimateTokens(p.Text) {
				t.Errorf("mode %d part %d: Index %d Tokens %d", i, j, p.Index, p.Tokens)
			}
		}
	}
}
