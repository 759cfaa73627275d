// Package sqlite is ratelane's embedded store: one SQLite database file per
// region, in WAL mode, with a single writer connection.
//
// Acknowledged means durable: by default every commit is synchronous=FULL, so
// an acknowledged job survives kill -9 and power loss. What makes FULL fast
// is group commit: every write goes through one writer goroutine, which runs
// all the writes waiting at that moment in one transaction (each inside its
// own savepoint, so one failing write does not fail its neighbours) and
// answers them all after a single fsync. synchronous=NORMAL is a documented
// opt-in that survives kill -9 but may lose the last commits on power loss.
//
// The SQLite underneath is chosen when building: modernc.org/sqlite (pure
// Go) by default, github.com/mattn/go-sqlite3 (cgo) with the build tag
// sqlite_cgo; see Driver and docs/architecture.md, "The SQLite driver".
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Synchronous modes.
const (
	// SyncFull fsyncs every commit: durable across power loss (default).
	SyncFull = "FULL"
	// SyncNormal fsyncs at checkpoints only: durable across process crashes,
	// may lose the last commits on power loss.
	SyncNormal = "NORMAL"
)

// Config configures Open.
type Config struct {
	// Path is the database file. Open creates it and its directory.
	Path string
	// Region is the region the store holds.
	Region string
	// Synchronous is SyncFull (default) or SyncNormal.
	Synchronous string
	// MaxBatch is the most writes group-committed in one transaction;
	// zero means 256.
	MaxBatch int
	// Readers is the size of the read connection pool; zero means 4.
	Readers int
	// BatchHold is how long the writer keeps a transaction of batch-lane
	// writes open, counted from its BEGIN, while a watcher
	// (WatchInteractive) reports interactive work in flight, so that an
	// interactive write that arrives meanwhile joins it rather than wait
	// for its commit; batch-lane writes that arrive meanwhile join it too.
	// Each batch-lane write waits at most this much longer for its
	// commit. Zero means 10ms; negative turns the hold off.
	BatchHold time.Duration
	// BatchSyncDefer has no effect.
	//
	// Deprecated: has no effect since session 35 (every commit fsyncs
	// itself, as at the default). Committing batch-lane writes without an
	// fsync and answering them at a later sync moved fsyncs off the writer
	// but did not reduce them (0.146 per sweep file with it, 0.133-0.147
	// without), and a longer quiet window doubled the sweep (66-69 s
	// against 26-34 s): docs/benchmarks.md, "Session 34 (s34h2)" and
	// "Session 35 (s35h3)". The field stays so that code setting it still
	// compiles.
	BatchSyncDefer time.Duration
	// GapCheckpoint is the WAL frames not yet checkpointed at which WAL
	// checkpoints run in the gaps between interactive work rather than
	// inside whichever COMMIT crosses SQLite's wal_autocheckpoint: after a
	// transaction, while no watcher (WatchInteractive) reports interactive
	// work in flight and no interactive write is queued, once the WAL
	// holds at least this many frames not yet checkpointed. They run
	// beside the writer, on a connection of their own, unless
	// GapCheckpointOnWriter. The writer connection's wal_autocheckpoint is
	// raised to 4× it as the safety net that bounds the WAL when
	// interactive work leaves no gap. Zero means DefaultGapCheckpoint
	// (1,000 frames); negative turns gap checkpoints off and leaves
	// checkpoints to SQLite (inside the COMMIT that crosses 1,000 frames).
	// Beside the writer they lowered the interactive tail of a 10,000-file
	// sweep and of its baseline (docs/benchmarks.md, "Session 37: the
	// merge (lead)", "Session 38 (s38h1)").
	GapCheckpoint int
	// ReadMmapSize, when positive, is each read-pool connection's PRAGMA
	// mmap_size in bytes: the readers fetch the database file's pages
	// from a memory map rather than pread them into their page caches
	// (pages a reader finds in the WAL are still read from it). SQLite
	// caps it at its SQLITE_MAX_MMAP_SIZE (2 GiB on 64-bit Linux and
	// macOS). Zero (the default) or negative leaves the readers on pread.
	// The writer connection never maps the file.
	//
	// A reader re-maps the file at every read transaction that follows a
	// commit (SQLite unmaps it when it finds the WAL changed), and an I/O
	// error on a mapped page, or another process truncating the file
	// under the map, ends the process with a signal rather than an error
	// (https://sqlite.org/mmap.html): docs/architecture.md, "The SQLite
	// driver", and docs/benchmarks.md, "Session 37 (s37h5)".
	ReadMmapSize int64
	// GapCheckpointOnWriter runs the gap checkpoints (GapCheckpoint) on
	// the writer's connection between its transactions rather than on a
	// connection and goroutine of their own beside it (the default). On
	// the writer nothing is appended during a checkpoint, so each one
	// restarts the WAL, but an interactive write that arrives during one
	// waits for its copy and fsync; beside, that write is run and
	// committed meanwhile, the frames it appends are left for the next
	// checkpoint, and the WAL restarts once one copies them all. Without
	// gap checkpoints (GapCheckpoint negative) it has no effect.
	GapCheckpointOnWriter bool
	// GapCheckpointBeside has no effect.
	//
	// Deprecated: gap checkpoints run beside the writer by default since
	// session 38; GapCheckpointOnWriter runs them on the writer's
	// connection instead. The field stays so that code setting it still
	// compiles.
	GapCheckpointBeside bool
	// WriterNice, when not zero, locks the writer goroutine to one OS
	// thread for the store's life and sets that thread's nice (Linux's
	// per-thread priority, -20 to 19; lower runs first) to it. An
	// interactive COMMIT is one fdatasync, and on a busy machine most of a
	// slow one is not the device but its thread, woken when the sync's I/O
	// completed, waiting in the OS run queue for a CPU (docs/benchmarks.md,
	// "Session 35 (s35h1)" and "Session 38 (s38h2)"); a negative nice puts
	// the writer ahead of the process's other threads and other processes
	// there. Negative values need CAP_SYS_NICE (or RLIMIT_NICE): Open fails
	// when the OS refuses, naming the field. Zero (the default) leaves the
	// writer on whatever thread Go's scheduler gives it, as before. Linux
	// only: elsewhere a non-zero value fails validation. A locked writer
	// costs a thread switch each time it wakes from idle, which is why it
	// is opt-in.
	WriterNice int
}

