// producer.js — a small Express service that turns orders into ratelane jobs.
//
//   POST /orders      {"order_id": "A-1001", ...}  ->  202 {"job_id": "...", "replayed": false}
//   GET  /orders/:job  the job's state, straight from ratelane
//
// Each order is enqueued with an Idempotency-Key (the caller's
// Idempotency-Key header, else "order-<order_id>"), so a client that retries
// after a timeout gets the same job back instead of a second one.
//
// Environment:
//   RATELANE_URL      ratelane's base URL (default http://127.0.0.1:8080)
//   RATELANE_API_KEY  a producer (or admin) key; jobs belong to its tenant
//   RATELANE_REGION   region of the jobs (default eu)
//   KIND              job kind (default order.process)
//   LIMIT_KEY         the limit key the upstream is paced by (default upstream:orders)
//   HOST, PORT        listen address (default 127.0.0.1:3000; PORT=0 picks a free port)
import express from 'express';

const env = process.env;
const RATELANE_URL = (env.RATELANE_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
const API_KEY = env.RATELANE_API_KEY;
const REGION = env.RATELANE_REGION ?? 'eu';
const KIND = env.KIND ?? 'order.process';
const LIMIT_KEY = env.LIMIT_KEY ?? 'upstream:orders';
const HOST = env.HOST ?? '127.0.0.1';
const PORT = Number(env.PORT ?? 3000);

if (!API_KEY) {
  console.error('producer: set RATELANE_API_KEY (see README.md)');
  process.exit(2);
}

async function ratelane(method, path, body, idempotencyKey) {
  const headers = { authorization: `Bearer ${API_KEY}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (idempotencyKey) headers['idempotency-key'] = idempotencyKey;
  const res = await fetch(RATELANE_URL + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: res.status, headers: res.headers, body: await res.json().catch(() => null) };
}

// relay passes a ratelane error on: its problem+json says what to do, and
// on overload (429) its Retry-After is the predicted wait, which the
// caller should honour rather than retry at once.
function relay(res, upstream) {
  const retryAfter = upstream.headers.get('retry-after');
  if (retryAfter) res.set('Retry-After', retryAfter);
  const status = upstream.status >= 500 ? 502 : upstream.status;
  res.status(status).type('application/problem+json').json(upstream.body ?? { title: 'ratelane error', status });
}

const app = express();
app.use(express.json({ limit: '64kb' }));

app.post('/orders', async (req, res, next) => {
  try {
    const order = req.body;
    if (!order || typeof order !== 'object' || typeof order.order_id !== 'string' || order.order_id === '') {
      return res.status(400).json({ error: 'send a JSON object with a string order_id' });
    }
    const key = req.get('idempotency-key') ?? `order-${order.order_id}`;
    const out = await ratelane(
      'POST',
      '/v1/jobs',
      // batch: nobody waits on the order synchronously; interactive would
      // have ratelane refuse (429) jobs predicted to wait over 30 s.
      { kind: KIND, region: REGION, lane: 'batch', limit_keys: [LIMIT_KEY], payload: order },
      key,
    );
    if (out.status !== 201) return relay(res, out);
    res.status(202).json({
      job_id: out.body.id,
      state: out.body.state,
      replayed: out.headers.get('idempotent-replayed') === 'true',
    });
  } catch (err) {
    next(err);
  }
});

app.get('/orders/:job', async (req, res, next) => {
  try {
    const out = await ratelane('GET', `/v1/jobs/${encodeURIComponent(req.params.job)}?region=${encodeURIComponent(REGION)}`);
    if (out.status !== 200) return relay(res, out);
    const { id, state, reason, attempt, result } = out.body;
    res.json({ job_id: id, state, reason, attempt, result });
  } catch (err) {
    next(err);
  }
});

// eslint-disable-next-line no-unused-vars
app.use((err, req, res, _next) => {
  // express.json's own errors (malformed JSON, too large) are the caller's.
  if (err.status >= 400 && err.status < 500) return res.status(err.status).json({ error: err.message });
  console.error(JSON.stringify({ msg: 'request failed', error: String(err) }));
  res.status(502).json({ error: 'ratelane unreachable' });
});

const server = app.listen(PORT, HOST, () => {
  const { address, port } = server.address();
  // Tests and scripts read this line to find a PORT=0 listener.
  console.log(`producer listening on http://${address}:${port}`);
});

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    // Stop accepting, let in-flight requests finish, then exit.
    server.close(() => process.exit(0));
    server.closeIdleConnections();
    setTimeout(() => process.exit(1), 10_000).unref();
  });
}
