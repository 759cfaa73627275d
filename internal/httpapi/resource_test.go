package httpapi

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/review/batchapi"
	"github.com/ratelane/ratelane/internal/review/reviewapi"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/webhook"
	"github.com/ratelane/ratelane/internal/webhook/hookapi"
)

// faults makes named calls fail once each, as a row deleted or changed
// by another request between a handler's read and its write would: the
// only way most routes meet a store.ErrNotFound or store.ErrConflict
// after their lookup succeeded.
type faults struct {
	mu  sync.Mutex
	err map[string]error
}

func (f *faults) set(call string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = map[string]error{call: err}
}

// take returns the error call should fail with, once.
func (f *faults) take(call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.err[call]
	delete(f.err, call)
	return err
}

// faultStore is a real store whose guarded writes fail when f says so.
type faultStore struct {
	store.Store
	f *faults
}

func (s faultStore) Cancel(ctx context.Context, id string, now time.Time) (*job.Job, error) {
	if err := s.f.take("Cancel"); err != nil {
		return nil, err
	}
	return s.Store.Cancel(ctx, id, now)
}

func (s faultStore) Redrive(ctx context.Context, id string, now time.Time) (*job.Job, error) {
	if err := s.f.take("Redrive"); err != nil {
		return nil, err
	}
	return s.Store.Redrive(ctx, id, now)
}

func (s faultStore) Delete(ctx context.Context, id string) error {
	if err := s.f.take("Delete"); err != nil {
		return err
	}
	return s.Store.Delete(ctx, id)
}

func (s faultStore) UpdateSchedule(ctx context.Context, sc *store.Schedule) error {
	if err := s.f.take("UpdateSchedule"); err != nil {
		return err
	}
	return s.Store.UpdateSchedule(ctx, sc)
}

func (s faultStore) DeleteSchedule(ctx context.Context, id string) error {
	if err := s.f.take("DeleteSchedule"); err != nil {
		return err
	}
	return s.Store.DeleteSchedule(ctx, id)
}

func (s faultStore) UpsertLimit(ctx context.Context, c admission.Config, now time.Time) (admission.State, error) {
	if err := s.f.take("UpsertLimit"); err != nil {
		return admission.State{}, err
	}
	return s.Store.UpsertLimit(ctx, c, now)
}

// faultRegistry is a real webhook registry whose calls fail when f says so.
type faultRegistry struct {
	hookapi.Registry
	f *faults
}

func (r faultRegistry) RotateSecret(ctx context.Context, id string, window time.Duration) (webhook.Record, string, error) {
	if err := r.f.take("RotateSecret"); err != nil {
		return webhook.Record{}, "", err
	}
	return r.Registry.RotateSecret(ctx, id, window)
}

func (r faultRegistry) Delete(ctx context.Context, id string) error {
	if err := r.f.take("DeleteSubscriber"); err != nil {
		return err
	}
	return r.Registry.Delete(ctx, id)
}

func (r faultRegistry) SubscriberDeliveries(ctx context.Context, id, after string, limit int) ([]webhook.DeliveryInfo, error) {
	if err := r.f.take("SubscriberDeliveries"); err != nil {
		return nil, err
	}
	return r.Registry.SubscriberDeliveries(ctx, id, after, limit)
}

func (r faultRegistry) Redeliver(ctx context.Context, id string) (webhook.DeliveryInfo, error) {
	if err := r.f.take("Redeliver"); err != nil {
		return webhook.DeliveryInfo{}, err
	}
	return r.Registry.Redeliver(ctx, id)
}

// faultReviews and faultBatches are the fake review and batch services
// with calls that fail when f says so.
type faultReviews struct {
	*fakeReviews
	f *faults
}

func (s faultReviews) ReviewSARIF(ctx context.Context, region, id string, w io.Writer) error {
	if err := s.f.take("ReviewSARIF"); err != nil {
		return err
	}
	return s.fakeReviews.ReviewSARIF(ctx, region, id, w)
}

type faultBatches struct {
	*fakeBatches
	f *faults
}