// DefaultGapCheckpoint is Config.GapCheckpoint's default: SQLite's own
// wal_autocheckpoint, so that a WAL restarts about as often as without
// gap checkpoints, only at other moments.
const DefaultGapCheckpoint = 1000

func (c Config) withDefaults() Config {
	c.Synchronous = cmp.Or(c.Synchronous, SyncFull)
	c.MaxBatch = cmp.Or(c.MaxBatch, 256)
	c.Readers = cmp.Or(c.Readers, 4)
	c.BatchHold = cmp.Or(c.BatchHold, defaultBatchHold)
	c.GapCheckpoint = cmp.Or(c.GapCheckpoint, DefaultGapCheckpoint)
	return c
}

func (c Config) validate() error {
	switch {
	case c.Path == "":
		return errors.New("sqlite: Path is required")
	case c.Region == "":
		return errors.New("sqlite: Region is required")
	case c.Synchronous != SyncFull && c.Synchronous != SyncNormal:
		return fmt.Errorf("sqlite: Synchronous must be %s or %s, got %q", SyncFull, SyncNormal, c.Synchronous)
	case c.MaxBatch < 1:
		return fmt.Errorf("sqlite: MaxBatch must be at least 1, got %d", c.MaxBatch)
	case c.WriterNice < -20 || c.WriterNice > 19:
		return fmt.Errorf("sqlite: WriterNice must be from -20 to 19 (0: off), got %d", c.WriterNice)
	case c.WriterNice != 0 && !writerNiceSupported:
		return fmt.Errorf("sqlite: WriterNice must be 0 on %s: a thread's own priority is Linux's", runtime.GOOS)
	}
	return nil
}

