// Package llmbatch submits LLM work to the providers' batch APIs (OpenAI's
// Batch API, Anthropic's Message Batches) through their official Go SDKs,
// and tracks each provider batch with a durable state machine whose item-
// level reconciliation accounts for every item.
//
// It is the foundation of ratelane's batch lane (issue 15 item 2) and has
// no store or engine dependency: a caller persists a [Chunk] (a small JSON
// value) through a [Journal] and the items through its own store. The
// pieces, bottom up:
//
//   - [Split] cuts a manifest of [Item]s into chunks that fit one provider
//     batch each (requests and bytes, [Limits]); an item too large for any
//     batch is refused on its own, not with the manifest.
//   - A [Provider] ([NewOpenAI], [NewAnthropic]) does one provider call per
//     method: Upload, Create, Find, Poll, Collect, Cancel. Retries are the
//     caller's: the SDKs' own are switched off, and a 429 comes back as a
//     [*RateLimitedError] with the server's delay.
//   - A [Chunk] is the durable state of one provider batch: planned,
//     uploaded, submitted, in_progress, results_ready, reconciled. Its
//     methods are pure transitions (time is a parameter), and
//     [Chunk.Next] says which call comes next.
//   - [Reconcile] joins results to the chunk's custom_ids and gives every
//     item exactly one [Disposition]: succeeded, failed, canceled or
//     requeue, each with a reason; results for unknown custom_ids and
//     repeated lines are counted, never delivered.
//   - A [Driver] performs one step at a time: it records the intent before
//     a call that creates something and the result right after, so that a
//     kill -9 at any point loses nothing and creates no second provider
//     batch (see [Driver.Step] for what is persisted when).
//
// Nothing here logs or returns prompts or model output except as the
// result body handed to the caller's [Sink].
package llmbatch
