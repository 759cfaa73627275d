// Package webhook delivers events to webhook subscribers: it signs each
// request with Standard Webhooks (webhook-id, webhook-timestamp,
// webhook-signature), sends it through an HTTP client that refuses private
// and special-purpose destinations at dial time (the SSRF guard), and turns
// the subscriber's answer into a [job.Outcome] the engine can schedule on:
// success, rate limited (with the server-given delay), transient, or
// permanent.
//
// The package never changes job state and never logs; it returns outcomes
// and a bounded [Response] for diagnosis, and the engine does the rest. A
// delivery is retried with the same webhook-id and Idempotency-Key, so a
// receiver that deduplicates sees each event once even when ratelane
// retries after a lost answer.
//
// Most callers want [New] and then [Deliverer.Handle] (the job handler for
// webhook jobs, whose payload is a [Payload]) or [Deliverer.Deliver] (one
// attempt of one [Delivery]). [Sign], [SignAll] and [Verify] are exported
// for subscribers written in Go and for tests; [Secrets] models a secret
// rotation in progress.
package webhook
