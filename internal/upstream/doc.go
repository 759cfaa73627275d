// Package upstream provides a rate-limited upstream simulator: a real HTTP
// server on loopback that plays the part of the services ratelane calls —
// webhook receivers and LLM providers — so that tests, the demo and the
// benchmarks exercise ratelane against the real wire formats (status codes,
// Retry-After, x-ratelimit-*, anthropic-ratelimit-*, RateLimit and
// RateLimit-Policy headers, Standard Webhooks signatures, provider JSON
// bodies) without any network access.
//
// A [Server] serves these routes:
//
//	POST /hooks/{name}                   a webhook receiver for route name
//	POST /v1/chat/completions            OpenAI chat completions, route Config.OpenAIRoute
//	POST /v1/messages                    Anthropic messages, route Config.AnthropicRoute
//	POST /r/{name}/v1/chat/completions   OpenAI chat completions for route name
//	POST /r/{name}/v1/messages           Anthropic messages for route name
//	GET  /_stats                         the current [Report] as JSON
//	GET  /_healthz                       200 "ok"
//	POST /_schedule                      start the schedule of limit changes now
//
// Every route name has its own limiter and counters ([RouteConfig]); the
// three kinds of endpoint share them, so an OpenAI endpoint and a webhook
// receiver configured with the same route name draw from one quota.
//
// A request is answered by the first of these steps that applies, and each
// step is counted in the route's [RouteReport]:
//
//  1. a scripted response queued with [Server.Script] (no limiter, no latency);
//  2. RouteConfig.StatusOverride (e.g. 410 for a removed subscriber);
//  3. the limiter: over RouteConfig.MaxConcurrent requests in flight, or over
//     the rate limit, answered as RouteConfig.OverLimit says;
//  4. Standard Webhooks signature verification (webhook routes with Secrets): 401;
//  5. request validation (LLM routes: malformed JSON, stream=true): 400;
//  6. RouteConfig.Quota exhausted (LLM routes): OpenAI 429 insufficient_quota,
//     Anthropic 400 credit balance too low, never a Retry-After;
//  7. a transient fault (500/502/504, or RouteConfig.TransientStatuses) with
//     probability RouteConfig.TransientRate;
//  8. success: 200 (webhooks) or a provider response built by the Responder.
//
// Steps 2 to 8 wait for RouteConfig.Latency before answering, except an
// over-limit answer, which comes at once as it does from a real edge proxy.
// The limiter runs before signature checks for the same reason, so an
// unsigned burst is still rate limited.
//
// Limits are counted as real upstreams count them ([Algorithm]): a token
// bucket (Stripe, OpenAI), an exact sliding window (the strictest reading
// of "N per second"), a fixed window aligned to the clock (GitHub's hourly
// quota), or the two-window sliding counter of edge proxies; a route may
// also count concurrent requests (MaxConcurrent), each holding its slot
// through its latency. A route's
// limit may change silently at scheduled times (RouteConfig.Changes,
// from [Server.StartSchedule]); over the limit it answers 429 or 503 with
// Retry-After in seconds, as an HTTP-date, or not at all (OverLimit).
// Every answer carries a Date header on the server's own clock, which may
// be skewed (RouteConfig.DateSkew). With Config.RecordArrivals the server
// keeps each accepted request's arrival time ([Server.Arrivals]), from
// which a benchmark computes goodput and overruns ([MaxInWindow]). Since
// the clock-aligned windows make a run's figures depend on where in a
// second its senders start, a benchmark starts them at a chosen phase
// ([Server.StartScheduleAt], or POST /_schedule?phase=250ms from another
// process), the same for every sender it compares.
//
// Randomness (transient failures, latency jitter) comes from one seeded
// generator, so a run that sends its requests one at a time is reproducible.
package upstream
