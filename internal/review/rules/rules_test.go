package rules

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/review/diff"
	"github.com/ratelane/ratelane/internal/review/diff/difftest"
	"github.com/ratelane/ratelane/internal/review/finding"
)

// newFileDiff returns a diff that adds a file at p with the given lines.
func newFileDiff(t *testing.T, p string, lines ...string) *diff.Diff {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "diff --git a/%s b/%s\nnew file mode 100644\n--- /dev/null\n+++ b/%s\n@@ -0,0 +1,%d @@\n", p, p, p, len(lines))
	for _, l := range lines {
		b.WriteString("+" + l + "\n")
	}
	d, err := diff.Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRules(t *testing.T) {
	t.Parallel()
	type want struct {
		sev finding.Severity
		cat finding.Category
	}
	sec := func(s finding.Severity) *want { return &want{s, finding.CategorySecurity} }
	maint := &want{finding.SeverityInfo, finding.CategoryMaintainability}
	bug := &want{finding.SeverityWarning, finding.CategoryBug}
	tests := []struct {
		path, line string
		want       *want // nil: no finding
	}{
		{"cfg.go", `var k = "AKIAQWERTYUIOPASDFGH"`, sec(finding.SeverityError)},
		{"README.md", `key: AKIAQWERTYUIOPASDFGH`, sec(finding.SeverityError)},
		{"cfg.go", `var k = "AKIAIOSFODNN7EXAMPLE"`, nil},
		{"cfg.go", `var k = "AKIAqwertyuiopasdfgh"`, nil},
		{"key.pem", `-----BEGIN RSA PRIVATE KEY-----`, sec(finding.SeverityError)},
		{"id", `-----BEGIN OPENSSH PRIVATE KEY-----`, sec(finding.SeverityError)},
		{"cert.pem", `-----BEGIN CERTIFICATE-----`, nil},
		{"db.py", `DB_PASSWORD = "s3cr3t-Pa55word"`, sec(finding.SeverityError)},
		{"client.go", `apiKey := "sk_live_abcdef123456"`, sec(finding.SeverityError)},
		{"app.yaml", `  auth_token: "ghp_1234567890abcdef"`, sec(finding.SeverityError)},
		{"db.py", `DB_PASSWORD = "changeme123"`, nil},
		{"db.py", `DB_PASSWORD = os.environ["DB_PASSWORD"]`, nil},
		{"db.py", `password = "short"`, nil},
		{"db_test.go", `password := "hunter2hunter2"`, nil},
		{"tls.go", `	InsecureSkipVerify: true,`, sec(finding.SeverityError)},
		{"tls.go", `	// never set InsecureSkipVerify: true in production`, nil},
		{"tls.go", `	InsecureSkipVerify: false,`, nil},
		{"req.py", `requests.get(url, verify=False)`, sec(finding.SeverityError)},
		{"req.js", `const agent = new https.Agent({ rejectUnauthorized: false });`, sec(finding.SeverityError)},
		{"run.sh", `export NODE_TLS_REJECT_UNAUTHORIZED=0`, sec(finding.SeverityError)},
		{"run.sh", `curl -sSk https://example.com`, sec(finding.SeverityError)},
		{"Dockerfile", `RUN curl --insecure -o x https://example.com`, sec(finding.SeverityError)},
		{"run.sh", `curl -sSL --keepalive-time 2 https://example.com`, nil},
		{"q.go", `q := "SELECT * FROM users WHERE id = " + id`, sec(finding.SeverityWarning)},
		{"q.go", `q := fmt.Sprintf("SELECT name FROM t WHERE n = '%s'", n)`, sec(finding.SeverityWarning)},
		{"q.py", `cur.execute(f"SELECT * FROM users WHERE id = {uid}")`, sec(finding.SeverityWarning)},
		{"q.py", `cur.execute("DELETE FROM t WHERE id = %s" % uid)`, sec(finding.SeverityWarning)},
		{"q.ts", "db.query(`UPDATE users SET name = '${name}'`)", sec(finding.SeverityWarning)},
		{"q.go", `rows, err := db.Query("SELECT * FROM users WHERE id = $1", id)`, nil},
		{"q.py", `cur.execute("SELECT * FROM users WHERE id = %s", (uid,))`, nil},
		{"ui.js", `label = "Select a file from " + dir`, nil},
		{"q.js", `const q = "select id from t where x = " + x;`, sec(finding.SeverityWarning)},
		{"x.py", `result = eval(expr)`, sec(finding.SeverityWarning)},
		{"x.js", `exec(cmd, cb)`, sec(finding.SeverityWarning)},
		{"x.js", `const m = re.exec(s)`, nil},
		{"x.go", `eval(x)`, nil},
		{"x.py", `# eval(expr) is dangerous`, nil},
		{"a.go", `	_ = f.Close()`, bug},
		{"a.go", `	if err != nil {}`, bug},
		{"a_test.go", `	_ = f.Close()`, nil},
		{"a.go", `var _ io.Reader = (*T)(nil)`, nil},
		{"a.go", `	v, _ := m[k]`, nil},
		{"a.go", `	fmt.Println("debug", x)`, maint},
		{"a.go", `	fmt.Fprintln(w, "ok")`, nil},
		{"cmd/tool/main.go", `	fmt.Println("usage")`, nil},
		{"a_test.go", `	fmt.Println("x")`, nil},
		{"app.js", `console.log("here", x)`, maint},
		{"app.js", `// console.log("here", x)`, nil},
		{"app.test.js", `console.log("here", x)`, nil},
		{"main.py", `print(data)`, maint},
		{"main.py", `pprint.pprint(data)`, nil},
		{"lib.rs", `dbg!(x);`, maint},
		{"App.java", `System.out.println(x);`, maint},
		{"a.go", `// TODO: handle retries`, maint},
		{"a.py", `x = 1  # FIXME wrong`, maint},
		{"a.go", `phone := "XXX-XXX-XXXX"`, nil},
		{"NOTES.md", `- TODO: write docs`, nil},
		{"a.go", `// todo lowercase is not flagged`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.path+" "+tt.line, func(t *testing.T) {
			t.Parallel()
			got := Review(newFileDiff(t, tt.path, tt.line))
			if tt.want == nil {
				if len(got) != 0 {
					t.Errorf("got %+v, want no finding", got)
				}
				return
			}
			if len(got) != 1 || got[0].Severity != tt.want.sev || got[0].Category != tt.want.cat {
				t.Fatalf("got %+v, want one %s/%s", got, tt.want.sev, tt.want.cat)
			}
			if got[0].Line != 1 || got[0].Evidence != tt.line || got[0].Confidence <= 0 || got[0].Confidence > 1 {
				t.Errorf("finding = %+v", got[0])
			}
		})
	}
}

