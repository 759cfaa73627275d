// worker.js — an external ratelane worker in plain Node.js (>= 20, global fetch).
//
// The loop: lease jobs with a long poll (POST /v1/leases), call the upstream
// for each, and report what the upstream said. The worker never sleeps on a
// 429 itself: it hands the upstream's raw headers to ratelane
// (POST /v1/jobs/{id}/rate-limited), which parses Retry-After (and
// x-ratelimit-*, RateLimit, ...), pauses the limit key for every worker and
// reschedules the job. Admission control lives in the queue, not here.
//
// Environment:
//   RATELANE_URL      ratelane's base URL (default http://127.0.0.1:8080)
//   RATELANE_API_KEY  a worker (or admin) key; a worker key leases only its tenant's jobs
//   RATELANE_REGION   region to lease from (default eu)
//   KINDS             comma-separated job kinds this worker runs (default order.process)
//   UPSTREAM_URL      the rate-limited service each job is POSTed to (required)
//   CONCURRENCY       jobs leased and run at once (default 4)
//   MAX_JOBS          exit after this many jobs completed (default 0: run until SIGTERM)
//   LEASE_SECONDS     lease length; heartbeats extend it (default 30)
//   WAIT_SECONDS      long-poll length; also the longest SIGTERM waits for an idle worker (default 5)
//   UPSTREAM_TIMEOUT_SECONDS  per upstream call (default 120)

