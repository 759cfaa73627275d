package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/ratelimit"
	"github.com/ratelane/ratelane/internal/review/finding"
)

// MaxCommentsPerReview is how many comments one "create a review" request
// carries; larger reviews are posted as several requests.
const MaxCommentsPerReview = 30

// GitHubArgs is the payload of a KindGitHub job: the review to post and the
// pull request, "owner/repo#number".
type GitHubArgs struct {
	Review string `json:"review"`
	Target string `json:"target"`
}

// JobGetter reads one job; a store satisfies it.
type JobGetter interface {
	Get(ctx context.Context, id string) (*job.Job, error)
}

// GitHub posts reviews to GitHub pull requests: the handler of KindGitHub
// jobs. Before posting it lists the pull request's review comments and
// skips every finding whose fingerprint is already there, so a re-run (a
// retry, a crash, a second review of the same head) adds nothing.
type GitHub struct {
	// BaseURL is the REST API root; default "https://api.github.com"
	// (GitHub Enterprise: "https://HOST/api/v3").
	BaseURL string
	// Token authenticates; it is never logged.
	Token string
	// Client is the HTTP client; default a client with a 30 s timeout.
	Client *http.Client
	// Jobs reads the review being posted (the region's store).
	Jobs JobGetter
	// Now is the clock; default time.Now.
	Now func() time.Time
}

var pullTarget = regexp.MustCompile(`^([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)#([0-9]+)$`)

// ParsePullTarget parses "owner/repo#number".
func ParsePullTarget(s string) (owner, repo string, number int, err error) {
	m := pullTarget.FindStringSubmatch(s)
	if m == nil {
		return "", "", 0, fmt.Errorf("github target must be owner/repo#number, not %q", s)
	}
	number, err = strconv.Atoi(m[3])
	return m[1], m[2], number, err
}

// Fingerprint identifies a finding across runs: a hash of its path, line,
// category and message, hidden in the comment body.
func Fingerprint(f finding.Finding) string {
	h := sha256.Sum256([]byte(f.Path + "\x00" + strconv.Itoa(f.Line) + "\x00" + string(f.Category) + "\x00" + f.Message))
	return hex.EncodeToString(h[:16])
}

var fingerprintRE = regexp.MustCompile(`<!-- ratelane:([0-9a-f]{32}) -->`)

// ghComment is one comment of a "create a review" request.
type ghComment struct {
	Path      string `json:"path"`
	Line      int    `json:"line"`
	Side      string `json:"side"`
	StartLine int    `json:"start_line,omitempty"`
	StartSide string `json:"start_side,omitempty"`
	Body      string `json:"body"`
}

type ghReview struct {
	CommitID string      `json:"commit_id,omitempty"`
	Body     string      `json:"body"`
	Event    string      `json:"event"`
	Comments []ghComment `json:"comments"`
}

func (g *GitHub) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

// Handle runs one attempt of a KindGitHub job.
func (g *GitHub) Handle(ctx context.Context, j *job.Job) job.Outcome {
	args, err := decode[GitHubArgs](j.Payload)
	if err != nil {
		return job.Outcome{Class: job.ClassPermanent, Err: "github payload does not decode"}
	}
	owner, repo, number, err := ParsePullTarget(args.Target)
	if err != nil {
		return job.Outcome{Class: job.ClassPermanent, Err: err.Error()}
	}
	// The review to post must be this job's parent, of its tenant and
	// region: the job posts with ratelane's GitHub token, so a forged one
	// must not carry another tenant's findings to a pull request.
	if args.Review != j.ParentID {
		return permanent("github job names a review other than its parent")
	}
	parent, o, ok := checkReview(ctx, g.Jobs, j, args.Review)
	if !ok {
		return o
	}
	res, err := decode[Result](parent.Result)
	if err != nil {
		return job.Outcome{Class: job.ClassPermanent, Err: "review has no result"}
	}
	rargs, _ := decode[Args](parent.Payload)
	pr := fmt.Sprintf("%s/repos/%s/%s/pulls/%d", g.base(), owner, repo, number)
	seen, o := g.existing(ctx, pr)
	if o.Class != "" {
		return o
	}
	comments := newComments(res.Findings, seen)
	var last job.Outcome
	for len(comments) > 0 {
		n := min(len(comments), MaxCommentsPerReview)
		body := ghReview{CommitID: rargs.HeadSHA, Event: "COMMENT", Comments: comments[:n],
			Body: fmt.Sprintf("ratelane review: %d finding(s)%s", n, partialNote(res))}
		if last = g.post(ctx, pr+"/reviews", body); last.Class != job.ClassSuccess {
			return last
		}
		comments = comments[n:]
	}
	return job.Outcome{Class: job.ClassSuccess, Hints: last.Hints}
}

func partialNote(r Result) string {
	if r.Partial {
		return fmt.Sprintf(" (partial: %d of %d parts failed)", r.Parts.Failed, r.Parts.Total)
	}
	return ""
}

func (g *GitHub) base() string {
	if g.BaseURL == "" {
		return "https://api.github.com"
	}
	return strings.TrimRight(g.BaseURL, "/")
}

// newComments builds the comments of findings not already posted.
func newComments(fs []finding.Finding, seen map[string]bool) []ghComment {
	var out []ghComment
	for _, f := range fs {
		fp := Fingerprint(f)
		if seen[fp] {
			continue
		}
		seen[fp] = true
		c := ghComment{Path: f.Path, Line: f.LastLine(), Side: "RIGHT", Body: commentBody(f, fp)}
		if f.EndLine != nil && *f.EndLine > f.Line {
			c.StartLine, c.StartSide = f.Line, "RIGHT"
		}
		out = append(out, c)
	}
	return out
}

