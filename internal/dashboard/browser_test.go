package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ratelane/ratelane/internal/testkit"
)

// artifactDir is where the browser test saves its screenshots:
// $RATELANE_ARTIFACTS/dashboard, else testdata/out (git-ignored).
func artifactDir(t *testing.T) string {
	dir := filepath.Join("testdata", "out")
	if a := os.Getenv("RATELANE_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "dashboard")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// chromium finds the browser: $RATELANE_CHROMIUM, else Debian's chromium.
// Under CI=true a missing browser fails the test rather than skipping it.
func chromium(t *testing.T) string {
	for _, p := range []string{os.Getenv("RATELANE_CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install chromium); the dashboard's browser test must run in CI")
	}
	t.Skip("chromium is not installed; apt-get install chromium to run the dashboard's browser test")
	return ""
}

// TestDashboardInBrowser drives the dashboard in headless Chromium against
// a real server and store: sign in; the pages get live data over the
// server-sent event stream (not polling); an external worker's 429 pauses
// a key and the overview counts it down live, with the region and lane's
// real start and 429 counts; the limit key page counts the key's admitted
// starts; the jobs page filters by state and kind; a job's page says what
// it waits for; another job's page follows it from waiting to running to
// terminal without a reload; a dead letter is redriven through the
// two-step confirmation and moves back to waiting; a subscriber's secret
// is rotated; a review is listed with its counts (from the list, no GET a
// row), a state filter hides it, and its findings open from its row.
func TestDashboardInBrowser(t *testing.T) {
	exe := chromium(t)
	if testing.Short() {
		t.Skip("starts a browser")
	}
	s := newStack(t, false)
	out := artifactDir(t)

	br, err := launch(t, exe, t.TempDir, launchTimeout, launchAttempts, chromedp.WindowSize(1360, 900),
		chromedp.Flag("headless", true), chromedp.Flag("no-sandbox", true), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true), chromedp.Flag("mute-audio", true))
	if err != nil {
		t.Fatal(err)
	}
	defer br.close()
	// The steps' bound starts once the browser is up: a slow launch does
	// not eat into it.
	ctx, cancel := context.WithTimeout(br.Ctx, 2*time.Minute)
	defer cancel()
	run := func(step string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var png []byte
			if err := chromedp.FullScreenshot(&png, 100).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(out, name), png, 0o644)
		})
	}

	// Work for the pages: three emails on one paced key, one report of
	// another tenant, one charge that fails.
	s.call("PUT", "/v1/limits/smtp:acme?region=us", adminKey, map[string]any{"per_second": 2, "burst": 2, "concurrency": 4}, 200, nil)
	for range 3 {
		s.enqueue(s.acme, "email.send", "smtp:acme")
	}
	s.enqueue(s.globex, "report.build", "reports")
	charge := s.enqueue(s.acme, "charge.card", "payments")

	run("sign in",
		chromedp.Navigate(s.url+"/ui/login"),
		chromedp.WaitVisible("#key", chromedp.ByID),
		chromedp.SendKeys("#key", adminKey, chromedp.ByID),
		chromedp.Click("#signin", chromedp.ByID),
		chromedp.WaitVisible("#queues table", chromedp.ByQuery))

	// An external worker meets a 429 with Retry-After 90 on smtp:acme.
	leased := s.lease("email.send", 1)
	s.call("POST", "/v1/jobs/"+leased[0].ID+"/rate-limited", adminKey,
		map[string]any{"lease_token": leased[0].LeaseToken, "headers": map[string]string{"Retry-After": "90"}}, 200, nil)

	var first, second string
	run("paused key counts down on the overview",
		chromedp.WaitVisible(".paused-key .countdown", chromedp.ByQuery),
		chromedp.Text(".paused-key", &first, chromedp.ByQuery),
		chromedp.Sleep(1200*time.Millisecond), // the countdown must move on its own, without a reload
		chromedp.Text(".paused-key .countdown", &second, chromedp.ByQuery))
	if !strings.Contains(first, "smtp:acme") {
		t.Fatalf("paused row %q does not name smtp:acme", first)
	}
	a, b := seconds(t, first), seconds(t, second)
	if a < 80 || a > 90 || b >= a {
		t.Fatalf("countdown %v then %v: want about 90 s, falling", a, b)
	}
	var transport string
	var counted []float64
	lane := `.lane-row[data-lane="us/` + leased[0].Lane + `"]`
	run("the region and lane's real counts, live over SSE",
		chromedp.WaitVisible("#rate-line", chromedp.ByID),
		chromedp.Poll(`document.querySelector('`+lane+` .limited-rate').dataset.total === "1"`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Evaluate(`[+document.querySelector('`+lane+` .starts-rate').dataset.total, +document.querySelector('`+lane+` .limited-rate').dataset.total]`, &counted),
		chromedp.Evaluate(`document.body.dataset.live`, &transport),
		chromedp.Sleep(2500*time.Millisecond), shot("overview.png"))
	if transport != "sse" {
		t.Fatalf("overview live transport %q, want sse", transport)
	}
	if counted[0] != 1 || counted[1] != 1 {
		t.Fatalf("us/%s starts and 429s %v, want the one lease and its 429", leased[0].Lane, counted)
	}

	var admitted string
	run("limit keys page", chromedp.Navigate(s.url+"/ui/limits"),
		chromedp.WaitVisible(`tr[data-key="smtp:acme"] .countdown`, chromedp.ByQuery),
		chromedp.AttributeValue(`tr[data-key="smtp:acme"] .admitted`, "data-cost", &admitted, nil, chromedp.ByQuery),
		chromedp.Sleep(2500*time.Millisecond), shot("limits.png"))
	if admitted != "1" {
		t.Fatalf("smtp:acme admitted cost on the page %q, want 1 (the one lease)", admitted)
	}

	// Filter jobs: retry_scheduled shows exactly the rate-limited one.
	var rows []string
	run("filter jobs by state",
		chromedp.Navigate(s.url+"/ui/jobs"),
		chromedp.WaitVisible("#jobs table", chromedp.ByQuery),
		setField("state", "retry_scheduled"),
		chromedp.Click("#filters button", chromedp.ByQuery),
		chromedp.Poll(`[...document.querySelectorAll(".job-row")].every(r => r.dataset.state === "retry_scheduled") && document.querySelectorAll(".job-row").length === 1`, nil),
		chromedp.Evaluate(`[...document.querySelectorAll(".job-row")].map(r => r.innerText)`, &rows))
	if len(rows) != 1 || !strings.Contains(rows[0], "email.send") {
		t.Fatalf("retry_scheduled filter rows %q", rows)
	}
	run("filter jobs by kind and tenant",
		setField("state", ""),
		setField("kind", "report.build"),
		chromedp.Click("#filters button", chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll(".job-row").length === 1 && document.querySelector(".job-row").innerText.includes("globex")`, nil),
		setField("kind", ""),
		chromedp.Click("#filters button", chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll(".job-row").length === 5`, nil),
		shot("jobs.png"))

	// A waiting email says the paused key holds it.
	var waitText string
	run("job detail says what it waits for",
		chromedp.Evaluate(`[...document.querySelectorAll('.job-row[data-state="waiting"]')].find(r => r.innerText.includes("email.send")).querySelector("a").click()`, nil),
		chromedp.WaitVisible("#waiting-for", chromedp.ByID),
		chromedp.Text("#waiting-for", &waitText, chromedp.ByID),
		shot("job.png"))
	if !strings.Contains(waitText, "paused") || !strings.Contains(waitText, "smtp:acme") {
		t.Fatalf("waiting_for on the page: %q", waitText)
	}

	// The charge's page follows it, without a reload, as a worker leases
	// it (running) and it fails permanently (terminal): a dead letter.
	view := `#job-view[data-state="%s"]`
	run("the charge's page while it waits",
		chromedp.Navigate(s.url+"/ui/job?id="+charge.ID+"&region=us"),
		chromedp.WaitVisible(fmt.Sprintf(view, "waiting"), chromedp.ByQuery),
		chromedp.Evaluate(`window.notReloaded = true`, nil))
	got := s.lease("charge.card", 1)
	if len(got) != 1 || got[0].ID != charge.ID {
		t.Fatalf("leased %+v, want the charge", got)
	}
	run("the charge's page shows it running", chromedp.WaitVisible(fmt.Sprintf(view, "running"), chromedp.ByQuery))
	s.call("POST", "/v1/jobs/"+charge.ID+"/fail", adminKey, map[string]any{"lease_token": got[0].LeaseToken, "retryable": false, "error": "card declined", "status": 402}, 200, nil)
	var stayed bool
	run("the charge's page shows it terminal",
		chromedp.WaitVisible(fmt.Sprintf(view, "terminal"), chromedp.ByQuery),
		chromedp.Evaluate(`window.notReloaded === true && document.body.dataset.live === "sse"`, &stayed))
	if !stayed {
		t.Fatal("the job page reloaded or polled to follow the job; want the event stream")
	}
	row := `tr.dead-row[data-id="` + charge.ID + `"]`
	var moved string
	run("redrive a dead letter",
		chromedp.Navigate(s.url+"/ui/dead-letters"),
		chromedp.WaitVisible(row, chromedp.ByQuery),
		chromedp.Click(row+" button.redrive", chromedp.ByQuery),
		chromedp.WaitVisible(row+" button.redrive.armed", chromedp.ByQuery),
		chromedp.Sleep(2500*time.Millisecond), // a refresh of the table keeps the confirmation armed
		chromedp.WaitVisible(row+" button.redrive.armed", chromedp.ByQuery),
		shot("dead-letters.png"),
		chromedp.Click(row+" button.redrive", chromedp.ByQuery),
		chromedp.WaitVisible("#moved", chromedp.ByID),
		chromedp.Text("#moved", &moved, chromedp.ByID),
		chromedp.WaitNotPresent(row, chromedp.ByQuery))
	if !strings.Contains(moved, "waiting") {
		t.Fatalf("after redrive the page says %q", moved)
	}
	var after job
	s.call("GET", "/v1/jobs/"+charge.ID, adminKey, nil, 200, &after)
	if after.State != "waiting" {
		t.Fatalf("redriven job is %s, want waiting", after.State)
	}

	// Subscribers: rotate a secret through the confirmation; it is shown once.
	s.call("PUT", "/v1/subscribers/store_17?region=us", adminKey, map[string]any{"url": "https://hooks.example.com/ratelane",
		"topics": []string{"shipment.updated"}, "rate": map[string]any{"limit": 5, "period": "1s", "burst": 2}}, 200, nil)
	// The admin key's event reaches the admin key's subscriber: both are of
	// its own tenant, as neither names one.
	var pub struct {
		Created int `json:"created"`
	}
	s.call("POST", "/v1/events", adminKey, map[string]any{"topic": "shipment.updated", "id": "shp_1", "region": "us",
		"payload": map[string]any{"status": "in_transit"}}, 202, &pub)
	if pub.Created != 1 {
		t.Fatalf("the admin's event created %d deliveries, want 1", pub.Created)
	}
	var delivery string
	run("a subscriber's recent deliveries",
		chromedp.Navigate(s.url+"/ui/subscribers"),
		chromedp.WaitVisible(`button.deliveries`, chromedp.ByQuery),
		chromedp.Click(`button.deliveries`, chromedp.ByQuery),
		chromedp.WaitVisible(`#secret .delivery-row`, chromedp.ByQuery),
		chromedp.Text(`#secret .delivery-row`, &delivery, chromedp.ByQuery))
	if !strings.Contains(delivery, "shp_1 v0") {
		t.Fatalf("delivery row %q", delivery)
	}
	var secret string
	run("rotate a subscriber's secret",
		chromedp.Navigate(s.url+"/ui/subscribers"),
		chromedp.WaitVisible(`button.rotate`, chromedp.ByQuery),
		chromedp.Click(`button.rotate`, chromedp.ByQuery),
		chromedp.WaitVisible(`button.rotate.armed`, chromedp.ByQuery),
		chromedp.Click(`button.rotate`, chromedp.ByQuery),
		chromedp.WaitVisible(`#secret code`, chromedp.ByQuery),
		chromedp.Text(`#secret code`, &secret, chromedp.ByQuery),
		shot("subscribers.png"))
	if len(secret) < 16 {
		t.Fatalf("rotated secret shown as %q", secret)
	}

	// Reviews: the rules reviewer finds the AWS key id in a diff.
	var rv struct {
		ID string `json:"id"`
	}
	s.call("POST", "/v1/reviews", s.acme, map[string]any{"region": "us", "repo": "acme/app", "change": "7", "diff": testkit.AWSKeyDiff,
		"depth": "full", "lane": "interactive", "provider": "rules", "publish": map[string]any{"kind": "none"}}, 202, &rv)
	// It is listed with its parts done and findings counted, a state filter
	// that excludes it hides it, and its detail opens from its row.
	rrow := `tr.review-row[data-id="` + rv.ID + `"]`
	var listed, findings string
	var detailGets int
	run("a review in the list, its detail from it",
		chromedp.Navigate(s.url+"/ui/reviews"),
		chromedp.Poll(`(() => { const r = document.querySelector('`+rrow+`'); return r !== null && r.dataset.state !== "accepted" && Number(r.querySelector("td.findings").textContent) > 0; })()`,
			nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Text(rrow, &listed, chromedp.ByQuery),
		// The counts came with the list: the page asked for no review's detail.
		chromedp.Evaluate(`performance.getEntriesByType("resource").filter((e) => new URL(e.name).pathname.startsWith("/v1/reviews/")).length`, &detailGets),
		shot("reviews-list.png"),
		chromedp.SetValue(`#review-filters select[name="state"]`, "terminal", chromedp.ByQuery),
		chromedp.Click(`#review-filters button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#reviews p.empty`, chromedp.ByQuery),
		chromedp.SetValue(`#review-filters select[name="state"]`, "", chromedp.ByQuery),
		chromedp.Click(`#review-filters button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(rrow+` a.review-link`, chromedp.ByQuery),
		chromedp.Click(rrow+` a.review-link`, chromedp.ByQuery),
		chromedp.WaitVisible(`#review-view`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#review-view table tbody tr") !== null`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Text("#review-view", &findings, chromedp.ByID),
		shot("reviews.png"))
	if !strings.Contains(listed, "acme/app #7") || !strings.Contains(listed, "1 / 1") {
		t.Fatalf("review row: %q", listed)
	}
	if detailGets != 0 {
		t.Fatalf("the reviews list made %d GET /v1/reviews/{id} requests; its rows' counts come with the list", detailGets)
	}
	if !strings.Contains(findings, "config.go:4") || !strings.Contains(findings, rv.ID) {
		t.Fatalf("review page opened from the list: %q", findings)
	}
	// Paging: with one review a page, the newer review comes first and the
	// next page (the API's cursor) holds the first one.
	var rv2 struct {
		ID string `json:"id"`
	}
	s.call("POST", "/v1/reviews", s.acme, map[string]any{"region": "us", "repo": "acme/app", "change": "8", "diff": testkit.AWSKeyDiff,
		"depth": "full", "lane": "interactive", "provider": "rules", "publish": map[string]any{"kind": "none"}}, 202, &rv2)
	var firstPage, secondPage int
	run("page through the reviews",
		chromedp.Navigate(s.url+"/ui/reviews?limit=1"),
		chromedp.WaitVisible(`tr.review-row[data-id="`+rv2.ID+`"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("tr.review-row").length`, &firstPage),
		chromedp.Click(`button.next-page`, chromedp.ByQuery),
		chromedp.WaitVisible(rrow, chromedp.ByQuery),
		chromedp.WaitVisible(`button.first-page`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("tr.review-row").length`, &secondPage))
	if firstPage != 1 || secondPage != 1 {
		t.Fatalf("review pages of 1 held %d and %d rows", firstPage, secondPage)
	}
	// Schedules: acme's schedule is listed (its next tick counts down) and
	// pauses from the page.
	var sc struct {
		ID string `json:"id"`
	}
	s.call("POST", "/v1/schedules", s.acme, map[string]any{"name": "nightly-report", "region": "us", "cron": "30 2 * * *",
		"timezone": "Europe/Berlin", "missed": "catch_up", "job": map[string]any{"kind": "report.build", "limit_keys": []string{"reports"}}}, 201, &sc)
	srow := `tr.schedule-row[data-id="` + sc.ID + `"]`
	var schedText string
	run("pause a schedule",
		chromedp.Navigate(s.url+"/ui/schedules"),
		chromedp.WaitVisible(srow+` button.pause`, chromedp.ByQuery),
		chromedp.Text(srow, &schedText, chromedp.ByQuery),
		chromedp.Click(srow+` button.pause`, chromedp.ByQuery),
		chromedp.WaitVisible(srow+`[data-paused="true"] button.resume`, chromedp.ByQuery),
		shot("schedules.png"))
	if !strings.Contains(schedText, "30 2 * * * (Europe/Berlin)") || !strings.Contains(schedText, "report.build") {
		t.Fatalf("schedule row: %q", schedText)
	}
	var paused struct {
		Paused bool `json:"paused"`
	}
	s.call("GET", "/v1/schedules/"+sc.ID, s.acme, nil, 200, &paused)
	if !paused.Paused {
		t.Fatal("the page's Pause did not pause the schedule")
	}
	t.Logf("screenshots in %s", out)
}

// setField sets a filter form field by name.
func setField(name, value string) chromedp.Action {
	return chromedp.Evaluate(`document.querySelector('#filters [name="`+name+`"]').value = "`+value+`"`, nil)
}

// seconds reads the "12.3 s" of a countdown.
func seconds(t *testing.T, text string) float64 {
	t.Helper()
	for _, f := range strings.Fields(text) {
		if v, err := strconv.ParseFloat(f, 64); err == nil && strings.Contains(text, f+" s") {
			return v
		}
	}
	t.Fatalf("no countdown in %q", text)
	return 0
}