const env = process.env;
const RATELANE_URL = (env.RATELANE_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
const API_KEY = env.RATELANE_API_KEY;
const REGION = env.RATELANE_REGION ?? 'eu';
const KINDS = (env.KINDS ?? 'order.process').split(',').map((k) => k.trim()).filter(Boolean);
const UPSTREAM_URL = env.UPSTREAM_URL;
const CONCURRENCY = positiveInt('CONCURRENCY', 4);
const MAX_JOBS = positiveInt('MAX_JOBS', 0);
const LEASE_SECONDS = positiveInt('LEASE_SECONDS', 30);
const WAIT_SECONDS = positiveInt('WAIT_SECONDS', 5);
const UPSTREAM_TIMEOUT_MS = positiveInt('UPSTREAM_TIMEOUT_SECONDS', 120) * 1000;
// ratelane accepts at most 64 headers of up to 4 KiB each on /rate-limited.
const MAX_HEADERS = 64;
const MAX_HEADER_VALUE = 4096;

function positiveInt(name, def) {
  const raw = env[name];
  if (raw === undefined || raw === '') return def;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) {
    console.error(`worker: ${name} must be a whole number, got ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return n;
}

if (!API_KEY || !UPSTREAM_URL) {
  console.error('worker: set RATELANE_API_KEY and UPSTREAM_URL (see README.md)');
  process.exit(2);
}

const log = (msg, fields = {}) =>
  console.log(JSON.stringify({ time: new Date().toISOString(), msg, ...fields }));

let stopping = false;
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    // Finish the jobs in hand and report them; an open long poll ends by
    // itself within WAIT_SECONDS. It is not aborted: a lease the server
    // granted just as the client hung up would sit unseen until it expired.
    if (!stopping) log('stopping', { signal: sig });
    stopping = true;
  });
}

// api calls ratelane and returns { status, body, headers }; it throws only
// on network errors, so callers decide what each status means.
async function api(method, path, body, timeoutMs = 15_000) {
  const res = await fetch(RATELANE_URL + path, {
    method,
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = { detail: text.slice(0, 200) };
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// lease long-polls for up to n admitted jobs.
async function lease(n) {
  const res = await api(
    'POST',
    '/v1/leases',
    { region: REGION, kinds: KINDS, max: n, lease_seconds: LEASE_SECONDS, wait_seconds: WAIT_SECONDS },
    (WAIT_SECONDS + 15) * 1000,
  );
  if (res.status === 200) return res.body.jobs ?? [];
  // ratelane rate-limits each key's own requests too, and says how long to wait.
  const retryAfter = Number(res.headers.get('retry-after'));
  log('lease failed', { status: res.status, detail: res.body?.detail });
  await sleep(Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : 1000);
  return [];
}

// report sends an outcome; 409 means the lease was lost (it expired and the
// job went to another worker), which the worker can only log.
async function report(job, outcome, body) {
  const path = `/v1/jobs/${encodeURIComponent(job.id)}/${outcome}?region=${encodeURIComponent(job.region)}`;
  for (let attempt = 1; ; attempt++) {
    try {
      const res = await api('POST', path, { lease_token: job.lease_token, ...body });
      if (res.status === 200) {
        log('reported', { job: job.id, outcome, state: res.body.state, eligible_at: res.body.eligible_at });
        return res.body;
      }
      log('report refused', { job: job.id, outcome, status: res.status, detail: res.body?.detail });
      if (res.status < 500 && res.status !== 429) return null;
    } catch (err) {
      log('report error', { job: job.id, outcome, error: String(err) });
    }
    // ratelane was unreachable or overloaded: retry while the lease may
    // still hold; after that the job is leased again anyway.
    if (attempt >= 5) return null;
    await sleep(attempt * 500);
  }
}

// rawHeaders turns a fetch Headers object into the plain map ratelane
// parses, within its size limits; rate-limit headers go first so that they
// survive if the upstream sent more than ratelane accepts.
function rawHeaders(headers) {
  const all = [...headers.entries()].filter(([, v]) => v.length <= MAX_HEADER_VALUE);
  const isLimit = ([k]) => /retry-after|ratelimit/i.test(k);
  const ordered = [...all.filter(isLimit), ...all.filter((h) => !isLimit(h))];
  return Object.fromEntries(ordered.slice(0, MAX_HEADERS));
}

// run calls the upstream for one job, heartbeating while the call lasts so
// that a slow upstream does not cost the lease, and reports the outcome.
// It returns true when the job was completed.
async function run(job) {
  const beat = setInterval(async () => {
    const res = await api('POST', `/v1/jobs/${encodeURIComponent(job.id)}/heartbeat?region=${encodeURIComponent(job.region)}`, {
      lease_token: job.lease_token,
      lease_seconds: LEASE_SECONDS,
    }).catch((err) => ({ status: 0, body: { detail: String(err) } }));
    if (res.status !== 200) log('heartbeat failed', { job: job.id, status: res.status, detail: res.body?.detail });
  }, Math.max(1000, (LEASE_SECONDS * 1000) / 3));

  let res;
  try {
    res = await fetch(UPSTREAM_URL, {
      method: 'POST',
      // The job id is a natural idempotency key upstream: ratelane delivers
      // at least once, so a call may repeat after a lost lease.
      headers: { 'content-type': 'application/json', 'idempotency-key': job.id },
      body: JSON.stringify(job.payload ?? {}),
      signal: AbortSignal.timeout(UPSTREAM_TIMEOUT_MS),
    });
    await res.arrayBuffer(); // read the body so the connection can be reused
  } catch (err) {
    clearInterval(beat);
    // Timeouts and connection errors are transient: ratelane retries them
    // with backoff from the job's transient budget.
    await report(job, 'fail', { retryable: true, error: `upstream: ${err.name}` });
    return false;
  }
  clearInterval(beat);

  if (res.ok) {
    // Remaining-quota headers on a success let ratelane slow the key
    // before the upstream has to say 429.
    const done = await report(job, 'complete', { result: { upstream_status: res.status }, headers: rawHeaders(res.headers) });
    return done !== null;
  }
  if (res.status === 429) {
    await report(job, 'rate-limited', { headers: rawHeaders(res.headers), status: 429 });
  } else if (res.status >= 500 || res.status === 408) {
    await report(job, 'fail', { retryable: true, status: res.status, error: `upstream ${res.status}` });
  } else {
    // Other 4xx answers will not change on a retry.
    await report(job, 'fail', { retryable: false, status: res.status, error: `upstream ${res.status}` });
  }
  return false;
}

async function main() {
  log('worker started', { ratelane: RATELANE_URL, region: REGION, kinds: KINDS, concurrency: CONCURRENCY, max_jobs: MAX_JOBS });
  let completed = 0;
  while (!stopping && (MAX_JOBS === 0 || completed < MAX_JOBS)) {
    const want = MAX_JOBS === 0 ? CONCURRENCY : Math.min(CONCURRENCY, MAX_JOBS - completed);
    let jobs;
    try {
      jobs = await lease(want);
    } catch (err) {
      log('lease error', { error: String(err) });
      await sleep(1000);
      continue;
    }
    const results = await Promise.all(jobs.map(run));
    completed += results.filter(Boolean).length;
  }
  log('worker stopped', { completed });
}

main().then(
  () => process.exit(0),
  (err) => {
    log('worker crashed', { error: String(err?.stack ?? err) });
    process.exit(1);
  },
);
