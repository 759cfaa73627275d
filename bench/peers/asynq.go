package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// asynq: asynq has no bulk enqueue, so a batch is enqueued by 16 concurrent
// Enqueue calls. Its server runs the workload's worker count as
// Concurrency. A 429 returns *rateLimitedError: RetryDelayFunc turns it
// into the Retry-After and IsFailure says it is no failure, so the retry
// neither counts against MaxRetry nor the failure stats. Flood's jobs go to
// the queues "interactive" and "batch", processed with StrictPriority.
// Everything else is asynq's default: notably a retry waits in the retry
// set until the forwarder moves it back, which it does every
// DelayedTaskCheckInterval (5 s), and an idle server polls for new tasks
// every TaskCheckInterval (1 s).
//
// asynq runs on a Redis database of its own (env.redisDB), flushed before
// and after each run; nothing else on the Redis server is touched.

// asynqEnqueuers is how many Enqueue calls one batch makes at once.
const asynqEnqueuers = 16

const asynqTaskType = "ratelane_bench"

// asynqQueue is an asynq client and server on a flushed Redis database.
type asynqQueue struct {
	rdb     *redis.Client
	client  *asynq.Client
	server  *asynq.Server
	handler asynq.Handler
	started bool
}

// openAsynq flushes the benchmark's Redis database and opens an asynq
// client and server on it.
func openAsynq(ctx context.Context, e *env, workers int, work workFunc) (queue, error) {
	opt := asynq.RedisClientOpt{Addr: e.redisAddr, DB: e.redisDB}
	rdb := redis.NewClient(&redis.Options{Addr: e.redisAddr, DB: e.redisDB})
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("flush redis db %d: %w", e.redisDB, err)
	}
	q := &asynqQueue{rdb: rdb, client: asynq.NewClient(opt)}
	q.server = asynq.NewServer(opt, asynq.Config{
		Concurrency:    workers,
		Queues:         map[string]int{string(classInteractive): 3, "default": 2, string(classBatch): 1},
		StrictPriority: true,
		RetryDelayFunc: func(n int, err error, t *asynq.Task) time.Duration {
			if rl, ok := errors.AsType[*rateLimitedError](err); ok {
				return rl.RetryAfter
			}
			return asynq.DefaultRetryDelayFunc(n, err, t)
		},
		IsFailure: func(err error) bool {
			_, limited := errors.AsType[*rateLimitedError](err)
			return !limited
		},
		LogLevel: asynq.WarnLevel,
	})
	q.handler = asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		var j job
		if err := json.Unmarshal(t.Payload(), &j); err != nil {
			return fmt.Errorf("%w: decode payload: %v", asynq.SkipRetry, err)
		}
		id, _ := asynq.GetTaskID(ctx)
		return work(ctx, "asynq-"+id, j)
	})
	return q, nil
}

func (q *asynqQueue) insert(ctx context.Context, jobs []job) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(asynqEnqueuers)
	for _, j := range jobs {
		payload, err := json.Marshal(j)
		if err != nil {
			return err
		}
		var opts []asynq.Option
		if j.Class != "" {
			opts = append(opts, asynq.Queue(string(j.Class)))
		}
		g.Go(func() error {
			_, err := q.client.EnqueueContext(ctx, asynq.NewTask(asynqTaskType, payload), opts...)
			return err
		})
	}
	return g.Wait()
}

func (q *asynqQueue) start(context.Context) error {
	if err := q.server.Start(q.handler); err != nil {
		return err
	}
	q.started = true
	return nil
}

func (q *asynqQueue) close() error {
	if q.started {
		q.server.Shutdown()
	}
	err := q.client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(err, q.rdb.FlushDB(ctx).Err(), q.rdb.Close())
}
