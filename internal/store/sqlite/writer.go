package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ratelane/ratelane/internal/cpulabel"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
)

// errClosed is returned for writes submitted after Close.
var errClosed = errors.New("sqlite: store is closed")

type writeReq struct {
	fn   func(tx *writeTx) error
	done chan error
	lane job.Lane
	// at is when the write was called; ended is the other lane's count of
	// finished writes at that moment (laneStats.ended), for its Behind.
	at    time.Time
	ended int64
	// kind names the write's caller, in a cpulabels build only.
	kind string
	// charge, for a batch-lane write, is told how long the writer ran it
	// (store.WithWriteCharge).
	charge func(time.Duration)
	// found is the writer's state (writerState) when the write was
	// queued, in a cpulabels build only.
	found int32
}

// writerState is what the writer goroutine is doing, as a cpulabels
// build records it (Store.wstate).
const (
	writerIdle        int32 = iota // waiting for a write
	writerRunInter                 // running a transaction that holds an interactive write
	writerCommitInter              // committing one
	writerRunBatch                 // running a transaction of batch-lane writes only
	writerCommitBatch              // committing one
	writerHoldBatch                // holding one open for an interactive write (held)
)

// defaultBatchHold is Config.BatchHold's default: about an interactive
// review's own latency on a quiet machine (p50 7-11 ms in
// batch-isolation), so that most holds end with the interactive work
// rather than at the bound.
const defaultBatchHold = 10 * time.Millisecond

// write runs fn in the writer's transaction and returns once it is durably
// committed (or failed). fn may run together with other writes in one
// transaction, inside its own savepoint: it must not commit or roll back.
// ctx's lane (store.LaneOf) decides the write's queue: batch-lane writes
// wait while interactive ones are queued.
func (s *Store) write(ctx context.Context, fn func(tx *writeTx) error) error {
	r, err := s.enqueue(ctx, fn)
	if err != nil {
		return err
	}
	// Once queued, the write is waited for even if ctx ends: the caller
	// must learn whether it happened.
	return s.await(r)
}

// await returns queued write r's result once the writer has run it, or
// errClosed when the writer stopped without running it: a write queued
// as Close stopped the writer, after its last look at the queues, would
// otherwise wait forever (an engine's last finish, when a test closed
// its store before stopping the engine, did). The writer answers every
// write it runs before it looks at the queues again, so once it has
// returned an unanswered write was never run.
func (s *Store) await(r *writeReq) error {
	select {
	case err := <-r.done:
		return err
	case <-s.done:
		select {
		case err := <-r.done:
			return err
		default:
			return errClosed
		}
	}
}

