package sqlite

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestListPreparedOnce checks that List runs its text through the read
// pool's statement cache: the same filters reuse the one statement
// prepared for them (a reader does not parse the text again), and other
// filters add their own. Before, List parsed its text on every call, ~19%
// of the CPU of a batch-isolation sweep.
func TestListPreparedOnce(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	if _, err := s.Insert(ctx, []*job.Job{storetest.NewJob("t", job.LaneBatch, "k")}, storetest.Unpaced); err != nil {
		t.Fatal(err)
	}
	byTenant := store.ListParams{Tenant: "t", Limit: 10}
	text := listQuery(byTenant).SQL()
	cached := func() (*sql.Stmt, int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.stmts[text], len(s.stmts)
	}
	before, n0 := cached()
	if before != nil {
		t.Fatalf("List's text cached before any List")
	}
	var first *sql.Stmt
	for i := range 3 {
		jobs, err := s.List(ctx, byTenant)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("List = %d jobs, %v; want 1", len(jobs), err)
		}
		st, n := cached()
		if st == nil || n != n0+1 {
			t.Fatalf("after List %d: statement %v, %d cached (was %d); want List's text cached once", i, st, n, n0)
		}
		if first == nil {
			first = st
		} else if st != first {
			t.Fatalf("List %d prepared its text again", i)
		}
	}
	if _, err := s.List(ctx, store.ListParams{Tenant: "t", State: job.StateWaiting, Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if _, n := cached(); n != n0+2 {
		t.Fatalf("%d cached after a second filter; want %d", n, n0+2)
	}
}

// TestReadStmtsBounded checks that the read pool's cache stops at maxStmts
// texts and that a text past it still runs (unprepared).
func TestReadStmtsBounded(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	for i := range maxStmts + 10 {
		var got int
		if err := s.readRow(ctx, `SELECT ? + `+strconv.Itoa(i), 1).Scan(&got); err != nil || got != i+1 {
			t.Fatalf("text %d: %d, %v; want %d", i, got, err, i+1)
		}
	}
	s.mu.Lock()
	n := len(s.stmts)
	s.mu.Unlock()
	if n != maxStmts {
		t.Fatalf("%d texts cached; want the bound, %d", n, maxStmts)
	}
	if _, err := s.readQuery(ctx, `SELECT nonsense FROM nowhere`); err == nil {
		t.Fatal("a text that does not parse ran")
	}
}

// TestReadersStayOpen checks that every reader of the pool stays open
// when the pool is busy and then idle: database/sql keeps two idle
// connections by default and closed the others, and a reader opened again
// read the schema and prepared its statements again.
func TestReadersStayOpen(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	readers := s.cfg.Readers
	var held, done sync.WaitGroup
	held.Add(readers)
	done.Add(readers)
	errs := make(chan error, readers)
	for range readers {
		go func() {
			defer done.Done()
			rows, err := s.readQuery(ctx, `SELECT count(*) FROM jobs`)
			held.Done()
			if err != nil {
				errs <- err
				return
			}
			held.Wait() // every reader is in use at once
			errs <- rows.Close()
		}()
	}
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := s.rdb.Stats()
	if st.MaxIdleClosed != 0 || st.Idle != readers {
		t.Fatalf("readers: %d closed as surplus idle, %d idle; want 0 closed, %d idle", st.MaxIdleClosed, st.Idle, readers)
	}
}

// TestSweepReadsPreparedOnce checks the sweep's two reads against the
// statement cache: ReadyParents' text (one per kind and part-kind count)
// is prepared once and reused by every pass, and PartsOf's is one text
// for any number of parents (the ids are one JSON array), so pages of 1,
// 2 and 3 parents share one statement instead of filling the bounded
// cache with one per page size.
func TestSweepReadsPreparedOnce(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	p := store.ReadyParentsParams{Kind: "review", PartKinds: []string{"file"}, Limit: 10}
	cached := func(text string) (bool, int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.stmts[text]
		return ok, len(s.stmts)
	}
	for range 2 {
		if _, err := s.ReadyParents(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := cached(store.ReadyParentsQuery(jobCols, p).SQL()); !ok {
		t.Fatalf("ReadyParents' text not in the statement cache after two passes")
	}
	_, n := cached("")
	for i := 1; i <= 3; i++ {
		ids := make([]string, i)
		for k := range ids {
			ids[k] = "id" + strconv.Itoa(k)
		}
		if _, err := s.PartsOf(ctx, ids); err != nil {
			t.Fatal(err)
		}
	}
	ok, got := cached(partsOfQuery("").SQL())
	if !ok || got != n+1 {
		t.Fatalf("PartsOf of 1, 2 and 3 ids: its text cached %v, %d statements added; want one", ok, got-n)
	}
}
