// One enqueue -> lease -> complete round trip against a live ratelane
// server through a client generated from docs/openapi.json
// (openapi-typescript types + openapi-fetch). tsc type-checks every call
// against the document, so a route or schema the server does not serve
// fails the build; running it proves the document matches the wire.
//   RATELANE_URL=http://127.0.0.1:8080 RATELANE_API_KEY=... npm run roundtrip
import createClient from "openapi-fetch";
import type { paths } from "./gen/ratelane.js";

declare const process: { env: Record<string, string | undefined>; exit(code: number): never };

const baseUrl = process.env.RATELANE_URL;
const key = process.env.RATELANE_API_KEY;
if (!baseUrl || !key) {
  console.error("set RATELANE_URL and RATELANE_API_KEY");
  process.exit(2);
}
const client = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${key}` } });
const region = process.env.RATELANE_REGION ?? "us";
const kind = "ts.roundtrip";

function fail(step: string, err: unknown): never {
  console.error(`${step}: ${JSON.stringify(err)}`);
  process.exit(1);
}

const created = await client.POST("/v1/jobs", {
  body: { kind, region, limit_keys: ["ts:roundtrip"], payload: { n: 1 }, idempotency_key: "ts-roundtrip-" + Date.now() },
});
if (created.error || !created.data) fail("enqueue", created.error);
const id = created.data.id;

const leased = await client.POST("/v1/leases", { body: { region, kinds: [kind], max: 1, lease_seconds: 30, wait_seconds: 5 } });
if (leased.error || !leased.data) fail("lease", leased.error);
const got = leased.data.jobs.find((j) => j.id === id);
if (!got || !got.lease_token) fail("lease", `job ${id} was not leased: ${JSON.stringify(leased.data)}`);

const done = await client.POST("/v1/jobs/{id}/complete", {
  params: { path: { id }, query: { region } },
  body: { lease_token: got.lease_token, result: { ok: true } },
});
if (done.error || !done.data) fail("complete", done.error);

const final = await client.GET("/v1/jobs/{id}", { params: { path: { id }, query: { region } } });
if (final.error || !final.data) fail("get", final.error);
if (final.data.state !== "published") fail("state", `job ${id} is ${final.data.state}, want published`);
console.log(`round trip ok: job ${id} ${final.data.state}`);