// enqueue queues fn as one write of ctx's lane and returns its request,
// whose done channel answers it.
func (s *Store) enqueue(ctx context.Context, fn func(tx *writeTx) error) (*writeReq, error) {
	lane := store.LaneOf(ctx)
	q := s.reqs
	if lane == job.LaneBatch {
		q = s.batchReqs
	}
	r := &writeReq{fn: fn, done: make(chan error, 1), lane: lane, at: time.Now()}
	if lane == job.LaneBatch {
		r.charge = store.WriteChargeOf(ctx)
	}
	if cpulabel.On {
		r.kind = writeCaller()
		r.found = s.wstate.Load()
	}
	// The other lane's count is read together with the enqueue, under the
	// lock the writer counts under: read before it (as until session 10),
	// a sender delayed between the read and the send (a GC assist, the OS)
	// was charged with batch writes that ran before it was queued, which
	// the writer could not have put behind it.
	s.lanes.mu.Lock()
	r.ended = s.lanes.otherEnded(lane)
	select {
	case q <- r:
		s.lanes.mu.Unlock()
	default:
		// The queue is full: wait outside the lock (the writer needs it
		// to count); the wait for room counts as waiting.
		s.lanes.mu.Unlock()
		select {
		case q <- r:
		case <-s.stop:
			return nil, errClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return r, nil
}

// batchPiece is how many rows one piece of a large batch-lane write
// (writePieces) writes at most: a few times an interactive write's own
// rows (one to a dozen), so an interactive write that arrives while a
// piece runs waits behind little more than itself. At 256 to 1,000 rows
// per batch-lane write, the interactive writes under a 10,000-file sweep
// waited behind 108 batch rows each on average, p99 1,005
// (docs/benchmarks.md, "Session 12 (s12h5)").
const batchPiece = 32

// errEarlierPiece answers the pieces of a write after one that failed:
// they are not run.
var errEarlierPiece = errors.New("sqlite: an earlier piece of this write failed")

// writePieces writes n rows with fn(tx, lo, hi) for [lo, hi) of them. An
// interactive write (or one of n <= batchPiece rows) is one write, atomic
// as ever. A batch-lane write of more rows is queued as pieces of
// batchPiece rows, in order: the writer still commits them together while
// no interactive write is queued (they follow each other in its batch
// queue), but an interactive write that arrives goes in after the piece
// running, not after the whole write. So a batch-lane write of many rows
// is atomic per piece, not as a whole: on an error the pieces before the
// failed one may be committed, and those after it are not run. Its callers
// (a manifest's objects, jobs and items; a chunk's settles) are each
// retried or reconciled as a whole, and every piece is idempotent or
// refused whole on a repeat.
func (s *Store) writePieces(ctx context.Context, n int, fn func(tx *writeTx, lo, hi int) error) error {
	if n <= batchPiece || store.LaneOf(ctx) != job.LaneBatch {
		return s.write(ctx, func(tx *writeTx) error { return fn(tx, 0, n) })
	}
	var failed bool // set by the writer goroutine only, which runs the pieces in order
	var reqs []*writeReq
	var err error
	for lo := 0; lo < n; lo += batchPiece {
		hi := min(n, lo+batchPiece)
		r, qerr := s.enqueue(ctx, func(tx *writeTx) error {
			if failed {
				return errEarlierPiece
			}
			if err := fn(tx, lo, hi); err != nil {
				failed = true
				return err
			}
			return nil
		})
		if qerr != nil {
			err = qerr
			break
		}
		reqs = append(reqs, r)
	}
	for _, r := range reqs {
		if werr := s.await(r); err == nil && werr != nil && !errors.Is(werr, errEarlierPiece) {
			err = werr
		}
	}
	return err
}

// writer is the single goroutine that owns the writer connection. It takes
// every write waiting at the moment (up to MaxBatch) and commits them
// together: one fsync for the batch. Interactive writes come first: a
// transaction starts with one when any is queued, takes batch-lane writes
// one at a time only while no interactive write is queued, and once it
// holds an interactive write takes no more batch-lane writes. So an
// interactive write waits behind at most the one batch-lane write running
// when it arrived, however large the batch lane's writes are.
//
// With WriterNice set, niced is not nil: the writer first locks itself to
// its thread and sets the thread's nice, and sends the result there; on an
// error it returns at once (Open closes the store). It never unlocks, so
// that Go ends the thread with it.
func (s *Store) writer(niced chan<- error) {
	defer close(s.done)
	if niced != nil {
		err := writerNiceHook(s.cfg.WriterNice)
		niced <- err
		if err != nil {
			return
		}
	}
	if cpulabel.On {
		defer lockWriterThread(s)()
	}
	defer func() {
		if s.shm != nil {
			s.shm.Close()
		}
	}()
	for {
		s.gapCheckpoint()
		select {
		case r := <-s.reqs:
			s.commit(r)
			continue
		default:
		}
		select {
		case r := <-s.reqs:
			s.commit(r)
		case r := <-s.batchReqs:
			// An interactive write queued between the look above and this
			// select may have been ready too (select picks at random): it
			// goes first, and r starts the next transaction.
			select {
			case i := <-s.reqs:
				s.commit(i)
			default:
			}
			s.commit(r)
		case <-s.stop:
			for {
				select {
				case r := <-s.reqs:
					s.commit(r)
				case r := <-s.batchReqs:
					s.commit(r)
				default:
					return
				}
			}
		}
	}
}

// next returns the next write for the open transaction, or nil when it
// should commit: an interactive write when one is queued, else a
// batch-lane write unless the transaction already holds an interactive
// one.
func (s *Store) next(hasInteractive bool) *writeReq {
	select {
	case r := <-s.reqs:
		return r
	default:
	}
	if hasInteractive {
		return nil
	}
	select {
	case r := <-s.batchReqs:
		return r
	default:
		return nil
	}
}

// held waits for the next write of an open transaction that holds only
// batch-lane writes while interactive work is about (interactiveAbout),
// until Config.BatchHold after the
// transaction began (begun); nil: commit now. An interactive write that
// arrives meanwhile joins the transaction, which then commits with it:
// without the hold it could find the writer committing the batch-lane
// writes, wait for that commit's fsync, and then commit alone. So the
// batch lane commits in the gaps between interactive work, not beside
// it. A batch-lane write that arrives meanwhile joins too, and the wait
// goes on to the same deadline: each batch-lane write's commit comes at
// most BatchHold later than without the hold (plus the run of the writes
// that join). Holding only shifts a commit in time, so it must last
// until the interactive work ends, not a fixed while: at a fixed 2 ms
// the interactive writes found the writer committing batch-lane writes
// as often as without it (docs/benchmarks.md, "Session 31 (s31h3)").
// The watchers are asked again every holdPoll.
func (s *Store) held(begun time.Time) (r *writeReq) {
	bound := false // cpulabels: the hold ended at BatchHold
	if cpulabel.On {
		s.wstate.Store(writerHoldBatch)
		t0 := time.Now()
		defer func() {
			s.wstate.Store(writerRunBatch)
			noteHold(r, bound, time.Since(t0))
			noteSeg(s, "hold", nil, t0)
		}()
	}
	for {
		wait := s.cfg.BatchHold - time.Since(begun)
		if bound = wait <= 0; bound || !s.interactiveAbout() {
			return nil
		}
		wait = min(wait, holdPoll)
		if s.holdTimer == nil {
			s.holdTimer = time.NewTimer(wait)
		} else {
			s.holdTimer.Reset(wait)
		}
		select {
		case r := <-s.reqs:
			s.holdTimer.Stop()
			return r
		case r := <-s.batchReqs:
			s.holdTimer.Stop()
			return r
		case <-s.holdTimer.C:
		case <-s.stop:
			s.holdTimer.Stop()
			return nil
		}
	}
}

// holdPoll is how often held asks the watchers again: the batch lane's
// commit waits at most this long after interactive work ends.
const holdPoll = 250 * time.Microsecond

// interactiveAbout is the writer's one answer to "is interactive work
// about?", which the batch lane's three waits ask: the hold of a batch-lane
// transaction (held), the gap checkpoint (gapCheckpoint) and the long
// batch-lane write that waits for a gap (writeInGap, waitGap). It is true
// while an interactive write is queued for the writer, or a watcher
// (WatchInteractive) reports interactive work in flight.
//
// What it sees: this store's queued interactive writes, and, through the
// watchers, each engine's count of its interactive work in flight
// (internal/engine inflight.go): a review arriving from the start of its
// request until its insert is committed (PluginRegion.InteractiveWork), an
// inserted interactive job until a lease has seen it, a leased job's
// handler, an interactive parent's aggregation and publication, and 2 ms
// after the count falls to zero (the finish written after its handler
// left the count). What it cannot see: interactive work of another process
// writing the same database file, a store caller outside an engine (its
// writes count only once queued), a request still reading its body, and
// interactive jobs inserted for later (scheduled, or waiting on a key's
// admission the engine does not lease now). One answer for the three
// waits, read per wait rather than per write: the writer's loop asks
// nothing per transaction beyond the hold's own check.
func (s *Store) interactiveAbout() bool {
	if len(s.reqs) > 0 {
		return true
	}
	fs := s.busy.Load()
	if fs == nil {
		return false
	}
	for _, f := range *fs {
		if f() {
			return true
		}
	}
	return false
}

// WatchInteractive adds busy to the funcs the writer asks before it
// commits a transaction of batch-lane writes only (store.InteractiveWatcher;
// Config.BatchHold). With BatchHold negative it does nothing.
func (s *Store) WatchInteractive(busy func() bool) {
	if s.cfg.BatchHold <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var fs []func() bool
	if old := s.busy.Load(); old != nil {
		fs = append(fs, *old...)
	}
	fs = append(fs, busy)
	s.busy.Store(&fs)
}

// commit runs first and the writes that next hands it in one transaction
// and answers them all once its commit is durable (every commit fsyncs,
// at synchronous=FULL).
func (s *Store) commit(first *writeReq) {
	batch, err := s.runBatch(first)
	for _, w := range batch {
		s.lanes.done(w.r)
	}
	answer(batch, err)
	if cpulabel.On {
		s.wstate.Store(writerIdle)
	}
}

// answer answers batch's writes, committed and durable, each with its
// own result; with err set (the transaction failed) a write that
// succeeded is answered err, and one that failed still its own error,
// which says more. Their lane statistics were taken at their commit
// (Store.commit).
func answer(batch []ran, err error) {
	for _, w := range batch {
		werr := w.err
		if err != nil && werr == nil {
			werr = err // a write that failed keeps its own error
		}
		w.r.done <- werr
	}
}

// ran is a write the writer ran and its own result.
type ran struct {
	r   *writeReq
	err error
}

// writeTx is the writer's open transaction on its connection (Store.wconn),
// which the writer begins, commits and rolls back itself with BEGIN
// IMMEDIATE, COMMIT and ROLLBACK. It replaces a *sql.Tx because
// database/sql gives every Tx a cancellable context, even one begun with
// context.Background(), and so starts a goroutine to watch it per
// transaction (DB.beginDC) and another per query run inside it
// (Rows.initContextClose): two to a few dozen per batch, made runnable by
// the hundred under a batch sweep (docs/benchmarks.md, "Session 21
// (s21h4)", "Session 22 (s22h3)"). Statements run on a *sql.Conn with a
// context that cannot end start none, in database/sql or in the driver.
// Only the writer goroutine uses it, inside runBatch.
type writeTx struct {
	c *sql.Conn
}

// Exec runs query unprepared inside the transaction (s.exec runs a
// prepared one).
func (tx *writeTx) Exec(query string, args ...any) (sql.Result, error) {
	return tx.c.ExecContext(context.Background(), query, args...)
}

// Query runs query unprepared inside the transaction.
func (tx *writeTx) Query(query string, args ...any) (*sql.Rows, error) {
	return tx.c.QueryContext(context.Background(), query, args...)
}

// QueryRow runs a single-row query unprepared inside the transaction.
func (tx *writeTx) QueryRow(query string, args ...any) *sql.Row {
	return tx.c.QueryRowContext(context.Background(), query, args...)
}

// runBatch runs first without a savepoint, then, while it succeeded, the
// writes next hands it (up to MaxBatch in all), each in its own savepoint,
// and commits. A first write that fails is rolled back alone: the writes
// still queued go into the next transaction.
func (s *Store) runBatch(first *writeReq) ([]ran, error) {
	// The connection is the writer's for the batch: Migrate (and tests)
	// run on it between batches, as they waited for the pool's one
	// connection while a *sql.Tx held it.
	s.wmu.Lock()
	defer s.wmu.Unlock()
	defer s.closeBatchStmts()
	tx := &s.wtx
	var begun time.Time // for held: read only while a watcher is set
	if s.busy.Load() != nil && first.lane == job.LaneBatch {
		begun = time.Now()
	}
	var tb time.Time
	if cpulabel.On {
		cpulabel.Set(writerLabel(first.lane, true))
		s.wstate.Store(runState(first.lane != job.LaneBatch))
		tb = time.Now()
	}
	if _, err := s.exec(tx, `BEGIN IMMEDIATE`); err != nil {
		// A transaction left open by a COMMIT and ROLLBACK that both
		// failed would refuse every later BEGIN: end it, so that only
		// this batch fails. (Without one, ROLLBACK fails harmlessly.)
		s.exec(tx, `ROLLBACK`)
		return []ran{{r: first}}, fmt.Errorf("sqlite: begin: %w", err)
	}
	if err := s.checkDataVersion(tx); err != nil {
		s.exec(tx, `ROLLBACK`)
		return []ran{{r: first}}, fmt.Errorf("sqlite: data_version: %w", err)
	}
	if cpulabel.On {
		noteSeg(s, "begin", nil, tb)
		cpulabel.SetWrite(writerLabel(first.lane, false), first.kind)
	}
	s.txLost = false
	batch := []ran{{r: first, err: s.runOne(tx, first, false)}}
	if batch[0].err != nil {
		// A lone write runs without a savepoint; its failure must still
		// undo what it wrote before failing (a claimed tick whose job
		// insert failed, the first jobs of a failed Insert).
		s.forgetRows()
		if _, err := s.exec(tx, `ROLLBACK`); err != nil {
			return batch, fmt.Errorf("sqlite: rollback: %w", err)
		}
		return batch, nil
	}
	hasInteractive := first.lane != job.LaneBatch
	// A write whose failure ends the transaction (SQLite rolls it back
	// itself on a full disk, an I/O error, an OR ROLLBACK conflict) took
	// the writes before it along: no more join, since outside a
	// transaction a write's SAVEPOINT begins one of its own that its
	// RELEASE commits, and the batch's failed COMMIT then answered a
	// committed write with an error.
	for len(batch) < s.cfg.MaxBatch && !s.txLost {
		r := s.next(hasInteractive)
		if r == nil && !hasInteractive && !begun.IsZero() {
			r = s.held(begun)
		}
		if r == nil {
			break
		}
		hasInteractive = hasInteractive || r.lane != job.LaneBatch
		if cpulabel.On {
			cpulabel.SetWrite(writerLabel(r.lane, false), r.kind)
			s.wstate.Store(runState(hasInteractive))
		}
		batch = append(batch, ran{r: r, err: s.runOne(tx, r, true)})
	}
	if cpulabel.On {
		l := job.LaneBatch
		if hasInteractive {
			l = job.LaneInteractive
		}
		cpulabel.Set(writerLabel(l, true))
		s.wstate.Store(runState(hasInteractive) + 1) // committing
	}
	if s.txLost {
		s.forgetRows()
		s.exec(tx, `ROLLBACK`) // fails harmlessly: there is no transaction
		// The write that lost it is the last (no more join): its own
		// error answers it, and names the cause for the others.
		return batch, fmt.Errorf("sqlite: transaction failed: rolled back under one of its writes: %v", batch[len(batch)-1].err)
	}
	var c0 time.Time
	var cm commitMark
	if cpulabel.On {
		c0 = time.Now()
		cm = anatomyBegin(s)
	}
	_, cerr := s.exec(tx, `COMMIT`)
	if cpulabel.On {
		noteAnatomy(s, cm, "commit", batch)
		noteCommit(batch, hasInteractive, time.Since(c0))
		noteTxCommit(s, batch, hasInteractive, c0)
	}
	if err := cerr; err != nil {
		// A COMMIT that fails (an I/O error, SQLITE_BUSY) may leave the
		// transaction open: roll it back, so that none of the batch is
		// committed later by another batch's COMMIT.
		s.forgetRows()
		s.exec(tx, `ROLLBACK`)
		return batch, fmt.Errorf("sqlite: commit: %w", err)
	}
	s.txs.Add(1)
	s.writes.Add(int64(len(batch)))
	return batch, nil
}

// checkDataVersion forgets the writer's copies of stored rows
// (forgetRows, Store.leases) when another connection committed
// since the writer's last look: PRAGMA data_version changes on this
// connection exactly then (SQLite's own commits leave it alone). Run first
// in each transaction, whose BEGIN IMMEDIATE keeps other writers out until
// it ends.
func (s *Store) checkDataVersion(tx *writeTx) error {
	var v int64
	if err := s.queryRow(tx, `PRAGMA data_version`).Scan(&v); err != nil {
		return err
	}
	if v != s.dataVersion {
		// It may have changed the unpaced keys, moved jobs_list_mark
		// (listed.go), or rebuilt job_groups (another process's
		// MigrateDown and Migrate).
		s.forgetRows()
		// It may have been a VACUUM, which may renumber rows: the rowids
		// remembered for the finishes (leaseFacts.rowid) are no longer to
		// be trusted.
		clear(s.leases)
		s.dataVersion = v
	}
	return nil
}

// runOne runs one write; inside a shared transaction it gets a savepoint so
// that its failure rolls back only its own changes.
func (s *Store) runOne(tx *writeTx, r *writeReq, shared bool) (err error) {
	s.lanes.started(r)
	if cpulabel.On && r.lane != job.LaneBatch {
		noteArrival(r)
	}
	defer s.lanes.ended(r)
	if r.charge != nil {
		t0 := time.Now()
		defer func() { r.charge(time.Since(t0)) }()
	}
	if cpulabel.On {
		t0 := time.Now()
		defer func() {
			noteWrite(r, time.Since(t0), len(s.reqs))
			noteRun(s, r, t0)
		}()
	}
	fn := r.fn
	inSavepoint := false
	defer func() {
		if p := recover(); p != nil {
			s.forgetRows()
			err = fmt.Errorf("sqlite: write panicked: %v", p)
			if inSavepoint {
				// Undo what it wrote before panicking, as for an error:
				// the other writes of the transaction still commit.
				if _, rerr := s.exec(tx, `ROLLBACK TO w`); rerr != nil {
					s.txLost = true
					err = errors.Join(err, rerr)
				}
				s.exec(tx, `RELEASE w`)
			}
		}
	}()
	if !shared {
		return fn(tx)
	}
	// The savepoint statements are prepared once, like the writes' own
	// (txStmt): each shared write runs two or three of them.
	if _, err := s.exec(tx, `SAVEPOINT w`); err != nil {
		return err
	}
	inSavepoint = true
	if ferr := fn(tx); ferr != nil {
		s.forgetRows() // what it read or wrote is undone
		if _, err := s.exec(tx, `ROLLBACK TO w`); err != nil {
			s.txLost = true // no savepoint w: no transaction either
			return errors.Join(ferr, err)
		}
		s.exec(tx, `RELEASE w`)
		return ferr
	}
	if _, err = s.exec(tx, `RELEASE w`); err != nil {
		s.txLost = true
	}
	return err
}

// txStmt returns query prepared on the writer connection. The statements
// stay prepared across transactions (a *sql.Conn's are the connection's,
// not a transaction's), so a text is parsed once, up to maxStmts texts;
// the later ones are prepared once per batch and closed after it
// (closeBatchStmts). Only the writer goroutine calls it.
func (s *Store) txStmt(tx *writeTx, query string) (*sql.Stmt, error) {
	if st, ok := s.writerStmts[query]; ok {
		return st, nil
	}
	if st, ok := s.batchStmts[query]; ok {
		return st, nil
	}
	st, err := tx.c.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	if len(s.writerStmts) < maxStmts {
		s.writerStmts[query] = st
	} else {
		s.batchStmts[query] = st
	}
	return st, nil
}

// closeBatchStmts closes the statements prepared for one batch only (past
// maxStmts texts).
func (s *Store) closeBatchStmts() {
	for q, st := range s.batchStmts {
		st.Close()
		delete(s.batchStmts, q)
	}
}

// exec runs a prepared statement inside tx.
func (s *Store) exec(tx *writeTx, query string, args ...any) (sql.Result, error) {
	st, err := s.txStmt(tx, query)
	if err != nil {
		return nil, err
	}
	return st.Exec(args...)
}

// query runs a prepared query inside tx.
func (s *Store) query(tx *writeTx, query string, args ...any) (*sql.Rows, error) {
	st, err := s.txStmt(tx, query)
	if err != nil {
		return nil, err
	}
	return st.Query(args...)
}

// queryRow runs a prepared single-row query inside tx.
func (s *Store) queryRow(tx *writeTx, query string, args ...any) *sql.Row {
	st, err := s.txStmt(tx, query)
	if err != nil {
		return tx.QueryRow(query, args...) // reports the same prepare error on Scan
	}
	return st.QueryRow(args...)
}

// writerLabel is the cpulabel of the writer running a write of lane, or
// its transaction's BEGIN or COMMIT (commit): a commit is the batch lane's
// when its transaction holds only batch-lane writes. Only a cpulabels
// build calls it.
func writerLabel(l job.Lane, commit bool) string {
	switch {
	case l == job.LaneBatch && commit:
		return cpulabel.WriterCommitB
	case commit:
		return cpulabel.WriterCommitI
	case l == job.LaneBatch:
		return cpulabel.WriterBatch
	}
	return cpulabel.WriterInter
}

// runState is the writerState of a transaction running, by whether it
// holds an interactive write.
func runState(hasInteractive bool) int32 {
	if hasInteractive {
		return writerRunInter
	}
	return writerRunBatch
}