func commentBody(f finding.Finding, fp string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s** (%s): %s", f.Severity, f.Category, f.Message)
	if f.Suggestion != nil && *f.Suggestion != "" {
		fmt.Fprintf(&b, "\n\nSuggestion: %s", *f.Suggestion)
	}
	fmt.Fprintf(&b, "\n\n<!-- ratelane:%s -->", fp)
	return b.String()
}

// existing lists the fingerprints already on the pull request.
func (g *GitHub) existing(ctx context.Context, pr string) (map[string]bool, job.Outcome) {
	seen := map[string]bool{}
	for page := 1; page <= 100; page++ {
		var comments []struct {
			Body string `json:"body"`
		}
		o := g.do(ctx, http.MethodGet, fmt.Sprintf("%s/comments?per_page=100&page=%d", pr, page), nil, &comments)
		if o.Class != job.ClassSuccess {
			return nil, o
		}
		for _, c := range comments {
			for _, m := range fingerprintRE.FindAllStringSubmatch(c.Body, -1) {
				seen[m[1]] = true
			}
		}
		if len(comments) < 100 {
			break
		}
	}
	return seen, job.Outcome{}
}

func (g *GitHub) post(ctx context.Context, url string, body ghReview) job.Outcome {
	b, err := json.Marshal(body)
	if err != nil {
		return job.Outcome{Class: job.ClassPermanent, Err: "review body is not JSON"}
	}
	return g.do(ctx, http.MethodPost, url, b, nil)
}

// do makes one request and classifies the answer; into receives a 2xx
// body.
func (g *GitHub) do(ctx context.Context, method, url string, body []byte, into any) job.Outcome {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return job.Outcome{Class: job.ClassPermanent, Err: "bad github URL"}
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if g.Token != "" {
		req.Header.Set("Authorization", "Bearer "+g.Token)
	}
	client := g.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return job.Outcome{Class: job.ClassTransient, Err: "github request failed"}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	o := ClassifyGitHub(resp.StatusCode, resp.Header, data, g.now())
	if o.Class == job.ClassSuccess && into != nil {
		if err := json.Unmarshal(data, into); err != nil {
			return job.Outcome{Class: job.ClassTransient, Status: resp.StatusCode, Err: "github answer does not decode"}
		}
	}
	return o
}

// ClassifyGitHub turns a GitHub REST answer into an outcome. GitHub signals
// its primary limit with 403 or 429 and x-ratelimit-remaining: 0 (wait
// until x-ratelimit-reset, a Unix time), and its secondary limits with 403
// or 429 and a Retry-After, or a "secondary rate limit" message (wait at
// least a minute, as GitHub documents). Other 4xx are permanent, 5xx
// transient. The quota headers become a hint for GitHubKey.
//
// now is the local time the answer arrived. x-ratelimit-reset and an
// HTTP-date Retry-After are instants on GitHub's clock, so they are
// measured from the answer's Date ([ratelimit.ServerNow]), not from now:
// with our clock 30 s behind GitHub's, a reset 10 s away is a 10 s wait,
// not 40. h must have canonical keys, as an http.Response's header has.
func ClassifyGitHub(status int, h http.Header, body []byte, now time.Time) job.Outcome {
	now = ratelimit.ServerNow(h, now)
	o := job.Outcome{Status: status, Hints: githubHints(h, now)}
	limited := status == http.StatusTooManyRequests ||
		(status == http.StatusForbidden && (h.Get("x-ratelimit-remaining") == "0" || h.Get("retry-after") != "" ||
			bytes.Contains(bytes.ToLower(body), []byte("rate limit"))))
	switch {
	case status >= 200 && status < 300:
		o.Class = job.ClassSuccess
	case limited:
		o.Class, o.Err = job.ClassRateLimited, "github rate limit"
		o.RetryAfter, o.RetrySource = githubDelay(h, now)
	case status >= 500:
		o.Class, o.Err = job.ClassTransient, "github server error"
	default:
		o.Class, o.Err = job.ClassPermanent, "github refused the request: "+http.StatusText(status)
	}
	return o
}

// githubDelay and githubHints take now on GitHub's clock (see
// ClassifyGitHub).
func githubDelay(h http.Header, now time.Time) (time.Duration, string) {
	if d, ok := ratelimit.ParseRetryAfter(h.Get("retry-after"), now); ok {
		return d, "retry-after"
	}
	if h.Get("x-ratelimit-remaining") == "0" {
		if reset, err := strconv.ParseInt(h.Get("x-ratelimit-reset"), 10, 64); err == nil {
			return max(0, time.Unix(reset, 0).Sub(now)), "x-ratelimit-reset"
		}
	}
	return time.Minute, "github secondary limit"
}

func githubHints(h http.Header, now time.Time) []job.Hint {
	limit, err1 := strconv.ParseInt(h.Get("x-ratelimit-limit"), 10, 64)
	remaining, err2 := strconv.ParseInt(h.Get("x-ratelimit-remaining"), 10, 64)
	if err1 != nil || err2 != nil {
		return nil
	}
	hint := job.Hint{Key: GitHubKey, Limit: limit, Remaining: remaining}
	if reset, err := strconv.ParseInt(h.Get("x-ratelimit-reset"), 10, 64); err == nil {
		hint.Reset = max(0, time.Unix(reset, 0).Sub(now))
	}
	return []job.Hint{hint}
}

// newID returns a UUIDv7 job id.
func newID() string {
	return uuid.Must(uuid.NewV7()).String()
}
