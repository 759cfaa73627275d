// Package httpapi is ratelane's HTTP API: JSON in, JSON out, under /v1.
//
// Producers enqueue jobs and read their tenant's jobs; external workers
// lease jobs and report outcomes (complete, fail, rate-limited), which go
// through engine.Decide exactly like the outcomes of in-process handlers,
// so there is one classification; operators manage limit keys, dead
// letters and API keys. GET /v1 is a discovery document (every capability
// with its role, request schema and a runnable curl example) and
// GET /v1/openapi.json an OpenAPI 3.1 document; both are generated from the
// one routes() table, so they cannot drift from what the server serves.
//
// Errors are RFC 9457 application/problem+json everywhere, with a detail a
// person can act on and per-field violations.
//
// Regions: jobs live in the region they were created in and ids are
// globally unique (UUIDv7). Endpoints that address a job by id take an
// optional region query parameter; without it the server looks in every
// region the API key may use. Collection endpoints without region merge
// every permitted region, newest first, with one id cursor.
//
// Honest overload: POST /v1/jobs predicts the job's queue wait
// (admission.PredictWait, the prediction reviews use too) from the backlog
// on its limit keys and their admitted rates and, when nothing leases the
// job's kind, at least the lane's current age; past the lane's latency
// budget it rejects (429 + Retry-After), degrades or queues the job as the
// request's on_overload says.
//
// Handlers never log payloads, results or headers' values: only ids,
// routes and statuses.
package httpapi
