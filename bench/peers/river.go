package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver River's SQLite driver runs on
)

// River: jobs are inserted with InsertManyFast (COPY FROM on PostgreSQL,
// row by row on SQLite, as River documents), worked by one queue whose
// MaxWorkers is the workload's worker count. A 429 returns
// river.JobSnooze(Retry-After): the job is retried after that long without
// using up an attempt. Flood's interactive jobs get priority 1 and its
// batch backlog priority 4, on the same queue. Everything else is River's
// default (fetch cooldown 100 ms, fetch poll interval 1 s, retry policy).

// riverArgs is a job as River's job args.
type riverArgs job

// Kind returns the job kind River routes on.
func (riverArgs) Kind() string { return "ratelane_bench" }

// riverWorker runs the shared handler and turns a 429 into a snooze.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	work workFunc
}

// Work handles one River job.
func (w *riverWorker) Work(ctx context.Context, j *river.Job[riverArgs]) error {
	err := w.work(ctx, "river-"+strconv.FormatInt(j.ID, 10), job(j.Args))
	if rl, ok := errors.AsType[*rateLimitedError](err); ok {
		return river.JobSnooze(rl.RetryAfter)
	}
	return err
}

// riverQueue is a River client on a fresh schema or file.
type riverQueue[TTx any] struct {
	client  *river.Client[TTx]
	cleanup func() error
}

// newRiver migrates driver's database up (in schema, "" for the default)
// and opens a client with one queue of workers.
func newRiver[TTx any](ctx context.Context, e *env, driver riverdriver.Driver[TTx], schema string, workers int, work workFunc, tune func(*river.Config)) (*riverQueue[TTx], error) {
	logger := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema, Logger: logger})
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, &riverWorker{work: work})
	cfg := &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers: ws,
		Schema:  schema,
		Logger:  logger,
	}
	if tune != nil {
		tune(cfg)
	}
	client, err := river.NewClient(driver, cfg)
	if err != nil {
		return nil, err
	}
	return &riverQueue[TTx]{client: client}, nil
}

func (q *riverQueue[TTx]) insert(ctx context.Context, jobs []job) error {
	ps := make([]river.InsertManyParams, len(jobs))
	for i, j := range jobs {
		ps[i].Args = riverArgs(j)
		switch j.Class {
		case classInteractive:
			ps[i].InsertOpts = &river.InsertOpts{Priority: 1}
		case classBatch:
			ps[i].InsertOpts = &river.InsertOpts{Priority: 4}
		}
	}
	_, err := q.client.InsertManyFast(ctx, ps)
	return err
}

func (q *riverQueue[TTx]) start(ctx context.Context) error {
	return q.client.Start(ctx)
}

func (q *riverQueue[TTx]) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err := q.client.StopAndCancel(ctx)
	if q.cleanup != nil {
		err = errors.Join(err, q.cleanup())
	}
	return err
}

// openRiverPostgres opens River on PostgreSQL in a new schema, dropped by
// close, with River's defaults.
func openRiverPostgres(ctx context.Context, e *env, workers int, work workFunc) (queue, error) {
	return openRiverPostgresWith(ctx, e, workers, work, nil)
}

// openRiverPostgresTuned is River on PostgreSQL tuned for throughput the
// way its documentation allows: FetchCooldown at its 1 ms minimum (default
// 100 ms, which caps a client at MaxWorkers jobs per 100 ms) and
// FetchPollInterval at 50 ms (default 1 s; ratelane polls every 50 ms).
// It shows what the defaults cost, so River is not judged by them alone.
func openRiverPostgresTuned(ctx context.Context, e *env, workers int, work workFunc) (queue, error) {
	return openRiverPostgresWith(ctx, e, workers, work, func(c *river.Config) {
		c.FetchCooldown = time.Millisecond
		c.FetchPollInterval = 50 * time.Millisecond
	})
}

func openRiverPostgresWith(ctx context.Context, e *env, workers int, work workFunc, tune func(*river.Config)) (queue, error) {
	pool, err := pgxpool.New(ctx, e.postgresURL)
	if err != nil {
		return nil, err
	}
	schema := fmt.Sprintf("peers_river_%d", time.Now().UnixNano())
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
		return err
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		pool.Close()
		return nil, fmt.Errorf("create schema: %w", err)
	}
	q, err := newRiver(ctx, e, riverpgxv5.New(pool), schema, workers, work, tune)
	if err != nil {
		return nil, errors.Join(err, drop())
	}
	q.cleanup = drop
	return q, nil
}

// openRiverSQLite opens River on a new SQLite file (WAL, synchronous=FULL
// as ratelane's default, one connection as River's driver documents),
// removed by close.
func openRiverSQLite(ctx context.Context, e *env, workers int, work workFunc) (queue, error) {
	dir, err := os.MkdirTemp("", "peers-river-sqlite-")
	if err != nil {
		return nil, err
	}
	v := url.Values{}
	v.Add("_pragma", "busy_timeout(10000)")
	v.Add("_pragma", "journal_mode(WAL)")
	v.Add("_pragma", "synchronous(FULL)")
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "river.db")+"?"+v.Encode())
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	db.SetMaxOpenConns(1)
	remove := func() error { return errors.Join(db.Close(), os.RemoveAll(dir)) }
	q, err := newRiver(ctx, e, riversqlite.New(db), "", workers, work, nil)
	if err != nil {
		return nil, errors.Join(err, remove())
	}
	q.cleanup = remove
	return q, nil
}
