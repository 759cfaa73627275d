package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pipeTx is a transaction that sends its statements in as few round trips
// as it can, for the hot lease and finish transactions: BEGIN goes out with
// the first statement, a write whose result nobody reads (Exec) waits and
// goes out with the next read, and COMMIT goes out with the last writes.
// A lease of 64 jobs was twelve round trips on pgx.Tx, each a wake-up of
// this process and of the server's backend; on pipeTx it is three. The
// statements and their order are unchanged, so are the locks they take,
// except where a caller moves a queued write into its next statement
// (take).
//
// Exec therefore reports no command tag and no error: a deferred write's
// error is returned by the next Query, QueryRow, SendBatch or by commit,
// and fails the transaction there. Only statements whose tag is not read
// may use it. A pipeTx is used by one goroutine.
type pipeTx struct {
	conn  *pgxpool.Conn
	begun bool
	// async sends SET LOCAL synchronous_commit = off with BEGIN: the
	// commit does not wait for its WAL flush (see Config.AsyncLease).
	async bool
	// settings are applied, local to the transaction, by one statement
	// sent with BEGIN (see set); nil when there are none.
	settings *txSettings
	pending  []pendingExec
	// committed: COMMIT went out with the last query (QueryCommit).
	committed bool
}

type pendingExec struct {
	sql  string
	args []any
}

var _ querier = (*pipeTx)(nil)

// inPipe runs fn in a pipeTx on a pooled connection and commits, retrying
// on a deadlock or serialization failure like inTx.
func (s *Store) inPipe(ctx context.Context, async bool, fn func(p *pipeTx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.pipeOnce(ctx, async, fn)
		if err == nil || attempt == maxTxAttempts || !retryable(err) {
			return err
		}
	}
}

func (s *Store) pipeOnce(ctx context.Context, async bool, fn func(p *pipeTx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection still in a transaction (a failed rollback) is closed by
	// Release rather than reused.
	defer conn.Release()
	p := &pipeTx{conn: conn, async: async}
	if err := fn(p); err != nil {
		return p.rollback(ctx, err)
	}
	if err := p.commit(ctx); err != nil {
		return p.rollback(ctx, err)
	}
	return nil
}

// Exec queues a write; it is sent with the next read or the commit.
func (p *pipeTx) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	p.pending = append(p.pending, pendingExec{sql, args})
	return pgconn.CommandTag{}, nil
}

// prefix is the batch of what must run before the next statement: BEGIN
// the first time, then the queued writes.
func (p *pipeTx) prefix() *pgx.Batch {
	b := &pgx.Batch{}
	if !p.begun {
		b.Queue("BEGIN")
		if sql := p.setup(); sql != "" {
			b.Queue(sql)
		}
		p.begun = true
	}
	for _, e := range p.pending {
		b.Queue(e.sql, e.args...)
	}
	p.pending = p.pending[:0]
	return b
}

// set makes the transaction run with the given settings, local to it:
// they are applied once, right after BEGIN, in the same statement as the
// async commit's, so they cost no statement of their own and need no
// restoring (COMMIT and ROLLBACK end them). It must be called before the
// first statement.
func (p *pipeTx) set(s *txSettings) {
	if p.begun {
		panic("pipeTx.set after the first statement")
	}
	p.settings = s
}

// setup is the statement that applies the transaction's settings, "" when
// there are none. Its text depends only on the settings, so the pool's
// statement cache prepares it once per connection.
func (p *pipeTx) setup() string {
	switch {
	case p.settings != nil && p.async:
		return p.settings.async
	case p.settings != nil:
		return p.settings.sync
	case p.async:
		return "SET LOCAL synchronous_commit = off"
	}
	return ""
}

// txSettings are settings for pipeTx.set, with the statements that apply
// them built once (newTxSettings) rather than on every transaction: the
// lease's were a strings.Join and its pieces per lease call.
type txSettings struct {
	// sync applies the settings; async applies them with
	// synchronous_commit off.
	sync, async string
}

// newTxSettings returns the settings named by name, value, name, value,
// ... (set_config's arguments; the names and values are SQL literals'
// contents, our own constants).
func newTxSettings(nameValues ...string) *txSettings {
	stmt := func(kv []string) string {
		calls := make([]string, 0, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			calls = append(calls, "set_config('"+kv[i]+"', '"+kv[i+1]+"', true)")
		}
		return "SELECT " + strings.Join(calls, ", ")
	}
	return &txSettings{
		sync:  stmt(nameValues),
		async: stmt(append(slices.Clone(nameValues), "synchronous_commit", "off")),
	}
}

