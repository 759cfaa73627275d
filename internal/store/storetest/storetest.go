// Package storetest is the conformance suite every store driver runs. A
// store change without a change here is incomplete: each behaviour the
// engine relies on (guarded transitions, atomic multi-key admission,
// pacing, pauses, fairness, idempotency) is pinned by a test below, on
// every driver.
package storetest

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"

	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// Opener returns a fresh, empty, migrated store for one test; the store is
// closed and removed by the opener's own t.Cleanup.
type Opener func(t *testing.T) store.Store

// T0 is the suite's fixed clock origin. Stores never read the wall clock for
// decisions, so every test drives time explicitly from here.
var T0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// Unpaced is the default configuration the suite gives unknown keys.
var Unpaced = admission.Config{}

// optional returns s as the optional store interface C (store.LeaseProber,
// store.FinishLeaser, ...), or skips t when the driver does not implement
// it: a driver without the capability has nothing to test there.
func optional[C any](t *testing.T, s store.Store) C {
	t.Helper()
	c, ok := s.(C)
	if !ok {
		t.Skipf("the driver is no %v", reflect.TypeFor[C]())
	}
	return c
}

// Run runs the whole conformance suite against the driver.
func Run(t *testing.T, open Opener) {
	tests := map[string]func(*testing.T, Opener){
		"InsertGet":             testInsertGet,
		"IdempotentInsert":      testIdempotentInsert,
		"ConcurrentIdempotency": testConcurrentIdempotency,
		"LeaseBasics":           testLeaseBasics,
		"LeaseReturnsStored":    testLeaseReturnsStored,
		"LeaseRespectsEligible": testLeaseRespectsEligible,
		"GuardedFinish":         testGuardedFinish,
		"FinishBatch":           testFinishBatch,
		"FinishRunOneLost":      testFinishLeaseCallOneLost,
		"SuccessHistory":        testSuccessHistory,
		"PublishOnce":           testPublishOnce,
		"PublishClaim":          testPublishClaim,
		"TokenBucketPacing":     testTokenBucketPacing,
		"NextAdmission":         testNextAdmission,
		"MayLease":              testMayLease,
		"ReconfigureRepaysDebt": testReconfigureRepaysDebt,
		"ShapesBoundStarts":     testShapesBoundStarts,
		"PauseToTheNanosecond":  testPauseToTheNanosecond,
		"ConcurrencyCap":        testConcurrencyCap,
		"CapFreedByFinish":      testCapFreedByFinish,
		"FinishLeaseIfReleased": testFinishLeaseIfReleased,
		"FinishLeaseWithNoTurn": testFinishLeaseWithNoTurn,
		"CapOnUnpacedKey":       testCapOnUnpacedKey,
		"AllKeysAdmit":          testAllKeysAdmit,
		"PauseIsShared":         testPauseIsShared,
		"RetryScheduled":        testRetryScheduled,
		"ExpiredLease":          testExpiredLease,
		"RescueVsCompletion":    testRescueVsCompletion,
		"RescueVsRelease":       testRescueVsRelease,
		"RescueVsHeartbeat":     testRescueVsHeartbeat,
		"RescueHorizon":         testRescueHorizon,
		"RescueOnce":            testRescueOnce,
		"GuardOnAttempt":        testGuardOnAttempt,
		"InteractiveFirst":      testInteractiveFirst,
		"BatchMinShare":         testBatchMinShare,
		"BatchMax":              testBatchMax,
		"BatchMaxKinds":         testBatchMaxKinds,
		"TenantFairness":        testTenantFairness,
		"FairnessOnPacedKey":    testFairnessOnPacedKey,
		"KindsFilter":           testKindsFilter,
		"CancelRedriveDelete":   testCancelRedriveDelete,
		"Deadlines":             testDeadlines,
		"Prune":                 testPrune,
		"PrunedGroupTakesJobs":  testPrunedGroupTakesJobs,
		"Limits":                testLimits,
		"LimitConfigs":          testLimitConfigs,
		"StatsAndBacklog":       testStatsAndBacklog,
		"PerStartKey":           testPerStartKey,
		"List":                  testList,
		"ListByKeyGroups":       testListByKeyGroups,
		"ListByKeyStates":       testListByKeyStates,
		"ListByKeyInterleaved":  testListByKeyInterleaved,
		"ListByTenantStates":    testListByTenantStates,
		"AdaptiveKey":           testAdaptiveKey,
		"LearnedConcurrency":    testLearnedConcurrency,
		"StrictCounting":        testStrictCounting,
		"EvenPacing":            testEvenPacing,
		"AnnouncedCredit":       testAnnouncedCredit,
		"PacedRetry":            testPacedRetry,
		"PacedFault":            testPacedFault,
		"FinishMixedPacing":     testFinishMixedPacing,
		"EngineLeaseAdmits":     testEngineLeaseAdmits,
		"Objects":               testObjects,
		"GetObjects":            testGetObjects,
		"Advance":               testAdvance,
		"PartsParent":           testPartsParent,
	}
	maps.Copy(tests, contractCases)
	maps.Copy(tests, scheduleCases)
	maps.Copy(tests, batchCases)
	maps.Copy(tests, insertCases)
	maps.Copy(tests, historyCases)
	maps.Copy(tests, insertLeaseCases)
	maps.Copy(tests, costCheckCases)
	maps.Copy(tests, batchSettleCases)
	maps.Copy(tests, flightCases)
	maps.Copy(tests, parentCases)
	maps.Copy(tests, policyCases)
	maps.Copy(tests, laneCases)
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, open)
		})
	}
}