func (s faultBatches) BatchItems(ctx context.Context, region, id string, p batchapi.ItemParams) ([]batchapi.Item, error) {
	if err := s.f.take("BatchItems"); err != nil {
		return nil, err
	}
	return s.fakeBatches.BatchItems(ctx, region, id, p)
}

func (s faultBatches) CancelBatch(ctx context.Context, region, id string) (batchapi.Batch, error) {
	if err := s.f.take("CancelBatch"); err != nil {
		return batchapi.Batch{}, err
	}
	return s.fakeBatches.CancelBatch(ctx, region, id)
}

// TestEveryRouteNamesItsResource provokes the 404 of every route that
// acts on one resource, and its 409 where one is reachable (some only
// through a write that loses a race, injected here), and checks that the
// problem's detail names the resource's kind and id and says what to do:
// the generic "the resource does not exist" and "the job is not in a
// state that allows this" named neither, and misled off the job routes.
func TestEveryRouteNamesItsResource(t *testing.T) {
	t.Parallel()
	f := &faults{}
	reviews := newFakeReviews("us", "eu")
	e := newEnv(t, func(c *Config) {
		for name, st := range c.Regions {
			c.Regions[name] = faultStore{Store: st, f: f}
		}
	}, withWebhooksVia(t, func(reg hookapi.Registry) hookapi.Registry { return faultRegistry{reg, f} }), func(c *Config) {
		c.Mounts = append(c.Mounts, reviewapi.Routes(faultReviews{reviews, f}), batchapi.Routes(faultBatches{newFakeBatches("us", "eu"), f}))
	})

	// One of each resource, acme's.
	running := e.createJob(acmeKey, jobBody("email.send", "us"))
	dead := e.createJob(acmeKey, jobBody("email.send", "us"))
	e.do("POST", "/v1/jobs/"+dead.ID+"/cancel", acmeKey, nil).want(t, 200)
	sc := e.createSchedule("us", "nightly-sweep")
	e.putSubscriber("acme_sub", map[string]any{"url": hookURL, "topics": []string{"t"}, "tenant": "acme"})
	ev := e.publish(acmeKey, map[string]any{"topic": "t", "id": "shp_1", "region": "us", "payload": map[string]int{"n": 1}})
	delivery := ev.Deliveries[0].ID
	rv := e.submitReview(acmeKey, reviewBody("us"))
	reviews.finish(rv.ID)
	var b batchapi.Batch
	e.do("POST", "/v1/batches", acmeKey, map[string]any{"region": "us", "provider": "openai",
		"reviews": []map[string]any{{"repo": "acme/app", "change": "1", "diff": testDiff}}}).want(t, 202).json(t, &b)
	token := map[string]any{"lease_token": "tok"}
	schedBody := map[string]any{"name": "nightly-sweep", "region": "us", "cron": "0 3 * * *", "job": map[string]any{"kind": "report.build", "limit_keys": []string{"reports"}}}

	cases := []struct {
		name, method, path, key string
		body                    any
		fail                    string // the call that fails, "" for none
		err                     error
		status                  int
		what                    string // the resource and id the detail names
		also                    string // and what else it says
	}{
		// Unknown ids: 404, worded so that another tenant's id reads alike.
		{"get job", "GET", "/v1/jobs/nope", acmeKey, nil, "", nil, 404, "job nope", "cannot see it"},
		{"cancel job", "POST", "/v1/jobs/nope/cancel", acmeKey, nil, "", nil, 404, "job nope", "cannot see it"},
		{"heartbeat", "POST", "/v1/jobs/nope/heartbeat", workerKey, token, "", nil, 404, "job nope", "cannot see it"},
		{"complete", "POST", "/v1/jobs/nope/complete", workerKey, token, "", nil, 404, "job nope", "cannot see it"},
		{"fail", "POST", "/v1/jobs/nope/fail", workerKey, map[string]any{"lease_token": "tok", "error": "x"}, "", nil, 404, "job nope", "cannot see it"},
		{"rate-limited", "POST", "/v1/jobs/nope/rate-limited", workerKey, token, "", nil, 404, "job nope", "cannot see it"},
		{"get limit", "GET", "/v1/limits/nope?region=us", adminKey, nil, "", nil, 404, "limit key nope", "cannot see it"},
		{"redrive", "POST", "/v1/dead-letters/nope/redrive", acmeKey, nil, "", nil, 404, "job nope", "cannot see it"},
		{"delete dead letter", "DELETE", "/v1/dead-letters/nope", acmeKey, nil, "", nil, 404, "job nope", "cannot see it"},
		{"revoke key", "DELETE", "/v1/keys/nope", adminKey, nil, "", nil, 404, "API key nope", "cannot see it"},
		{"get schedule", "GET", "/v1/schedules/nope", acmeKey, nil, "", nil, 404, "schedule nope", "cannot see it"},
		{"put schedule", "PUT", "/v1/schedules/nope", acmeKey, schedBody, "", nil, 404, "schedule nope", "cannot see it"},
		{"pause schedule", "POST", "/v1/schedules/nope/pause", acmeKey, nil, "", nil, 404, "schedule nope", "cannot see it"},
		{"resume schedule", "POST", "/v1/schedules/nope/resume", acmeKey, nil, "", nil, 404, "schedule nope", "cannot see it"},
		{"delete schedule", "DELETE", "/v1/schedules/nope", acmeKey, nil, "", nil, 404, "schedule nope", "cannot see it"},
		{"get subscriber", "GET", "/v1/subscribers/nope?region=us", adminKey, nil, "", nil, 404, "subscriber nope", "cannot see it"},
		{"rotate secret", "POST", "/v1/subscribers/nope/rotate-secret?region=us", adminKey, nil, "", nil, 404, "subscriber nope", "cannot see it"},
		{"delete subscriber", "DELETE", "/v1/subscribers/nope?region=us", adminKey, nil, "", nil, 404, "subscriber nope", "cannot see it"},
		{"event deliveries", "GET", "/v1/events/nope/deliveries?region=us", acmeKey, nil, "", nil, 404, "event nope", "cannot see it"},
		{"redeliver", "POST", "/v1/deliveries/nope/redeliver", acmeKey, nil, "", nil, 404, "nope", "cannot see it"},
		{"delivery response", "GET", "/v1/deliveries/nope/response", adminKey, nil, "", nil, 404, "nope", "cannot see it"},
		{"get review", "GET", "/v1/reviews/nope", acmeKey, nil, "", nil, 404, "review nope", "cannot see it"},
		{"review sarif", "GET", "/v1/reviews/nope/sarif", acmeKey, nil, "", nil, 404, "review nope", "cannot see it"},
		{"get batch", "GET", "/v1/batches/nope", acmeKey, nil, "", nil, 404, "batch nope", "cannot see it"},
		{"cancel batch", "POST", "/v1/batches/nope/cancel", acmeKey, nil, "", nil, 404, "batch nope", "cannot see it"},

		// Another tenant's resource reads exactly like a missing one.
		{"foreign job", "GET", "/v1/jobs/" + running.ID, globexKey, nil, "", nil, 404, "job " + running.ID, "cannot see it"},
		{"foreign schedule", "GET", "/v1/schedules/" + sc.ID, globexKey, nil, "", nil, 404, "schedule " + sc.ID, "cannot see it"},

		// 409s a handler answers from what it read.
		{"cancel a final job", "POST", "/v1/jobs/" + dead.ID + "/cancel", acmeKey, nil, "", nil, 409, "job " + dead.ID, "only a job that is not published or terminal"},
		{"redrive a live job", "POST", "/v1/dead-letters/" + running.ID + "/redrive", acmeKey, nil, "", nil, 409, "job " + running.ID, "only dead letters"},
		{"schedule name taken", "POST", "/v1/schedules", acmeKey, map[string]any{"name": "nightly-sweep", "region": "us", "cron": "* * * * *",
			"job": map[string]any{"kind": "report.build", "limit_keys": []string{"reports"}}}, "", nil, 409, `schedule named "nightly-sweep"`, "choose another name"},
		{"redeliver in progress", "POST", "/v1/deliveries/" + delivery + "/redeliver", acmeKey, nil, "", nil, 409, "delivery " + delivery, "only a published or terminal"},

		// A resource changed or deleted between the handler's read and
		// its write.
		{"cancel raced", "POST", "/v1/jobs/" + running.ID + "/cancel", acmeKey, nil, "Cancel", store.ErrConflict, 409, "job " + running.ID, "nothing was changed"},
		{"cancel of a deleted job", "POST", "/v1/jobs/" + running.ID + "/cancel", acmeKey, nil, "Cancel", store.ErrNotFound, 404, "job " + running.ID, "cannot see it"},
		{"redrive raced", "POST", "/v1/dead-letters/" + dead.ID + "/redrive", acmeKey, nil, "Redrive", store.ErrConflict, 409, "job " + dead.ID, "nothing was changed"},
		{"delete raced", "DELETE", "/v1/dead-letters/" + dead.ID, acmeKey, nil, "Delete", store.ErrNotFound, 404, "job " + dead.ID, "cannot see it"},
		{"put limit raced", "PUT", "/v1/limits/smtp:default?region=us", adminKey, map[string]any{"per_second": 5, "burst": 5}, "UpsertLimit", store.ErrConflict, 409, "limit key smtp:default", "nothing was changed"},
		{"put schedule deleted", "PUT", "/v1/schedules/" + sc.ID, acmeKey, schedBody, "UpdateSchedule", store.ErrNotFound, 404, "schedule " + sc.ID, "cannot see it"},
		{"pause schedule deleted", "POST", "/v1/schedules/" + sc.ID + "/pause", acmeKey, nil, "UpdateSchedule", store.ErrNotFound, 404, "schedule " + sc.ID, "cannot see it"},
		{"delete schedule deleted", "DELETE", "/v1/schedules/" + sc.ID, acmeKey, nil, "DeleteSchedule", store.ErrNotFound, 404, "schedule " + sc.ID, "cannot see it"},
		{"rotate raced", "POST", "/v1/subscribers/acme_sub/rotate-secret?region=us", adminKey, nil, "RotateSecret", store.ErrConflict, 409, "subscriber acme_sub", "nothing was changed"},
		{"delete subscriber raced", "DELETE", "/v1/subscribers/acme_sub?region=us", adminKey, nil, "DeleteSubscriber", store.ErrConflict, 409, "subscriber acme_sub", "nothing was changed"},
		{"subscriber deliveries deleted", "GET", "/v1/subscribers/acme_sub/deliveries?region=us", adminKey, nil, "SubscriberDeliveries", store.ErrNotFound, 404, "subscriber acme_sub", "cannot see it"},
		{"redeliver deleted", "POST", "/v1/deliveries/" + delivery + "/redeliver", acmeKey, nil, "Redeliver", store.ErrNotFound, 404, "delivery " + delivery, "cannot see it"},
		{"sarif deleted", "GET", "/v1/reviews/" + rv.ID + "/sarif", acmeKey, nil, "ReviewSARIF", store.ErrNotFound, 404, "review " + rv.ID, "cannot see it"},
		{"batch items deleted", "GET", "/v1/batches/" + b.ID, acmeKey, nil, "BatchItems", store.ErrNotFound, 404, "batch " + b.ID, "cannot see it"},
		{"cancel batch deleted", "POST", "/v1/batches/" + b.ID + "/cancel", acmeKey, nil, "CancelBatch", store.ErrNotFound, 404, "batch " + b.ID, "cannot see it"},
	}
	for _, c := range cases {
		f.set(c.fail, c.err)
		slug := map[int]string{404: "not-found", 409: "conflict"}[c.status]
		resp := e.do(c.method, c.path, c.key, c.body)
		if resp.status != c.status {
			t.Errorf("%s: %s %s: status %d, want %d: %s", c.name, c.method, c.path, resp.status, c.status, resp.body)
			continue
		}
		p := resp.wantProblem(t, c.status, slug)
		if !strings.Contains(p.Detail, c.what) || !strings.Contains(p.Detail, c.also) {
			t.Errorf("%s: %s %s: detail %q does not name %q or say %q", c.name, c.method, c.path, p.Detail, c.what, c.also)
		}
		if f.take(c.fail) != nil {
			t.Errorf("%s: %s was never called: the row tests nothing", c.name, c.fail)
		}
	}
}
