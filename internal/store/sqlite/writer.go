package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// errClosed is returned for writes submitted after Close.
var errClosed = errors.New("sqlite: store is closed")

type writeReq struct {
	fn   func(tx *sql.Tx) error
	done chan error
}

// write runs fn in the writer's transaction and returns once it is durably
// committed (or failed). fn may run together with other writes in one
// transaction, inside its own savepoint: it must not commit or roll back.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	r := &writeReq{fn: fn, done: make(chan error, 1)}
	select {
	case s.reqs <- r:
	case <-s.stop:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once queued, the write is waited for even if ctx ends: the caller
	// must learn whether it happened.
	return <-r.done
}

// writer is the single goroutine that owns the writer connection. It takes
// every write waiting at the moment (up to MaxBatch) and commits them
// together: one fsync for the batch.
func (s *Store) writer() {
	defer close(s.done)
	for {
		select {
		case r := <-s.reqs:
			s.commit(s.drain(r))
		case <-s.stop:
			for {
				select {
				case r := <-s.reqs:
					s.commit(s.drain(r))
				default:
					return
				}
			}
		}
	}
}

func (s *Store) drain(first *writeReq) []*writeReq {
	batch := []*writeReq{first}
	for len(batch) < s.cfg.MaxBatch {
		select {
		case r := <-s.reqs:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

func (s *Store) commit(batch []*writeReq) {
	errs := make([]error, len(batch))
	err := s.runBatch(batch, errs)
	defer s.prepareSeen()
	for i, r := range batch {
		if err != nil {
			r.done <- err
		} else {
			r.done <- errs[i]
		}
	}
}

func (s *Store) runBatch(batch []*writeReq, errs []error) error {
	tx, err := s.wdb.Begin()
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	s.batchStmts = map[string]*sql.Stmt{} // closed with the transaction
	if err := s.checkDataVersion(tx); err != nil {
		tx.Rollback()
		return fmt.Errorf("sqlite: data_version: %w", err)
	}
	for i, r := range batch {
		errs[i] = s.runOne(tx, r.fn, len(batch) > 1)
	}
	if len(batch) == 1 && errs[0] != nil {
		// A lone write runs without a savepoint; its failure must still
		// undo what it wrote before failing (a claimed tick whose job
		// insert failed, the first jobs of a failed Insert).
		clear(s.unpaced)
		if err := tx.Rollback(); err != nil {
			return fmt.Errorf("sqlite: rollback: %w", err)
		}
		return nil
	}
	if err := tx.Commit(); err != nil {
		clear(s.unpaced)
		tx.Rollback()
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	s.txs.Add(1)
	s.writes.Add(int64(len(batch)))
	return nil
}

// checkDataVersion empties s.unpaced when another connection committed
// since the writer's last look: PRAGMA data_version changes on this
// connection exactly then (SQLite's own commits leave it alone). Run first
// in each transaction, whose BEGIN IMMEDIATE keeps other writers out until
// it ends.
func (s *Store) checkDataVersion(tx *sql.Tx) error {
	var v int64
	if err := s.queryRow(tx, `PRAGMA data_version`).Scan(&v); err != nil {
		return err
	}
	if v != s.dataVersion {
		clear(s.unpaced)
		s.dataVersion = v
	}
	return nil
}

// runOne runs one write; inside a shared transaction it gets a savepoint so
// that its failure rolls back only its own changes.
func (s *Store) runOne(tx *sql.Tx, fn func(tx *sql.Tx) error, shared bool) (err error) {
	defer func() {
		if p := recover(); p != nil {
			clear(s.unpaced)
			err = fmt.Errorf("sqlite: write panicked: %v", p)
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
	if ferr := fn(tx); ferr != nil {
		clear(s.unpaced) // what it read or wrote is undone
		if _, err := s.exec(tx, `ROLLBACK TO w`); err != nil {
			return errors.Join(ferr, err)
		}
		s.exec(tx, `RELEASE w`)
		return ferr
	}
	_, err = s.exec(tx, `RELEASE w`)
	return err
}

// txStmt returns query prepared on the writer's current transaction. The
// cache lives for one batch: the writer connection is the only one, so
// statements cannot be prepared outside the open transaction, and a batch
// reuses the same few statements many times. Only the writer goroutine
// calls it.
func (s *Store) txStmt(tx *sql.Tx, query string) (*sql.Stmt, error) {
	if st, ok := s.batchStmts[query]; ok {
		return st, nil
	}
	if st, ok := s.writerStmts[query]; ok {
		// Prepared on the writer connection between batches: the
		// transaction reuses it without parsing the SQL again.
		st = tx.Stmt(st)
		s.batchStmts[query] = st
		return st, nil
	}
	st, err := tx.Prepare(query)
	if err != nil {
		return nil, err
	}
	s.batchStmts[query] = st
	s.toPrepare = append(s.toPrepare, query)
	return st, nil
}

// prepareSeen prepares, on the idle writer connection, the statements first
// seen in the last batch, so that later batches do not parse them again.
func (s *Store) prepareSeen() {
	for _, q := range s.toPrepare {
		if _, ok := s.writerStmts[q]; ok {
			continue
		}
		if st, err := s.wdb.Prepare(q); err == nil {
			s.writerStmts[q] = st
		}
	}
	s.toPrepare = s.toPrepare[:0]
}

// exec runs a prepared statement inside tx.
func (s *Store) exec(tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	st, err := s.txStmt(tx, query)
	if err != nil {
		return nil, err
	}
	return st.Exec(args...)
}

// query runs a prepared query inside tx.
func (s *Store) query(tx *sql.Tx, query string, args ...any) (*sql.Rows, error) {
	st, err := s.txStmt(tx, query)
	if err != nil {
		return nil, err
	}
	return st.Query(args...)
}

// queryRow runs a prepared single-row query inside tx.
func (s *Store) queryRow(tx *sql.Tx, query string, args ...any) *sql.Row {
	st, err := s.txStmt(tx, query)
	if err != nil {
		return tx.QueryRow(query, args...) // reports the same prepare error on Scan
	}
	return st.QueryRow(args...)
}