// take removes the last queued write whose text is sql and returns its
// arguments, so that the caller can run it inside its next statement (a
// WITH clause) rather than as one of its own: ok is false when no such
// write is queued. The write then runs after the other queued writes
// instead of before those queued after it; the caller must know that the
// order does not matter.
func (p *pipeTx) take(sql string) (args []any, ok bool) {
	for i := len(p.pending) - 1; i >= 0; i-- {
		if p.pending[i].sql == sql {
			args = p.pending[i].args
			p.pending = slices.Delete(p.pending, i, i+1)
			return args, true
		}
	}
	return nil, false
}

// send sends the prefix and then b's statements, reads the prefix's
// results and returns the results of b's.
func (p *pipeTx) send(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	all := p.prefix()
	n := all.Len()
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	br := p.conn.SendBatch(ctx, all)
	for range n {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return failedBatch{err}
		}
	}
	return br
}

// SendBatch sends b after the queued writes, in the same round trip.
func (p *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return p.send(ctx, b)
}

// Query sends the queued writes and the query in one round trip.
func (p *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := p.send(ctx, b)
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &pipeRows{Rows: rows, br: br}, nil
}

// QueryCommit sends the queued writes, the query and COMMIT in one round
// trip: for the last statement of a transaction. The commit's result is
// read when the rows are closed, and reported by their Err. If the query
// fails, the server skips the COMMIT and the transaction rolls back.
func (p *pipeTx) QueryCommit(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := p.send(ctx, b)
	p.committed = true
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &pipeRows{Rows: rows, br: br, tail: 1}, nil
}

// SendBatchCommit is SendBatch with COMMIT after b's statements, for the
// last batch of a transaction. Closing the results reads the commit's, and
// reports its error; if a statement fails, the server skips the COMMIT and
// the transaction rolls back.
func (p *pipeTx) SendBatchCommit(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	b.Queue("COMMIT")
	p.committed = true
	return p.send(ctx, b)
}

// QueryRow is Query for one row.
func (p *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := p.Query(ctx, sql, args...)
	return pipeRow{rows, err}
}

func (p *pipeTx) commit(ctx context.Context) error {
	if p.committed && len(p.pending) == 0 {
		return nil // COMMIT went out with the last query
	}
	if p.committed {
		return errors.New("pipeTx: a write was queued after the commit")
	}
	if !p.begun && len(p.pending) == 0 {
		return nil // nothing was sent or queued
	}
	b := &pgx.Batch{}
	b.Queue("COMMIT")
	br := p.send(ctx, b)
	_, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// rollback ends a failed transaction and returns cause. The statements
// after a failed one in a pipeline (COMMIT included) were skipped by the
// server, so the transaction is still open, aborted.
func (p *pipeTx) rollback(ctx context.Context, cause error) error {
	if p.begun && p.conn.Conn().PgConn().TxStatus() != 'I' {
		if _, err := p.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			return errors.Join(cause, fmt.Errorf("rollback: %w", err))
		}
	}
	return cause
}

// pipeRows closes the batch it came from once read to the end, so that the
// batch's own error is reported by Err.
type pipeRows struct {
	pgx.Rows
	br     pgx.BatchResults
	tail   int // statements after the query whose results Close reads (COMMIT)
	closed bool
	err    error
}

func (r *pipeRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *pipeRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	if r.Rows.Err() == nil {
		for range r.tail {
			if _, err := r.br.Exec(); err != nil && r.err == nil {
				r.err = err
			}
		}
	}
	if err := r.br.Close(); r.err == nil {
		r.err = err
	}
}

func (r *pipeRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// pipeRow is the pgx.Row of QueryRow.
type pipeRow struct {
	rows pgx.Rows
	err  error
}

func (r pipeRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// failedBatch reports a failure of the statements before a batch for each
// of its results.
type failedBatch struct{ err error }

func (f failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failedBatch) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failedBatch) QueryRow() pgx.Row                { return pipeRow{err: f.err} }
func (f failedBatch) Close() error                     { return f.err }
func (f failedBatch) Tx() pgx.Tx                       { return nil }
