package ratelane_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/ratelane/ratelane"
	"github.com/ratelane/ratelane/internal/job"
)

// TestInsertCostRefusalSameOnBothDrivers: the store checks an insert's
// costs inside its own write (store.WithCostCheck; on PostgreSQL in SQL,
// in the insert's transaction), and the caller sees exactly what the check
// before the insert gave it: the same validation error, word for word, on
// SQLite and on PostgreSQL, for InsertMany, InsertParts and a key the
// insert would create with DefaultLimit; nothing of a refused call is
// stored; admissible costs go in.
func TestInsertCostRefusalSameOnBothDrivers(t *testing.T) {
	msgs := map[string][]string{}
	onEachDriver(t, "cost_", func(t *testing.T, region ratelane.Region) {
		msgs[filepath.Base(t.Name())] = testInsertCostRefusal(t, region) // the subtest is named for its driver
	})
	a, b := msgs["sqlite"], msgs["postgres"]
	if len(a) == 0 || len(b) == 0 {
		return // a driver was skipped or failed
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("refusal %d: SQLite said %q, PostgreSQL %q", i, a[i], b[i])
		}
	}
}

func testInsertCostRefusal(t *testing.T, region ratelane.Region) []string {
	ctx := context.Background()
	c := costClient(t, ratelane.Config{Regions: []ratelane.Region{region}, DataDir: t.TempDir(), Logger: quiet(),
		DefaultLimit: ratelane.Limit{Rate: 1, Burst: 30}})
	p := func(cost int64, keys ...string) ratelane.InsertParams {
		return ratelane.InsertParams{Kind: "llm", Region: "us", LimitKeys: keys, Cost: cost}
	}
	var msgs []string
	refused := func(what string, err error) {
		t.Helper()
		var ve *job.ValidationError
		if !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != "cost" {
			t.Fatalf("%s: %v, want a validation error naming cost", what, err)
		}
		msgs = append(msgs, err.Error())
	}
	_, err := c.InsertMany(ctx, []ratelane.InsertParams{p(20, "tpm"), p(21, "partner", "tpm")})
	refused("cost 21 on a window of 20", err)
	_, err = c.Insert(ctx, p(5001, "tpm"))
	refused("cost 5001 on a burst of 5000", err)
	_, err = c.Insert(ctx, p(31, "fresh"))
	refused("cost 31 on a key DefaultLimit creates with burst 30", err)
	_, err = c.InsertParts(ctx, ratelane.InsertParams{Kind: "whole", Region: "us"}, []ratelane.InsertParams{p(20, "partner"), p(21, "partner")})
	refused("a part of cost 21 on a window of 20", err)
	jobs, err := c.List(ctx, "us", ratelane.ListParams{})
	if err != nil || len(jobs) != 0 {
		t.Fatalf("refused calls stored %d jobs (%v)", len(jobs), err)
	}
	if _, err := c.InsertMany(ctx, []ratelane.InsertParams{p(20, "partner", "tpm"), p(30, "fresh")}); err != nil {
		t.Fatalf("admissible costs: %v", err)
	}
	return msgs
}