// NewJob returns a waiting job ready to insert, eligible at T0.
func NewJob(tenant string, lane job.Lane, keys ...string) *job.Job {
	id, _ := uuid.NewV7()
	return &job.Job{
		ID: id.String(), Kind: "noop", Region: "us", Lane: lane, Tenant: tenant, LimitKeys: keys,
		Cost: 1, Budgets: job.DefaultBudgets, State: job.StateWaiting, EligibleAt: T0, CreatedAt: T0,
		Payload: json.RawMessage(`{"n":1}`),
	}
}

// newJobs returns n jobs of NewJob(tenant, lane, keys...), in creation
// order, for one insert of a backlog.
func newJobs(n int, tenant string, lane job.Lane, keys ...string) []*job.Job {
	out := make([]*job.Job, n)
	for i := range out {
		out[i] = NewJob(tenant, lane, keys...)
	}
	return out
}

func insert(t *testing.T, s store.Store, jobs ...*job.Job) []store.InsertResult {
	t.Helper()
	res, err := s.Insert(context.Background(), jobs, Unpaced)
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	return res
}

func lease(t *testing.T, s store.Store, now time.Time, max int) []*job.Job {
	t.Helper()
	got, err := s.Lease(context.Background(), store.LeaseParams{Now: now, Max: max, LeaseFor: 30 * time.Second})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	return got
}

func setLimit(t *testing.T, s store.Store, c admission.Config) {
	t.Helper()
	if _, err := s.UpsertLimit(context.Background(), c, T0); err != nil {
		t.Fatalf("upsert limit %s: %v", c.Name, err)
	}
}

// openKeyed opens a store with the limit key c and n waiting jobs of
// tenant acme in lane on that key alone, inserted one per call (one
// transaction each), the setup most admission cases start from.
func openKeyed(t *testing.T, open Opener, c admission.Config, n int, lane job.Lane) store.Store {
	t.Helper()
	s := open(t)
	setLimit(t, s, c)
	for range n {
		insert(t, s, NewJob("acme", lane, c.Name))
	}
	return s
}

// Validated is each leased job's successful attempt at now, to validated
// (a kind with a validation step), its keys told of the finish but not of
// a success: the store's share of a drain, as the SQLite driver's
// benchmarks and statement-cache tests finish their leases.
func Validated(jobs []*job.Job, now time.Time) []store.Transition {
	ts := make([]store.Transition, len(jobs))
	for i, j := range jobs {
		ts[i] = store.Transition{ID: j.ID, LeaseToken: j.LeaseToken, To: job.StateValidated,
			Record: job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassSuccess}, Keys: store.KeyEffect{Now: now}}
	}
	return ts
}

// success is the transition of a successful attempt of a kind with no
// validation step.
func success(j *job.Job, now time.Time) store.Transition {
	return store.Transition{
		ID: j.ID, LeaseToken: j.LeaseToken, To: job.StatePublished, Attempts: j.Attempts,
		Record: job.AttemptRecord{At: now, Attempt: j.Attempt, Outcome: job.ClassSuccess},
		Keys:   store.KeyEffect{Now: now, Success: true},
	}
}

func finish(t *testing.T, s store.Store, ts ...store.Transition) []error {
	t.Helper()
	errs, err := s.Finish(context.Background(), ts)
	if err != nil {
		t.Fatalf("finish: %v", err)
	}
	return errs
}

func mustOK(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("transition %d: %v", i, err)
		}
	}
}

func get(t *testing.T, s store.Store, id string) *job.Job {
	t.Helper()
	return read(t, "job", id, s.Get)
}

// read is one store read by id (Get, GetBatch, GetSchedule) that must
// succeed: a failure fails t, naming what was read.
func read[T any](t *testing.T, what, id string, get func(context.Context, string) (T, error)) T {
	t.Helper()
	v, err := get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s %s: %v", what, id, err)
	}
	return v
}

// listIDs returns the ids of List(p)'s page on s, in the order listed.
func listIDs(t *testing.T, s store.Store, p store.ListParams) []string {
	t.Helper()
	got, err := s.List(context.Background(), p)
	if err != nil {
		t.Fatalf("List(%+v): %v", p, err)
	}
	out := make([]string, len(got))
	for i, j := range got {
		out[i] = j.ID
	}
	return out
}

func ids(jobs []*job.Job) map[string]bool {
	out := map[string]bool{}
	for _, j := range jobs {
		out[j.ID] = true
	}
	return out
}
