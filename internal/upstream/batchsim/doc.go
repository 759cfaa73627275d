// Package batchsim simulates the two LLM provider batch APIs ratelane's
// batch lane submits to, as a real HTTP server on loopback speaking their
// wire formats, so that the official OpenAI and Anthropic SDKs can be
// pointed at it and everything runs offline:
//
//	OpenAI Files and Batch API (base URL: URL()+"/v1/")
//	POST   /v1/files                     multipart upload (file, purpose=batch)
//	GET    /v1/files/{id}                the file object
//	GET    /v1/files/{id}/content        the file's bytes (input, output or error JSONL)
//	DELETE /v1/files/{id}
//	POST   /v1/batches                   create: input_file_id, endpoint, completion_window "24h"
//	GET    /v1/batches                   list, newest first (after, limit)
//	GET    /v1/batches/{id}
//	POST   /v1/batches/{id}/cancel
//
//	Anthropic Message Batches (base URL: URL()+"/"; key as x-api-key or Bearer)
//	POST   /v1/messages/batches          create: requests[] of {custom_id, params}
//	GET    /v1/messages/batches          list, newest first (after_id, before_id, limit)
//	GET    /v1/messages/batches/{id}
//	GET    /v1/messages/batches/{id}/results   JSONL, one line per request
//	POST   /v1/messages/batches/{id}/cancel
//	DELETE /v1/messages/batches/{id}
//
// Time is a parameter: the server reads Config.Now (a [Clock] in tests)
// and derives every batch's status from it, so a test moves a batch from
// validating to completed by advancing the clock, never by sleeping. An
// OpenAI batch validates for Config.ValidateFor, processes its requests
// one after another spread evenly over Config.ProcessFor (request_counts
// grow as it goes), finalizes for Config.FinalizeFor and completes; a
// cancel makes it cancelling for Config.CancelFor, then cancelled, with the
// requests done by the cancel in its output file and the rest as
// batch_cancelled lines in its error file. A batch that cannot finish
// within its 24 h window (Config.Window) expires: the requests done by
// then are in the output file, the others batch_expired in the error file.
// An Anthropic batch processes the same way from its creation, keeps every
// request counted as processing until the whole batch ends (as Anthropic
// documents), and serves its results for Config.Retention (29 days) after
// creation.
//
// Limits are the providers' documented ones by default ([DefaultLimits]):
// 50,000 requests and 200 MB per OpenAI input file (512 MB per uploaded
// file), 100,000 requests and 256 MB per Anthropic batch. An OpenAI input
// file over its limits, or with a malformed line, makes the batch fail
// after validation with errors.data naming the line; an Anthropic create
// over its limits is refused with 400 (413 for the body size).
//
// Faults are injected per request with Config.Fault (expire it, fail it
// with a retryable 500 or a permanent 400, drop it from the results, or
// answer it with output that matches no schema, FaultBadOutput),
// chosen by custom_id and by how many times the simulator has seen that
// custom_id, so "expires on the first submission only" is one line; and
// per create with [Server.RejectCreates] (429 with Retry-After). The
// answer text of a successful request comes from Config.Responder, by
// default [SchemaResponder]: a deterministic instance of the request's
// schema, so generic extraction requests get a valid answer.
//
// Structured output is read in each provider's wire format: an OpenAI
// body's response_format (type json_schema, with json_schema.name and
// schema; strict mode requires every object closed with
// additionalProperties false and every property required) and an
// Anthropic params' output_config.format (type json_schema; objects
// closed). A request whose format breaks those rules is answered with a
// per-request 400, as the providers do; an accepted schema is handed to
// the Responder (upstream.LLMRequest.Schema) and counted in
// Stats.Structured.
//
// The simulator never logs request or response content.
package batchsim
