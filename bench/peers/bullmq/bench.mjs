// BullMQ peer for the ratelane peers benchmark. See PROTOCOL.md one folder up
// for the contract and README.md here for the choices made.
//
//   node bench.mjs < spec.json > result.json
//
// One JSON spec on stdin, exactly one JSON result on stdout, logs on stderr.
// Every Redis key lives under spec.prefix and is removed before exiting.

import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';

// Libraries must never write to stdout: it carries only the result.
console.log = console.error;
console.info = console.error;
const log = (...a) => console.error('[bullmq-peer]', ...a);

const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

// Settles like `promise`, or after `ms` with onTimeout()'s outcome; the timer
// is cleared either way so it never keeps the process alive.
function withTimeout(promise, ms, onTimeout) {
  let timer;
  const t = new Promise((res, rej) => {
    timer = setTimeout(() => {
      try {
        res(onTimeout());
      } catch (err) {
        rej(err);
      }
    }, ms);
  });
  return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

// Resources to release on every exit path, newest last.
const workers = [];
const queues = [];
let spec = null;
// Set when the run is abandoned (timeout): the load loops stop adding jobs,
// so nothing is written under the prefix after the cleanup sweep.
let aborted = false;
const checkAborted = () => {
  if (aborted) throw new Error('run abandoned');
};

function connectionFromURL(raw) {
  const u = new URL(raw);
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') {
    throw new Error(`redis_url: unsupported scheme ${u.protocol}`);
  }
  const opts = {
    host: u.hostname || '127.0.0.1',
    port: u.port ? Number(u.port) : 6379,
    db: u.pathname && u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0,
    maxRetriesPerRequest: null, // required by BullMQ for blocking connections
  };
  if (u.username) opts.username = decodeURIComponent(u.username);
  if (u.password) opts.password = decodeURIComponent(u.password);
  if (u.protocol === 'rediss:') opts.tls = {};
  return opts;
}

function percentile(sorted, p) {
  // Nearest rank: the smallest value with at least p% of the values <= it.
  if (sorted.length === 0) return 0;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

function requireFields(s, fields) {
  for (const f of fields) {
    if (s[f] === undefined || s[f] === null) throw new Error(`spec: missing field ${f}`);
  }
}

function newQueue(name, connection) {
  const q = new Queue(name, { connection, prefix: spec.prefix });
  q.on('error', (err) => log(`queue ${name} error:`, err.message));
  queues.push(q);
  return q;
}

function newWorker(name, processor, connection, opts) {
  const w = new Worker(name, processor, {
    connection,
    prefix: spec.prefix,
    autorun: false,
    ...opts,
  });
  w.on('error', (err) => log(`worker ${name} error:`, err.message));
  workers.push(w);
  return w;
}

// addBulk in chunks of `size`; returns the created jobs' count.
async function addInBatches(queue, n, size, makeJob) {
  for (let i = 0; i < n; i += size) {
    checkAborted();
    const batch = [];
    for (let j = i; j < Math.min(n, i + size); j++) batch.push(makeJob(j));
    await queue.addBulk(batch);
  }
}

// ---------------------------------------------------------------- HTTP ----

class HttpStatusError extends Error {
  constructor(status) {
    super(`upstream answered HTTP ${status}`);
    this.status = status;
  }
}

// POST an empty body; returns {ok:true} on 2xx, {retryAfterMs} on 429, and
// throws on anything else (BullMQ then retries with the job's backoff).
async function deliver(url, webhookId) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'webhook-id': webhookId },
    body: '',
    signal: AbortSignal.timeout(10_000),
  });
  // Drain the body so undici returns the keep-alive connection to its pool.
  await res.arrayBuffer().catch(() => {});
  if (res.status >= 200 && res.status < 300) return { ok: true };
  const retryAfterMs = parseRetryAfter(res.headers);
  // A 503 that says when to come back is the upstream's rate limit too.
  if (res.status === 429 || (res.status === 503 && retryAfterMs !== null)) {
    return { ok: false, retryAfterMs: retryAfterMs !== null && retryAfterMs > 0 ? retryAfterMs : 1000 };
  }
  throw new HttpStatusError(res.status);
}