// Store is the SQLite driver. It is safe for concurrent use.
type Store struct {
	// SQLReads are the schedule, batch and document reads this driver
	// shares with PostgreSQL's (GetSchedule, ListBatches, GetObject, ...), run
	// by read.
	store.SQLReads
	// Derived are the contract's methods both SQL drivers build alike
	// around a write of this driver's (PutObject, UpsertLimit, Advance,
	// ...): store.Writes.
	store.Derived
	cfg Config
	wdb *sql.DB // exactly one connection: the single writer
	// wconn is wdb's connection, held from Open to Close: the writer runs
	// its transactions on it with its own BEGIN IMMEDIATE and COMMIT
	// (writeTx), and Migrate runs on it between batches. wmu is held for
	// each use, so that nothing runs inside the writer's transaction.
	wconn *sql.Conn
	wmu   sync.Mutex
	// wtx is the writer's transaction over wconn, one for the store's
	// life (passed as a pointer, it is not allocated per batch).
	wtx writeTx
	rdb *sql.DB // read-only pool
	// probe opens a fresh read-only connection per Ready call.
	probe      *sql.DB
	durability Durability
	reqs       chan *writeReq // interactive writes (and unmarked ones)
	batchReqs  chan *writeReq // batch-lane writes (store.WithLane)
	stop       chan struct{}
	done       chan struct{}
	once       sync.Once

	mu         sync.Mutex
	stmts      map[string]*sql.Stmt // the read pool's statements, prepared once (readStmt)
	batchStmts map[string]*sql.Stmt // the writer's past maxStmts texts, per batch
	// writerStmts are prepared on the single writer connection (wconn)
	// and kept across its transactions; only the writer goroutine touches
	// them.
	writerStmts map[string]*sql.Stmt
	// leases holds what MarkLeased read of each job it leased, for the
	// finish of that lease (see leaseFacts); only the writer goroutine
	// touches it.
	leases map[string]leaseFacts
	// listMark is the writer's copy of jobs_list_mark (listMarkKnown once
	// read) and sinceListing the jobs inserted since the last
	// listUnlisted (listed.go); only the writer goroutine touches them,
	// and onWriterConn between its transactions.
	listMark      string
	listMarkKnown bool
	sinceListing  int
	// keyListed is set by every key listing that reads the run above
	// jobs_list_mark (List through store.ListSideQuery) and cleared by the
	// writer's listUnlisted: while it is clear the writer lists every
	// listEveryQuiet jobs, not every listEvery (listed.go). Only its cost
	// depends on it, never what a listing returns.
	keyListed atomic.Bool
	// leasedScan is MarkLeased's buffer for scanLeased (writer goroutine
	// only): built per row it was one allocation per job leased.
	leasedScan anyRow
	// headScan is Heads' buffer for its rows (writer goroutine only), as
	// leasedScan is MarkLeased's.
	headScan anyRow
	// unpaced holds the states of unpaced keys as their rows hold them
	// (see loadKeys); only the writer goroutine touches it and
	// dataVersion. It is emptied whenever a write is rolled back and
	// whenever another connection (another process) committed since the
	// writer's last transaction, so that it never answers for a row
	// changed behind it.
	unpaced     map[string]admission.State
	dataVersion int64
	// shapesLen is each key's stored shapes length as loadKeys last read
	// it in the writer's transaction (writer goroutine only): saveShapes
	// pads a long start log to it while the log fits (shapesRoom).
	shapesLen map[string]int
	// groupIDs are the ids of the job_groups rows the writer has upserted
	// (upsertGroup), so that an insert into a group it has met writes the
	// row only when its ready_at moves. Only the writer goroutine touches
	// it, and onWriterConn between its transactions; forgetRows empties it
	// whenever an id it holds may no longer name its group.
	groupIDs map[groupOf]int64

	// writes and txs count the committed writes and their transactions
	// (WriteCounts).
	writes, txs atomic.Int64
	// leaseRuns counts the leases the writer ran (txOps.lease), Lease's
	// and FinishLease's: a FinishLease whose read found nothing it could
	// take runs none (its tests count them).
	leaseRuns atomic.Int64
	// lanes are the writer's waits per lane (WriteCounts).
	lanes laneStats
	// busy holds the watchers' funcs (WatchInteractive): the writer
	// holds a batch-lane transaction open while any reports true.
	busy atomic.Pointer[[]func() bool]
	// holdTimer is the writer's timer for BatchHold (writer goroutine
	// only), made once.
	holdTimer *time.Timer
	// shm is the WAL's -shm file, opened by the writer goroutine for
	// walBacklog (GapCheckpoint) and closed when it returns; gapCkpts
	// counts the checkpoints it ran (gapCheckpoint).
	shm      *os.File
	gapCkpts atomic.Int64
	// beside runs the gap checkpoints on a connection of its own with
	// Config.GapCheckpoint, unless GapCheckpointOnWriter (checkpoint.go);
	// nil otherwise.
	beside *checkpointer
	// gapPutOff counts the long batch-lane writes the writer came to
	// while interactive work was about and put off (writeInGap), and
	// gapLate those run anyway once they had waited gapWait.
	gapPutOff, gapLate atomic.Int64
	// txLost is set by runOne when a write's savepoint is gone: SQLite
	// rolled the writer's transaction back under it (writer goroutine
	// only; see runBatch).
	txLost bool
	// wstate is what the writer is doing (a writerState), kept in a
	// cpulabels build only: each interactive write notes it as it is
	// queued, so its wait can be laid on what it arrived behind.
	wstate atomic.Int32
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database at cfg.Path, checks it,
// applies the migrations, and starts the writer.
//
// A new file is created with FileMode in a directory created with DirMode.
// An existing file must pass PRAGMA quick_check; a file that is empty, not
// a database, truncated or damaged fails with a *CorruptError naming it.
// The writer connection must report journal_mode=wal and the configured
// synchronous level (see Durability), or Open fails.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	created, err := prepareFile(cfg.Path)
	if err != nil {
		return nil, err
	}
	wdb, err := sql.Open(driverName, dsn(cfg.Path, cfg.Synchronous, false))
	if err != nil {
		return nil, err
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	rdb, err := openPool(dsn(cfg.Path, cfg.Synchronous, true), cfg.ReadMmapSize)
	if err != nil {
		wdb.Close()
		return nil, err
	}
	rdb.SetMaxOpenConns(cfg.Readers)
	// Every reader stays open: database/sql keeps two idle by default, and
	// a reader closed and opened again reads the schema and prepares its
	// statements anew (a parse of every CREATE; docs/benchmarks.md,
	// "Session 15 (s15h2)").
	rdb.SetMaxIdleConns(cfg.Readers)
	probe, err := openProbe(cfg.Path)
	if err != nil {
		wdb.Close()
		rdb.Close()
		return nil, err
	}
	s := &Store{
		cfg: cfg, wdb: wdb, rdb: rdb, probe: probe,
		reqs:        make(chan *writeReq, 4*cfg.MaxBatch),
		batchReqs:   make(chan *writeReq, 4*cfg.MaxBatch),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
		stmts:       map[string]*sql.Stmt{},
		writerStmts: map[string]*sql.Stmt{},
		batchStmts:  map[string]*sql.Stmt{},
		leases:      map[string]leaseFacts{},
		unpaced:     map[string]admission.State{},
		shapesLen:   map[string]int{},
		groupIDs:    map[groupOf]int64{},
	}
	s.SQLReads = store.NewSQLReads(s.read, statsOldestQuery)
	s.Derived = store.NewDerived(store.Writes{PutObjects: s.putObjects, PutObjectIf: s.putObjectIf, DeleteObject: s.deleteObject,
		UpsertLimit: s.upsertLimit, SettleBatchItems: s.settleBatchItems, Advance: s.advance})
	if err := s.check(ctx, created); err != nil {
		wdb.Close()
		rdb.Close()
		probe.Close()
		return nil, err
	}
	if err := errors.Join(s.migrateUp(ctx, s.wdb), s.checkRegion(ctx)); err != nil {
		wdb.Close()
		rdb.Close()
		probe.Close()
		return nil, err
	}
	if s.wconn, err = wdb.Conn(ctx); err != nil {
		wdb.Close()
		rdb.Close()
		probe.Close()
		return nil, err
	}
	s.wtx = writeTx{c: s.wconn}
	if n := s.cfg.GapCheckpoint; n > 0 {
		if _, err := s.wconn.ExecContext(ctx, fmt.Sprintf(`PRAGMA wal_autocheckpoint = %d`, gapSafety*n)); err != nil {
			s.wconn.Close()
			wdb.Close()
			rdb.Close()
			probe.Close()
			return nil, err
		}
	}
	if s.cfg.GapCheckpoint > 0 && !s.cfg.GapCheckpointOnWriter {
		if s.beside, err = openCheckpointer(ctx, cfg); err != nil {
			s.wconn.Close()
			wdb.Close()
			rdb.Close()
			probe.Close()
			return nil, err
		}
		go s.checkpointBeside()
	}
	if n := s.cfg.WriterNice; n != 0 {
		// The nice is the writer thread's: the writer sets it as it
		// starts, and Open waits to learn whether the OS allowed it.
		niced := make(chan error, 1)
		go s.writer(niced)
		if err := <-niced; err != nil {
			s.Close()
			return nil, fmt.Errorf("sqlite: WriterNice %d: set the writer thread's nice: %w (a negative value needs CAP_SYS_NICE)", n, err)
		}
		return s, nil
	}
	go s.writer(nil)
	return s, nil
}

// check reads back the durability pragmas and, for an existing file, runs
// quick_check, before anything is migrated or written.
func (s *Store) check(ctx context.Context, created bool) error {
	if err := s.wdb.PingContext(ctx); err != nil {
		return asCorrupt(s.cfg.Path, "open", err)
	}
	d, err := readDurability(ctx, s.wdb, s.cfg.Path, s.cfg.Synchronous)
	if err != nil {
		return err
	}
	s.durability = d
	if created {
		return nil
	}
	return quickCheck(ctx, s.wdb, s.cfg.Path)
}

// dsn is the writer's (readOnly false) or the readers' data source: WAL, the
// configured synchronous level, foreign keys, a busy timeout, and BEGIN
// IMMEDIATE for the writer so that a transaction takes the write lock when
// it starts, not at its first write. pragma and connParams spell it for the
// driver built in.
func dsn(path, sync string, readOnly bool) string {
	q := url.Values{}
	// Open never lets SQLite create the file (prepareFile did, with its
	// mode): a connection the read pool opens after the file was deleted
	// under a running store fails, rather than create an empty database
	// that reads would then answer from.
	q.Add("mode", "rw")
	pragma(q, "busy_timeout", "10000")
	pragma(q, "journal_mode", "WAL")
	pragma(q, "synchronous", sync)
	pragma(q, "foreign_keys", "1")
	connParams(q)
	if readOnly {
		pragma(q, "query_only", "1")
	} else {
		q.Add("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// probeDSN opens the file read-only, with none of the writer's pragmas.
func probeDSN(path string) string {
	q := url.Values{}
	q.Add("mode", "ro")
	pragma(q, "busy_timeout", "2000")
	pragma(q, "query_only", "1")
	return "file:" + path + "?" + q.Encode()
}

// checkRegion records the region in a new database and refuses to open one
// that holds another region: a store wired to the wrong region must stop
// start-up, not mix content.
func (s *Store) checkRegion(ctx context.Context) error {
	if _, err := s.wdb.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS store_meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		return err
	}
	if _, err := s.wdb.ExecContext(ctx, `INSERT INTO store_meta (k, v) VALUES ('region', ?) ON CONFLICT DO NOTHING`, s.cfg.Region); err != nil {
		return err
	}
	var held string
	if err := s.wdb.QueryRowContext(ctx, `SELECT v FROM store_meta WHERE k = 'region'`).Scan(&held); err != nil {
		return err
	}
	if held != s.cfg.Region {
		return fmt.Errorf("sqlite: %s holds region %q but is configured for region %q", s.cfg.Path, held, s.cfg.Region)
	}
	return nil
}

// Region returns the region this store holds.
func (s *Store) Region() string { return s.cfg.Region }

// Path returns the database file.
func (s *Store) Path() string { return s.cfg.Path }

// Migrate checks the file with quick_check and applies the embedded
// migrations; Open already did both, so this is a no-op unless the file
// was changed underneath.
func (s *Store) Migrate(ctx context.Context) error {
	if err := quickCheck(ctx, s.rdb, s.cfg.Path); err != nil {
		return err
	}
	return s.onWriterConn(func(c *sql.Conn) error { return s.migrateUp(ctx, c) })
}

// onWriterConn runs fn on the writer's connection between two of its
// transactions.
func (s *Store) onWriterConn(fn func(c *sql.Conn) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	// A migration may rewrite jobs_list_mark (listed.go) and rebuild
	// job_groups, renumbering the groups.
	s.forgetRows()
	return fn(s.wconn)
}

// migrationDB is what the migrations run on: the writer's pool (wdb)
// while Open runs, its connection (wconn) once the writer holds it.
type migrationDB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

func (s *Store) migrateUp(ctx context.Context, db migrationDB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)`); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	for _, m := range migrationFiles(".up.sql", false) {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, m.version).Scan(&n); err != nil {
			return fmt.Errorf("sqlite: migrate: %w", err)
		}
		if n > 0 {
			continue
		}
		if err := s.execMigration(ctx, db, m, `INSERT INTO schema_migrations (version) VALUES (?)`); err != nil {
			return err
		}
	}
	return nil
}

// MigrateDown reverts every migration (for tests and CI, which migrate up
// and down on every driver).
func (s *Store) MigrateDown(ctx context.Context) error {
	return s.onWriterConn(func(c *sql.Conn) error {
		for _, m := range migrationFiles(".down.sql", true) {
			if err := s.execMigration(ctx, c, m, `DELETE FROM schema_migrations WHERE version = ?`); err != nil {
				return err
			}
		}
		return nil
	})
}

type migration struct {
	version int
	name    string
}

func migrationFiles(suffix string, reverse bool) []migration {
	entries, _ := fs.ReadDir(migrations, "migrations")
	var out []migration
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), suffix) {
			continue
		}
		var v int
		fmt.Sscanf(e.Name(), "%d_", &v)
		out = append(out, migration{v, e.Name()})
	}
	sort.Slice(out, func(i, j int) bool { return (out[i].version < out[j].version) != reverse })
	return out
}

func (s *Store) execMigration(ctx context.Context, db migrationDB, m migration, record string) error {
	body, err := migrations.ReadFile("migrations/" + m.name)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, string(body)); err != nil {
		return fmt.Errorf("sqlite: migration %s: %w", m.name, err)
	}
	if _, err := tx.ExecContext(ctx, record, m.version); err != nil {
		return fmt.Errorf("sqlite: migration %s: %w", m.name, err)
	}
	return tx.Commit()
}

// Close stops the writer after the writes already queued and closes the
// database. It is idempotent.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		// The checkpointer's connection closes before the writer's: the
		// last connection to close checkpoints the WAL and removes it.
		var cerr error
		if s.beside != nil {
			<-s.beside.done
			cerr = s.beside.close()
		}
		dumpWriteStats()
		// The writer has returned: its statements are closed here. A
		// *sql.Conn's statements are not closed with the pool, and a
		// connection closed with statements still open is not closed by
		// SQLite (nor its WAL checkpointed and removed) until they are.
		err = errors.Join(s.onWriterConn(func(c *sql.Conn) error {
			var errs []error
			for _, st := range s.writerStmts {
				errs = append(errs, st.Close())
			}
			return errors.Join(append(errs, c.Close())...)
		}), cerr, s.wdb.Close(), s.rdb.Close(), s.probe.Close())
	})
	return err
}

// maxStmts bounds each of the driver's statement caches (the read pool's,
// stmts, and the writer's, writerStmts): the texts are built from a
// bounded set of shapes (a listing's filters, a lease's kinds, an
// insert's row count), and a text past the bound runs unprepared, parsed
// per call as before, rather than growing a cache without end.
const maxStmts = 256

// readStmt returns query prepared on the read pool, once per text: each
// reader connection parses it the first time it runs it and keeps its
// plan. It returns nil when the cache holds maxStmts texts and query is
// not one of them (readQuery then runs it unprepared).
func (s *Store) readStmt(query string) (*sql.Stmt, error) {
	s.mu.Lock()
	st, ok := s.stmts[query]
	full := len(s.stmts) >= maxStmts
	s.mu.Unlock()
	if ok || full {
		return st, nil
	}
	// Prepared without the lock: a prepare takes a reader, which another
	// caller may hold while it waits for the lock.
	st, err := s.rdb.Prepare(query)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, ok := s.stmts[query]; ok || len(s.stmts) >= maxStmts {
		st.Close() // another caller cached the text first, or filled the cache
		return held, nil
	}
	s.stmts[query] = st
	return st, nil
}

// readContext is the context a read runs with: ctx without its
// cancellation, once ctx is seen not to be done, whatever its lane.
// database/sql and modernc.org/sqlite each start a goroutine per statement
// run with a context that can end, to watch it. A batch pass's thousands
// of short reads in a row put those watchers in the run queues by the
// hundred, ahead of the interactive lane's goroutines (docs/benchmarks.md,
// "Session 21 (s21h4)"), so batch-lane reads lost their cancellation
// first; an interactive review's own reads (its status, its part's text,
// the fused parent's reads, the fetch loop's read before a lease) made 18
// of the 22 goroutines created per review, each a wake-up more and a
// goroutine put in its P's next slot ahead of the review's worker
// (docs/benchmarks.md, "Session 39 (s39h2)"). What it gives up is
// interrupting a read already running, or waiting for a reader, when ctx
// ends: a read of the pool is a bounded page or a lookup by key, over in
// milliseconds, and a ctx already done still fails the read at once.
func readContext(ctx context.Context) context.Context {
	if ctx.Err() == nil {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// readQuery runs query on the read pool through its prepared statement
// (readStmt), so that a listing run again is not parsed again.
func (s *Store) readQuery(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx = readContext(ctx)
	st, err := s.readStmt(query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return s.rdb.QueryContext(ctx, query, args...)
	}
	return st.QueryContext(ctx, args...)
}

// readRow is readQuery for one row.
func (s *Store) readRow(ctx context.Context, query string, args ...any) *sql.Row {
	ctx = readContext(ctx)
	st, err := s.readStmt(query)
	if err != nil || st == nil {
		return s.rdb.QueryRowContext(ctx, query, args...) // reports the same prepare error on Scan
	}
	return st.QueryRowContext(ctx, args...)
}

func newToken() string { return uuid.NewString() }
