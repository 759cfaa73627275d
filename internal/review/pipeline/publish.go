package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/atomicfile"
	"github.com/ratelane/ratelane/internal/engine"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/report"
)

// GitHubKey is the limit key of GitHub publication jobs: GitHub's primary
// and secondary limits are per token, so one key paces them all.
const GitHubKey = "github:api"

// WebhookTopic is the topic of a review's webhook delivery.
const WebhookTopic = "review.completed"

// ReviewPublisher publishes a validated review where its Publish says:
// nowhere, an rdjsonl file, a webhook delivery job or a GitHub job. The
// webhook and GitHub deliveries are jobs of their own, so their upstream's
// 429s go through admission like any other; the publisher only enqueues
// them, with an idempotency key per review, which makes it idempotent.
type ReviewPublisher struct {
	// Region is the region whose reviews this publisher handles.
	Region string
	// Jobs is the region's writer of job state (the engine's), which
	// inserts the delivery jobs (required for webhook and github): a
	// plug-in never writes jobs through the store.
	Jobs *engine.Jobs
	// DefaultLimit configures delivery keys first seen.
	DefaultLimit admission.Config
	// RDJSONLDir is the directory rdjsonl targets are written to; empty
	// refuses rdjsonl, so an API caller cannot choose a path on the host.
	RDJSONLDir string
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Publish delivers j's result (a Result) as its Args.Publish says.
func (p *ReviewPublisher) Publish(ctx context.Context, j *job.Job) error {
	args, err := decode[Args](j.Payload)
	if err != nil {
		return fmt.Errorf("review payload: %w", err)
	}
	switch args.Publish.Kind {
	case PublishNone, "":
		return nil
	case PublishRDJSONL:
		return p.writeRDJSONL(j, args.Publish.Target)
	case PublishWebhook:
		return p.enqueueWebhook(ctx, j, args)
	case PublishGitHub:
		return p.enqueue(ctx, j, KindGitHub, []string{GitHubKey}, GitHubArgs{Review: j.ID, Target: githubTarget(args)})
	}
	return fmt.Errorf("unknown publish kind %q", args.Publish.Kind)
}

var _ engine.Deliverer = (*ReviewPublisher)(nil)

// Delivers reports whether publishing j has any effect: false for a
// review published nowhere (PublishNone), whose publication the engine
// then records without claiming it (engine.Deliverer), one store write
// fewer per such review. A payload that does not decode delivers, so that
// Publish reports it.
func (p *ReviewPublisher) Delivers(j *job.Job) bool {
	args, err := decode[Args](j.Payload)
	return err != nil || args.Publish.Kind != PublishNone && args.Publish.Kind != ""
}

// CheckPublish reports a publish request this publisher cannot honour, at
// submission time rather than after the review ran.
func (p *ReviewPublisher) CheckPublish(args Args) error {
	switch args.Publish.Kind {
	case PublishNone, "":
	case PublishRDJSONL:
		_, err := p.rdjsonlPath("", args.Publish.Target)
		return err
	case PublishWebhook:
		if args.Publish.Target == "" {
			return errors.New("publish.target must name a webhook subscriber")
		}
	case PublishGitHub:
		if _, _, _, err := ParsePullTarget(githubTarget(args)); err != nil {
			return err
		}
	default:
		return fmt.Errorf("publish.kind must be none, rdjsonl, webhook or github, not %q", args.Publish.Kind)
	}
	return nil
}

func githubTarget(a Args) string {
	if a.Publish.Target != "" {
		return a.Publish.Target
	}
	return a.Repo + "#" + a.Change
}

// rdjsonlPath is where tenant's rdjsonl target is written:
// RDJSONLDir/<tenant>/<target>. Each tenant has its own directory, so one
// tenant's review can never overwrite the file another tenant's review
// wrote under the same name.
func (p *ReviewPublisher) rdjsonlPath(tenant, target string) (string, error) {
	if p.RDJSONLDir == "" {
		return "", errors.New("rdjsonl publication is not configured on this server")
	}
	name := filepath.Clean(target)
	if target == "" || filepath.IsAbs(name) || name == "." || strings.HasPrefix(name, "..") {
		return "", errors.New("publish.target must be a relative file name inside the rdjsonl directory")
	}
	return filepath.Join(p.RDJSONLDir, tenantDir(tenant), name), nil
}

// tenantDir names a tenant's directory: the tenant path-escaped (no '/'),
// never "." or "..".
func tenantDir(tenant string) string {
	if tenant == "" {
		tenant = job.DefaultTenant
	}
	esc := url.PathEscape(tenant)
	if strings.Trim(esc, ".") == "" {
		esc = strings.ReplaceAll(esc, ".", "%2E")
	}
	return esc
}

// writeRDJSONL writes the findings atomically and durably (temp file,
// sync, rename, directory sync: internal/atomicfile), so a re-run after a
// crash replaces the file rather than appending to it, and a power loss
// after the publication is recorded cannot leave an empty file.
func (p *ReviewPublisher) writeRDJSONL(j *job.Job, target string) error {
	path, err := p.rdjsonlPath(j.Tenant, target)
	if err != nil {
		return err
	}
	res, err := decode[Result](j.Result)
	if err != nil {
		return fmt.Errorf("review result: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return atomicfile.Write(path, 0o600, func(w io.Writer) error {
		return report.WriteRDJSONL(w, res.Findings)
	})
}

// WebhookBody is the body of a review's webhook delivery.
type WebhookBody struct {
	ReviewID string `json:"review_id"`
	Region   string `json:"region"`
	Repo     string `json:"repo,omitempty"`
	Change   string `json:"change,omitempty"`
	HeadSHA  string `json:"head_sha,omitempty"`
	Result
}

func (p *ReviewPublisher) enqueueWebhook(ctx context.Context, j *job.Job, args Args) error {
	res, err := decode[Result](j.Result)
	if err != nil {
		return fmt.Errorf("review result: %w", err)
	}
	body, err := json.Marshal(WebhookBody{ReviewID: j.ID, Region: j.Region, Repo: args.Repo, Change: args.Change, HeadSHA: args.HeadSHA, Result: res})
	if err != nil {
		return err
	}
	// The payload shape is webhook.Payload's; it is spelled out here so
	// that the review pipeline does not depend on the delivery package.
	payload := map[string]any{"subscriber_id": args.Publish.Target, "event_id": "review-" + j.ID,
		"topic": WebhookTopic, "version": 1, "body": json.RawMessage(body)}
	return p.enqueue(ctx, j, "webhook", []string{"subscriber:" + args.Publish.Target}, payload)
}

// enqueue inserts one delivery job for review j, once: the idempotency key
// is derived from the review id.
func (p *ReviewPublisher) enqueue(ctx context.Context, j *job.Job, kind string, keys []string, args any) error {
	if p.Jobs == nil {
		return errors.New("no job writer (engine.Jobs) configured for review delivery")
	}
	payload, err := json.Marshal(args)
	if err != nil {
		return err
	}
	d := &job.Job{Kind: kind, Region: j.Region, Lane: j.Lane, Tenant: j.Tenant, LimitKeys: keys,
		Payload: payload, IdempotencyKey: "review-publish:" + j.ID, ParentID: j.ID}
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	d.Prepare(newID(), now, 0, false)
	if err := d.Validate(nil); err != nil {
		return err
	}
	_, err = p.Jobs.Insert(ctx, []*job.Job{d}, p.DefaultLimit)
	return err
}