func TestEmptyErrBlockAcrossLines(t *testing.T) {
	t.Parallel()
	got := Review(newFileDiff(t, "a.go", "if err != nil {", "}", "if err != nil {", "\treturn err", "}"))
	if len(got) != 1 || got[0].Line != 1 || got[0].Category != finding.CategoryBug {
		t.Errorf("got %+v, want one finding on line 1", got)
	}
}

func TestOnlyAddedLines(t *testing.T) {
	t.Parallel()
	in := "--- a/a.go\n+++ b/a.go\n@@ -1,3 +1,3 @@\n fmt.Println(\"ctx\")\n-fmt.Println(\"old\")\n+x := 1\n // TODO ctx\n"
	d, err := diff.Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := Review(d); len(got) != 0 {
		t.Errorf("context or deleted lines flagged: %+v", got)
	}
}

// TestFindingsPassVerification is the rules reviewer's contract: every
// finding it makes on a diff passes finding.Verify on that diff and
// finding schema v1.
func TestFindingsPassVerification(t *testing.T) {
	t.Parallel()
	diffs := append(difftest.All(t), newFileDiff(t, "x.go", "\t_ = c.Close()\t ", "  fmt.Printf(\"%v\", x) // TODO: drop"))
	var total int
	for _, d := range diffs {
		got := Review(d)
		total += len(got)
		valid, q := finding.Verify(d, got)
		if len(q) != 0 || len(valid) != len(got) {
			t.Errorf("quarantined rules findings: %+v", q)
		}
		raw, err := json.Marshal(finding.Output{Findings: append([]finding.Finding{}, got...)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := finding.ValidateOutput(raw); err != nil {
			t.Errorf("rules findings violate the schema: %v", err)
		}
	}
	if total < 8 {
		t.Errorf("only %d findings on the test diffs; the property is vacuous", total)
	}
}