// The server's delay in ms, or null: retry-after-ms, else Retry-After as
// seconds or as an HTTP-date read against the response's Date (the
// server's clock), else against ours.
function parseRetryAfter(headers) {
  const ms = Number(headers.get('retry-after-ms') ?? '');
  if (headers.has('retry-after-ms') && Number.isFinite(ms) && ms >= 0) return ms;
  const v = (headers.get('retry-after') ?? '').trim();
  if (v === '') return null;
  if (/^\d+(\.\d+)?$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  if (Number.isNaN(at)) return null;
  const date = Date.parse(headers.get('date') ?? '');
  return Math.max(0, at - (Number.isNaN(date) ? Date.now() : date));
}

// The processor shared by paced and flood: POST, and on 429 use BullMQ's
// manual rate-limit pattern: rate-limit the whole queue for Retry-After, then
// throw RateLimitError so the job goes back to waiting without spending an
// attempt. (Worker#rateLimit is deprecated in v6 in favour of Queue#rateLimit.)
function webhookProcessor(queue, url, onStart, onSuccess, counters) {
  return async (job) => {
    onStart?.(job);
    const r = await deliver(url, job.id);
    if (r.ok) {
      onSuccess?.(job);
      return;
    }
    counters.rateLimited++;
    await queue.rateLimit(r.retryAfterMs);
    throw Worker.RateLimitError();
  };
}

// The Worker `limiter` for a destination advertised as rate/s with a token
// bucket of `burst`. BullMQ's limiter is a window counter: the first job
// taken opens a window of `duration` ms, and at most `max` jobs start in it.
//   "rate" (default): {max: rate, duration: 1000}, the plain per-second form.
//   "bucket" (spec field bullmq_limiter): {max: burst, duration:
//     1000*burst/rate}, the same long-run rate in windows no bigger than
//     the destination's bucket.
function limiterFor(rate, burst) {
  const mode = spec.bullmq_limiter ?? 'rate';
  if (mode === 'rate') {
    if (rate >= 1) return { max: Math.floor(rate), duration: 1000 };
    return { max: 1, duration: Math.round(1000 / rate) }; // below 1/s
  }
  if (mode === 'bucket') {
    const max = Math.max(1, Math.floor(burst ?? 1));
    return { max, duration: Math.max(1, Math.round((1000 * max) / rate)) };
  }
  throw new Error(`spec: bullmq_limiter must be "rate" or "bucket", not ${JSON.stringify(mode)}`);
}

// Job options for webhook deliveries: "any other answer" is retried with
// BullMQ's built-in exponential backoff (BullMQ has no retry by default).
const DELIVERY_ATTEMPTS = 20;
const deliveryJobOpts = {
  attempts: DELIVERY_ATTEMPTS,
  backoff: { type: 'exponential', delay: 100 },
  removeOnComplete: true,
  removeOnFail: false,
};

// A job that used up its attempts would leave the run waiting forever: fail
// fast instead.
function failOnFinalFailure(worker, reject) {
  worker.on('failed', (job, err) => {
    if (!job) return;
    if (job.attemptsMade >= (job.opts.attempts ?? 1)) {
      reject(new Error(`job ${job.id} failed for good after ${job.attemptsMade} attempts: ${err?.message}`));
    } else {
      log(`job ${job.id} attempt ${job.attemptsMade} failed: ${err?.message}; retrying`);
    }
  });
}

// ---------------------------------------------------------- workloads ----

async function runThroughput(connection) {
  requireFields(spec, ['jobs', 'latency_ms']);
  const n = spec.jobs;
  const queue = newQueue('throughput', connection);
  await queue.waitUntilReady();
  const jobOpts = { removeOnComplete: true, removeOnFail: false };

  // 1. Insert with no worker running.
  const t0 = performance.now();
  await addInBatches(queue, n, 1000, () => ({ name: 'noop', data: {}, opts: jobOpts }));
  const insertSecs = (performance.now() - t0) / 1000;
  log(`inserted ${n} jobs in ${insertSecs.toFixed(3)} s`);

  // 2. Drain with `workers` concurrency.
  let phase = 'drain';
  let drained = 0;
  let onDrained;
  const drainedP = new Promise((r) => (onDrained = r));
  const waits = [];
  let steadyDone = 0;
  let steadyTarget = Infinity;
  let onSteadyDone;
  const steadyP = new Promise((r) => (onSteadyDone = r));

  const worker = newWorker(
    'throughput',
    async (job) => {
      if (phase === 'steady') waits.push(Date.now() - job.timestamp);
    },
    connection,
    { concurrency: spec.workers },
  );
  worker.on('completed', (job) => {
    if (job.name === 'noop') {
      if (++drained === n) onDrained();
    } else if (++steadyDone >= steadyTarget) {
      onSteadyDone();
    }
  });
  await worker.waitUntilReady();
  const t1 = performance.now();
  worker.run().catch((err) => log('worker run:', err.message));
  if (n > 0) await drainedP;
  const drainSecs = (performance.now() - t1) / 1000;
  const jps = n / drainSecs;
  log(`drained ${n} jobs in ${drainSecs.toFixed(3)} s (${jps.toFixed(0)} jobs/s)`);

  // 3. Steady load: batches of 10 every 10 s/offered, for latency_ms.
  phase = 'steady';
  const offered = Math.max(100, Math.min(2000, jps / 2));
  const intervalMs = 10_000 / offered;
  const start = performance.now();
  let sent = 0;
  for (let k = 0; ; k++) {
    checkAborted();
    if (k * intervalMs >= spec.latency_ms) break;
    const due = start + k * intervalMs;
    await sleep(due - performance.now());
    const batch = [];
    for (let j = 0; j < 10; j++) batch.push({ name: 'steady', data: {}, opts: jobOpts });
    await queue.addBulk(batch);
    sent += 10;
  }
  steadyTarget = sent;
  if (steadyDone >= steadyTarget) onSteadyDone();
  await steadyP;
  log(`steady: offered ${offered.toFixed(0)} jobs/s, ${sent} jobs`);

  waits.sort((a, b) => a - b);
  return {
    insert_jobs_per_second: n / insertSecs,
    jobs_per_second: jps,
    offered_jobs_per_second: offered,
    enqueue_to_start_p50_ms: percentile(waits, 50),
    enqueue_to_start_p99_ms: percentile(waits, 99),
  };
}

async function runPaced(connection) {
  requireFields(spec, ['destinations']);
  const dests = spec.destinations;
  if (!Array.isArray(dests) || dests.length === 0) throw new Error('spec: destinations is empty');
  const total = dests.reduce((s, d) => s + d.jobs, 0);

  // One queue per destination: BullMQ's limiter is per queue (group keys are
  // BullMQ Pro only).
  const qs = dests.map((d, i) => newQueue(`paced-${String(i).padStart(3, '0')}`, connection));
  await Promise.all(qs.map((q) => q.waitUntilReady()));

  // Insert every job first, round-robin over destinations (addBulk batches of
  // up to 1,000 per queue). Job ids are explicit so they are unique across
  // queues: the webhook-id header is the job id.
  const pending = dests.map(() => []);
  const left = dests.map((d) => d.jobs);
  const flush = async (i) => {
    checkAborted();
    if (pending[i].length) await qs[i].addBulk(pending[i].splice(0));
  };
  for (let round = 0, more = true; more; round++) {
    more = false;
    for (let i = 0; i < dests.length; i++) {
      if (left[i] <= 0) continue;
      left[i]--;
      more = true;
      pending[i].push({
        name: 'deliver',
        data: {},
        opts: { ...deliveryJobOpts, jobId: `${dests[i].name}-${round}` },
      });
      if (pending[i].length >= 1000) await flush(i);
    }
  }
  for (let i = 0; i < dests.length; i++) await flush(i);
  log(`inserted ${total} jobs over ${dests.length} destinations`);

  // Split the total concurrency evenly over the destination workers (the
  // remainder to the first ones); every worker gets at least 1.
  const base = Math.floor(spec.workers / dests.length);
  const extra = spec.workers % dests.length;
  const conc = dests.map((_, i) => Math.max(1, base + (i < extra ? 1 : 0)));

  const counters = { rateLimited: 0 };
  let successes = 0;
  let onAll, onFail;
  const allDone = new Promise((res, rej) => ((onAll = res), (onFail = rej)));
  const ws = dests.map((d, i) => {
    const w = newWorker(
      qs[i].name,
      webhookProcessor(qs[i], d.url, null, () => {
        if (++successes === total) onAll();
      }, counters),
      connection,
      { concurrency: conc[i], limiter: limiterFor(d.rate, d.burst) },
    );
    failOnFinalFailure(w, onFail);
    return w;
  });
  await Promise.all(ws.map((w) => w.waitUntilReady()));
  // upstreams: the simulator's silent limit changes run from now.
  if (spec.schedule_url) {
    const res = await fetch(spec.schedule_url, { method: 'POST', signal: AbortSignal.timeout(10_000) });
    await res.arrayBuffer().catch(() => {});
    if (!res.ok) throw new Error(`POST schedule_url: HTTP ${res.status}`);
  }
  const startUnixMs = Date.now();
  for (const w of ws) w.run().catch((err) => log('worker run:', err.message));
  if (total > 0) await allDone;
  const endUnixMs = Date.now();
  log(`paced: limiters ${JSON.stringify(dests.map((d) => limiterFor(d.rate, d.burst)))}`);
  log(`paced: ${successes} successes in ${endUnixMs - startUnixMs} ms, ${counters.rateLimited} 429s seen; concurrency per destination ${conc.join(',')}`);
  return { start_unix_ms: startUnixMs, end_unix_ms: endUnixMs, successes };
}

async function runFlood(connection) {
  requireFields(spec, ['url', 'rate', 'batch_jobs', 'interactive_rate', 'window_ms']);
  const queue = newQueue('flood', connection);
  await queue.waitUntilReady();

  // BullMQ takes unprioritized jobs first, then prioritized ones by ascending
  // priority number. Both kinds get an explicit priority here, interactive
  // (1) ahead of batch (2).
  const BATCH_PRIORITY = 2;
  const INTERACTIVE_PRIORITY = 1;
  await addInBatches(queue, spec.batch_jobs, 1000, () => ({
    name: 'batch',
    data: {},
    opts: { ...deliveryJobOpts, priority: BATCH_PRIORITY },
  }));
  log(`inserted ${spec.batch_jobs} batch jobs`);

  let windowStart = Infinity;
  let windowEnd = Infinity;
  let batchInWindow = 0;
  const delivered = new Map(); // interactive job id -> wait ms (enqueue to delivery)
  let interactiveSent = 0;
  let interactiveDone = 0;
  let windowOver = false;
  let onAll, onFail;
  const allDone = new Promise((res, rej) => ((onAll = res), (onFail = rej)));
  const maybeAll = () => {
    if (windowOver && interactiveDone === interactiveSent) onAll();
  };
  const counters = { rateLimited: 0 };

  const worker = newWorker(
    'flood',
    webhookProcessor(
      queue,
      spec.url,
      () => {},
      (job) => {
        if (job.name === 'interactive') {
          // Enqueue to successful delivery: a first attempt answered 429
          // has not served whoever is waiting.
          if (!delivered.has(job.id)) delivered.set(job.id, Date.now() - job.timestamp);
          interactiveDone++;
          maybeAll();
        } else {
          const now = Date.now();
          if (now >= windowStart && now <= windowEnd) batchInWindow++;
        }
      },
      counters,
    ),
    connection,
    { concurrency: spec.workers, limiter: limiterFor(spec.rate, spec.burst) },
  );
  failOnFinalFailure(worker, onFail);
  await worker.waitUntilReady();
  worker.run().catch((err) => log('worker run:', err.message));
  allDone.catch(() => {}); // observed below; avoid an unhandled rejection meanwhile

  await sleep(1000);

  const intervalMs = 1000 / spec.interactive_rate;
  windowStart = Date.now();
  const start = performance.now();
  for (let k = 0; ; k++) {
    checkAborted();
    if (k * intervalMs >= spec.window_ms) break;
    const due = start + k * intervalMs;
    await sleep(due - performance.now());
    await queue.add('interactive', {}, { ...deliveryJobOpts, priority: INTERACTIVE_PRIORITY });
    interactiveSent++;
  }
  await sleep(start + spec.window_ms - performance.now());
  windowEnd = Date.now();
  windowOver = true;
  maybeAll();
  await allDone;
  log(`flood: limiter ${JSON.stringify(limiterFor(spec.rate, spec.burst))}`);
  log(`flood: ${interactiveSent} interactive jobs, ${batchInWindow} batch successes in window, ${counters.rateLimited} 429s seen`);

  const waits = [...delivered.values()].sort((a, b) => a - b);
  return {
    interactive_jobs: interactiveSent,
    interactive_p50_ms: percentile(waits, 50),
    interactive_p99_ms: percentile(waits, 99),
    interactive_max_ms: waits.length ? waits[waits.length - 1] : 0,
    batch_successes_in_window: batchInWindow,
    window_seconds: (windowEnd - windowStart) / 1000,
  };
}

// ------------------------------------------------------------ cleanup ----

function globEscape(s) {
  return s.replace(/[*?[\]\\]/g, (c) => '\\' + c);
}

async function cleanup(connection) {
  // Workers first (force: don't wait for in-flight jobs past a bound), then
  // obliterate each queue, then close, then sweep anything left under prefix.
  await Promise.allSettled(
    workers.map((w) => withTimeout(w.close(), 5000, () => w.close(true))),
  );
  for (const q of queues) {
    try {
      await q.obliterate({ force: true });
    } catch (err) {
      log(`obliterate ${q.name}:`, err.message);
    }
  }
  await Promise.allSettled(queues.map((q) => q.close()));
  if (!connection || !spec?.prefix) return;
  const r = new IORedis({ ...connection, maxRetriesPerRequest: 1, lazyConnect: true });
  r.on('error', () => {});
  try {
    await r.connect();
    let cursor = '0';
    let n = 0;
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${globEscape(spec.prefix)}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length) {
        log(`leftover keys: ${keys.slice(0, 10).join(" ")}`);
        n += await r.unlink(...keys);
      }
    } while (cursor !== '0');
    if (n) log(`removed ${n} leftover keys under ${spec.prefix}:`);
  } finally {
    await r.quit().catch(() => r.disconnect());
  }
}

