package rules

import (
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/ratelane/ratelane/internal/review/finding"
)

// all lists the rules, most severe first (see Review).
var all = []rule{
	{"aws-access-key", finding.SeverityError, finding.CategorySecurity, 0.9,
		"An AWS access key id is committed; revoke it and load credentials from the environment or a secret store.", matchAWSKey},
	{"private-key", finding.SeverityError, finding.CategorySecurity, 0.95,
		"A private key is committed; revoke it and keep keys out of the repository.", matchPrivateKey},
	{"hardcoded-secret", finding.SeverityError, finding.CategorySecurity, 0.6,
		"A secret-looking value is assigned from a literal; load it from configuration or a secret store.", matchSecretAssign},
	{"tls-verify-disabled", finding.SeverityError, finding.CategorySecurity, 0.85,
		"TLS certificate verification is disabled, which allows man-in-the-middle attacks.", matchTLS},
	{"sql-string-built", finding.SeverityWarning, finding.CategorySecurity, 0.6,
		"SQL is built from strings; use query parameters to avoid SQL injection.", matchSQL},
	{"eval-exec", finding.SeverityWarning, finding.CategorySecurity, 0.6,
		"eval/exec runs dynamic code; make sure no untrusted input can reach it.", matchEval},
	{"ignored-error", finding.SeverityWarning, finding.CategoryBug, 0.5,
		"An error is discarded; handle it or say in a comment why it is safe to ignore.", matchIgnoredError},
	{"debug-print", finding.SeverityInfo, finding.CategoryMaintainability, 0.5,
		"Debug output was added; remove it or use the project's logger.", matchDebugPrint},
	{"todo", finding.SeverityInfo, finding.CategoryMaintainability, 0.9,
		"A TODO/FIXME/XXX was added; track it in an issue or resolve it before merging.", matchTODO},
}

const sqlShape = "[\"'`]\\s*(SELECT\\b[^\"'`]*\\bFROM\\b|INSERT\\s+INTO\\b|UPDATE\\s+[\\w.\"]+\\s+SET\\b|DELETE\\s+FROM\\b)"

var (
	awsKeyRE = regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`)
	pemRE    = regexp.MustCompile(`-----BEGIN ((RSA|DSA|EC|OPENSSH|ENCRYPTED|PGP) )?PRIVATE KEY( BLOCK)?-----`)
	// secretRE: an identifier naming a secret, assigned a quoted literal of
	// at least 8 non-space characters.
	secretRE = regexp.MustCompile(`(?i)[\w.-]*(password|passwd|secret|api_?key|apikey|access_?key|auth_?token|token)[\w.-]*["']?\s*(:=|=|:)\s*["']([^"'\s]{8,})["']`)
	// placeholderRE: literal values that are obviously not real secrets.
	placeholderRE = regexp.MustCompile(`(?i)example|changeme|change_me|placeholder|dummy|redacted|xxxx|\*\*\*|<[^>]*>|\$\{|\{\{|%s|your[_-]|fake|sample`)
	tlsREs        = []*regexp.Regexp{
		regexp.MustCompile(`\bInsecureSkipVerify\s*:\s*true\b`),
		regexp.MustCompile(`\bverify\s*=\s*False\b`),
		regexp.MustCompile(`\brejectUnauthorized\s*:\s*false\b`),
		regexp.MustCompile(`\bNODE_TLS_REJECT_UNAUTHORIZED\s*=\s*["']?0\b`),
		regexp.MustCompile(`\bcurl\b.*\s(--insecure\b|-[a-zA-Z]*k[a-zA-Z]*(\s|$))`),
	}
	// sqlShapeREs: a string literal that starts a SQL statement. Keywords
	// match all upper or all lower case, never mixed, so that prose such as
	// "Select a file from " is not taken for SQL.
	sqlShapeREs = []*regexp.Regexp{
		regexp.MustCompile(sqlShape),
		regexp.MustCompile(strings.ToLower(sqlShape)),
	}
	sqlBuildREs = []*regexp.Regexp{
		regexp.MustCompile("[\"'`]\\s*\\+\\s*[\\w(]"),              // "... " + x
		regexp.MustCompile("(?i)Sprintf\\(\\s*[\"`][^\"`]*%[svq]"), // fmt.Sprintf("... %s")
		regexp.MustCompile(`\bf["'][^"']*\{`),                      // f"... {x}"
		regexp.MustCompile("`[^`]*\\$\\{"),                         // `... ${x}`
		regexp.MustCompile(`["']\s*%\s*[\w(]`),                     // "... %s" % x
		regexp.MustCompile(`["']\.format\(`),                       // "... {}".format(x)
	}
	evalRE      = regexp.MustCompile(`(^|[^.\w])(eval|exec)\s*\(`)
	blankCallRE = regexp.MustCompile(`^\s*_\s*=\s*[\w.]*\w\(`)
	emptyErrRE  = regexp.MustCompile(`^\s*if\s+err\s*!=\s*nil\s*\{\s*(\}\s*)?$`)
	todoRE      = regexp.MustCompile(`(//|#|/\*|^\s*\*|--|<!--).*\b(TODO|FIXME|XXX)\b`)
	debugREs    = map[lang]*regexp.Regexp{
		langGo:     regexp.MustCompile(`\bfmt\.Print(ln|f)?\(`),
		langPython: regexp.MustCompile(`(^|[^.\w])print\(`),
		langJS:     regexp.MustCompile(`\bconsole\.(log|debug)\(`),
		langRust:   regexp.MustCompile(`\bdbg!\(`),
		langJava:   regexp.MustCompile(`\bSystem\.out\.println\(`),
	}
)

