package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/ratelane/ratelane/internal/review/batchapi"
	"github.com/ratelane/ratelane/internal/review/reviewapi"
	"github.com/ratelane/ratelane/internal/store"
)

// fakeBatches is an in-memory batchapi.Service for the regions in
// configured: a submitted batch stays running with every item pending
// until cancelled.
type fakeBatches struct {
	mu         sync.Mutex
	configured map[string]bool
	batches    map[string]*batchapi.Batch
	items      map[string][]batchapi.Item
	n          int
}

func newFakeBatches(regions ...string) *fakeBatches {
	f := &fakeBatches{configured: map[string]bool{}, batches: map[string]*batchapi.Batch{}, items: map[string][]batchapi.Item{}}
	for _, r := range regions {
		f.configured[r] = true
	}
	return f
}

func (f *fakeBatches) check(region string) error {
	if !f.configured[region] {
		return fmt.Errorf("ratelane: %w: %q", reviewapi.ErrNotConfigured, region)
	}
	return nil
}

func (f *fakeBatches) SubmitBatch(_ context.Context, sub batchapi.Submission) (batchapi.Batch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(sub.Region); err != nil {
		return batchapi.Batch{}, err
	}
	if sub.Provider == "rules" {
		return batchapi.Batch{}, &reviewapi.InputError{Field: "provider", Err: fmt.Errorf("profile rules has no batch API")}
	}
	f.n++
	id := fmt.Sprintf("bt-%03d", f.n)
	b := &batchapi.Batch{ID: id, Region: sub.Region, Tenant: sub.Tenant, Provider: "openai", State: store.BatchRunning,
		Deadline: t0.Add(48 * 3600e9), CreatedAt: t0, UpdatedAt: t0}
	for i, r := range sub.Reviews {
		if !bytes.HasPrefix(r.Diff, []byte("diff --git ")) {
			return batchapi.Batch{}, &reviewapi.InputError{Field: fmt.Sprintf("reviews[%d].diff", i), Err: fmt.Errorf("no file diff in the input")}
		}
		f.items[id] = append(f.items[id], batchapi.Item{CustomID: fmt.Sprintf("r%d-p0", i), Review: fmt.Sprintf("rv-%d", i), State: store.ItemPending})
		b.Counts.Add(store.ItemPending, 1)
	}
	b.Summary.Reviews, b.Summary.Items = len(sub.Reviews), len(sub.Reviews)
	f.batches[id] = b
	return *b, nil
}

func (f *fakeBatches) Batch(_ context.Context, region, id string) (batchapi.Batch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(region); err != nil {
		return batchapi.Batch{}, err
	}
	b, ok := f.batches[id]
	if !ok || b.Region != region {
		return batchapi.Batch{}, store.ErrNotFound
	}
	return *b, nil
}

func (f *fakeBatches) BatchItems(_ context.Context, region, id string, p batchapi.ItemParams) ([]batchapi.Item, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []batchapi.Item
	for _, it := range f.items[id] {
		if it.CustomID > p.After && (p.State == "" || it.State == p.State) && len(out) < p.Limit {
			out = append(out, it)
		}
	}
	return out, nil
}

func (f *fakeBatches) ListBatches(_ context.Context, region string, p batchapi.ListParams) ([]batchapi.Batch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(region); err != nil {
		return nil, err
	}
	var out []batchapi.Batch
	for n := f.n; n > 0 && len(out) < p.Limit; n-- {
		b := f.batches[fmt.Sprintf("bt-%03d", n)]
		if b.Region == region && (p.Tenant == "" || b.Tenant == p.Tenant) && (p.Before == "" || b.ID < p.Before) && (p.State == "" || b.State == p.State) {
			out = append(out, *b)
		}
	}
	return out, nil
}

func (f *fakeBatches) CancelBatch(_ context.Context, region, id string) (batchapi.Batch, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.batches[id]
	if !ok || b.Region != region {
		return batchapi.Batch{}, store.ErrNotFound
	}
	if b.State == store.BatchDone {
		return batchapi.Batch{}, fmt.Errorf("%w: batch %s is done", batchapi.ErrConflict, id)
	}
	b.State = store.BatchDone
	b.Counts = store.BatchCounts{Total: b.Counts.Total, Canceled: b.Counts.Total}
	return *b, nil
}