// --------------------------------------------------------------- main ----

async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

async function main() {
  spec = JSON.parse(await readStdin());
  requireFields(spec, ['workload', 'redis_url', 'prefix', 'workers', 'timeout_ms']);
  if (!(spec.workers >= 1)) throw new Error('spec: workers must be >= 1');
  const connection = connectionFromURL(spec.redis_url);

  // Hard bound: leave time inside timeout_ms to clean up.
  const cleanupBudget = Math.min(10_000, Math.max(1000, spec.timeout_ms * 0.1));
  let timer;
  const timedOut = new Promise((_, rej) => {
    timer = setTimeout(
      () => rej(new Error(`timed out after ${spec.timeout_ms - cleanupBudget} ms (timeout_ms ${spec.timeout_ms})`)),
      Math.max(0, spec.timeout_ms - cleanupBudget),
    );
  });

  // upstreams is paced's procedure against receivers that count in other
  // shapes (PROTOCOL.md).
  const run = { throughput: runThroughput, paced: runPaced, flood: runFlood, upstreams: runPaced }[spec.workload];
  if (!run) throw new Error(`spec: unknown workload ${JSON.stringify(spec.workload)}`);

  let result, failure;
  try {
    result = await Promise.race([run(connection), timedOut]);
  } catch (err) {
    failure = err;
    aborted = true;
  } finally {
    clearTimeout(timer);
  }
  try {
    await withTimeout(cleanup(connection), cleanupBudget, () => {
      throw new Error('cleanup did not finish in time');
    });
  } catch (err) {
    failure ??= err;
    log('cleanup:', err.message);
  }
  if (failure) throw failure;
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().then(
  () => {

    // Everything is closed, so Node exits on its own; this unref'd guard only
    // fires if some handle was leaked.
    setTimeout(() => {
      log('a handle kept the process alive after cleanup; exiting', process.getActiveResourcesInfo().join(','));
      process.exit(0);
    }, 3000).unref();
  },
  (err) => {
    log('FAILED:', err?.stack || err);
    process.exitCode = 1;
    setTimeout(() => process.exit(1), 3000).unref();
  },
);