// matchAWSKey flags AWS access key ids anywhere, docs included, except
// the documented example key (AKIA...EXAMPLE).
func matchAWSKey(l line) bool {
	for _, k := range awsKeyRE.FindAllString(l.text, -1) {
		if !strings.HasSuffix(k, "EXAMPLE") {
			return true
		}
	}
	return false
}

func matchPrivateKey(l line) bool { return pemRE.MatchString(l.text) }

// matchSecretAssign flags secret-named identifiers assigned a literal in
// code that is not a test, unless the value is an obvious placeholder.
func matchSecretAssign(l line) bool {
	if !isCode(l) || isTestFile(l.path) {
		return false
	}
	for _, m := range secretRE.FindAllStringSubmatch(l.text, -1) {
		if !placeholderRE.MatchString(m[3]) {
			return true
		}
	}
	return false
}

func matchTLS(l line) bool {
	return isCode(l) && anyMatch(tlsREs, l.text)
}

// matchSQL flags a SQL statement literal on a line that also concatenates
// or formats a string. Placeholders ($1, ?, %s passed as a parameter) are
// not flagged because the literal is then not combined with anything.
func matchSQL(l line) bool {
	return isCode(l) && anyMatch(sqlShapeREs, l.text) && anyMatch(sqlBuildREs, l.text)
}

// anyMatch reports whether one of res matches s.
func anyMatch(res []*regexp.Regexp, s string) bool {
	return slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(s) })
}

// matchEval flags eval( and exec( calls, not methods such as regex.exec(,
// in Python and JavaScript code.
func matchEval(l line) bool {
	return (l.lang == langPython || l.lang == langJS) && isCode(l) && evalRE.MatchString(l.text)
}

// matchIgnoredError is a Go-only heuristic with two shapes: a call result
// assigned to the blank identifier (`_ = f()`), and an empty error check
// (`if err != nil {}` on one line, or `if err != nil {` followed by an
// added `}`). It cannot know whether the call returns an error, and it
// does not look at `x, _ := f()`, which is too often a map or ok value.
// Test files are skipped.
func matchIgnoredError(l line) bool {
	if l.lang != langGo || isTestFile(l.path) || isComment(l) {
		return false
	}
	if blankCallRE.MatchString(l.text) {
		return true
	}
	if m := emptyErrRE.FindStringSubmatch(l.text); m != nil {
		return m[1] != "" || strings.TrimSpace(l.next) == "}"
	}
	return false
}

// matchDebugPrint flags print statements in code that is not a test, a
// comment, or (for Go) a command's main package, where printing is the job.
func matchDebugPrint(l line) bool {
	re, ok := debugREs[l.lang]
	if !ok || isTestFile(l.path) || isComment(l) {
		return false
	}
	if l.lang == langGo && (strings.HasPrefix(l.path, "cmd/") || strings.Contains(l.path, "/cmd/") || path.Base(l.path) == "main.go") {
		return false
	}
	return re.MatchString(l.text)
}

// matchTODO flags TODO, FIXME and XXX (upper case, whole words) after a
// comment marker in any file except documentation.
func matchTODO(l line) bool {
	return l.lang != langDocs && todoRE.MatchString(l.text)
}
