package httpapi

import (
	"net/http"
	"strings"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/httpapi/mount"
)

// route is one endpoint: its pattern, the role it needs, its handler and
// what the discovery and OpenAPI documents say about it. Both documents are
// generated from this table, so they list exactly what is served.
type route struct {
	method, path string
	// name is the OpenAPI operationId and the capability's name.
	name    string
	summary string
	// role is the role a key needs; "" for public routes (no key).
	role   auth.Role
	handle handlerFunc
	// request is a zero value of the JSON body type; nil for no body.
	request any
	// response is a zero value of the success body type; nil for none.
	response any
	// media is the success body's media type; default application/json.
	media string
	// status is the success status.
	status int
	params []param
	// example is the body of the curl example; $VARS are left for the shell.
	example string
	// vars maps path wildcards to the shell variables the example uses.
	vars map[string]string
	// resource names what the route acts on ("schedule"): a 404 or 409 a
	// handler left untranslated names it and the path's {id} or {key}
	// (storeError). Empty for routes that act on no one resource.
	resource string
}

// what names the route's resource in a request: its kind and the path's
// id ("schedule 0193..."), "the <kind>" on a route without one (a
// create), "" when the route names none.
func (rt route) what(r *http.Request) string {
	if rt.resource == "" {
		return ""
	}
	for _, name := range []string{"id", "key"} {
		if id := r.PathValue(name); id != "" {
			return rt.resource + " " + id
		}
	}
	return "the " + rt.resource
}

// pattern is the route's ServeMux pattern ("POST /v1/jobs").
func (rt route) pattern() string { return rt.method + " " + rt.path }

func (rt route) hasParam(name string) bool {
	for _, p := range rt.params {
		if p.name == name {
			return true
		}
	}
	return false
}

// param is a query or header parameter.
type param struct {
	in, name, doc string
	enum          []string
}

func query(name, doc string, enum ...string) param {
	return param{in: "query", name: name, doc: doc, enum: enum}
}

var (
	// The parameters mounted routes share (mount.RegionJob, ...): one
	// wording for the core's and the plug-ins' documents.
	regionJob    = fromMount(mount.RegionJob)
	regionList   = fromMount(mount.RegionList)
	regionEvery  = fromMount(mount.RegionEvery)
	regionOne    = fromMount(mount.RegionOne)
	pageAfter    = fromMount(mount.PageAfter)
	pageLimit    = fromMount(mount.PageLimit)
	filterKind   = query("kind", "only jobs of this kind")
	filterTenant = query("tenant", "admin keys only: only this tenant's jobs")
	jobVars      = map[string]string{"id": "JOB_ID"}
)

// routes is every endpoint the server serves: the one table the mux, the
// discovery document and the OpenAPI document are built from. Handlers are
// named handleVerbNoun.
func (s *Server) routes() []route {
	region := s.regions[0]
	lease := `{"lease_token":"$LEASE_TOKEN"`
	rts := []route{
		{method: "GET", path: "/v1", name: "getDiscovery", summary: "This discovery document: every capability with its role, request schema and a curl example",
			handle: s.handleGetDiscovery, response: map[string]any{}, status: 200},
		{method: "GET", path: "/v1/openapi.json", name: "getOpenAPI", summary: "The OpenAPI 3.1 document of this API",
			handle: s.handleGetOpenAPI, response: map[string]any{}, status: 200},
		{method: "GET", path: "/healthz", name: "getHealth", summary: "Liveness: the process is up",
			handle: s.handleGetHealth, response: healthResponse{}, status: 200},
		{method: "GET", path: "/readyz", name: "getReady", summary: "Readiness: every region's store can be read (503 problem+json naming the region otherwise; cached for 1 s)",
			handle: s.handleGetReady, response: healthResponse{}, status: 200},
		{method: "GET", path: "/metrics", name: "getMetrics", summary: "Prometheus metrics (404 when not enabled)",
			handle: s.handleGetMetrics, status: 200},

		{method: "POST", path: "/v1/jobs", name: "createJob", role: auth.RoleProducer,
			summary: "Enqueue a job. A cost one of its keys can never admit (above a burst or a window's limit) is refused (400, field cost). Past the lane's latency budget, on_overload decides: reject (429 + Retry-After), degrade or queue",
			handle:  s.handleCreateJob, request: createJobRequest{}, response: jobView{}, status: 201,
			params:  []param{{in: "header", name: "Idempotency-Key", doc: "a retry with the same key and body returns the first job (Idempotent-Replayed: true); the overload check comes first, so a retry while the lane is past its budget is refused 429 unless it sends on_overload queue"}},
			example: `{"kind":"email.send","region":"` + region + `","lane":"interactive","limit_keys":["smtp:default"],"payload":{"to":"ada@example.com"},"idempotency_key":"signup-42"}`},
		{method: "GET", path: "/v1/jobs", name: "listJobs", role: auth.RoleProducer, summary: "List jobs, newest first, without payloads",
			handle: s.handleListJobs, response: jobList{}, status: 200,
			params: []param{regionList, query("state", "only jobs in this state", states()...), filterKind,
				query("lane", "only jobs of this lane", "interactive", "batch"), query("limit_key", "only jobs naming this limit key"), filterTenant, pageAfter, pageLimit}},
		{method: "GET", path: "/v1/jobs/{id}", name: "getJob", resource: "job", role: auth.RoleProducer, summary: "Get a job: state, attempts, history, result",
			handle: s.handleGetJob, response: jobView{}, status: 200, params: []param{regionJob}, vars: jobVars},
		{method: "POST", path: "/v1/jobs/{id}/cancel", name: "cancelJob", resource: "job", role: auth.RoleProducer,
			summary: "Cancel a job that is not finished (terminal: cancelled)",
			handle:  s.handleCancelJob, response: jobView{}, status: 200, params: []param{regionJob}, vars: jobVars},

		{method: "POST", path: "/v1/leases", name: "createLease", role: auth.RoleWorker,
			summary: "Lease admitted jobs for an external worker; long-polls up to wait_seconds",
			handle:  s.handleCreateLease, request: leaseRequest{}, response: leaseResponse{}, status: 200,
			example: `{"region":"` + region + `","kinds":["email.send"],"max":10,"lease_seconds":60,"wait_seconds":5}`},
		{method: "POST", path: "/v1/jobs/{id}/heartbeat", name: "heartbeatJob", resource: "job", role: auth.RoleWorker, summary: "Extend a lease",
			handle: s.handleHeartbeatJob, request: heartbeatRequest{}, response: heartbeatResponse{}, status: 200,
			params: []param{regionJob}, vars: jobVars, example: lease + `,"lease_seconds":60}`},
		{method: "POST", path: "/v1/jobs/{id}/complete", name: "completeJob", resource: "job", role: auth.RoleWorker, summary: "Report success; the job is published",
			handle: s.handleCompleteJob, request: completeRequest{}, response: outcomeResponse{}, status: 200,
			params: []param{regionJob}, vars: jobVars, example: lease + `,"result":{"message_id":"m-1"}}`},
		{method: "POST", path: "/v1/jobs/{id}/fail", name: "failJob", resource: "job", role: auth.RoleWorker,
			summary: "Report a failure: retryable (transient budget), invalid output (schema budget) or permanent",
			handle:  s.handleFailJob, request: failRequest{}, response: outcomeResponse{}, status: 200,
			params: []param{regionJob}, vars: jobVars, example: lease + `,"retryable":true,"error":"upstream 503","status":503}`},
		{method: "POST", path: "/v1/jobs/{id}/rate-limited", name: "rateLimitedJob", resource: "job", role: auth.RoleWorker,
			summary: "Report an upstream 429: the key pauses for every worker and the job is rescheduled",
			handle:  s.handleReportRateLimited, request: rateLimitedRequest{}, response: outcomeResponse{}, status: 200,
			params: []param{regionJob}, vars: jobVars, example: lease + `,"headers":{"Retry-After":"2"},"scope":"smtp:default"}`},

		{method: "PUT", path: "/v1/limits/{key}", name: "putLimit", resource: "limit key", role: auth.RoleAdmin,
			summary: "Create or reconfigure a limit key, keeping its live state. shape bucket (default) or window says how rate per period is counted, window sliding (default) or fixed (aligned to the clock) how a window counts; windows add further windows; every shape must admit a start. A change to a key the server's configuration declares (limits, a provider's rpm or tpm) lasts across restarts until that declaration changes",
			handle:  s.handlePutLimit, request: limitRequest{}, response: limitView{}, status: 200, params: []param{regionOne},
			example: `{"per_second":8,"burst":16,"concurrency":32,"adaptive":true,"windows":[{"limit":400,"period":"1m"}]}`},
		{method: "GET", path: "/v1/limits", name: "listLimits", role: auth.RoleAdmin, summary: "List limit keys with their live state (as GET /v1/limits/{key}, including strict counting)",
			handle: s.handleListLimits, response: limitList{}, status: 200, params: []param{regionEvery}},
		{method: "GET", path: "/v1/limits/{key}", name: "getLimit", resource: "limit key", role: auth.RoleAdmin,
			summary: "Get a limit key: configuration, tokens, learned rate, pause, in flight, waiting cost, and strict counting: strict is true, and strict_until says until when, while a fixed key with a sliding window paces one under its limit with no burst after an upstream refused it",
			handle:  s.handleGetLimit, response: limitView{}, status: 200, params: []param{regionOne}},

		{method: "GET", path: "/v1/stats", name: "getStats", role: auth.RoleAdmin,
			summary: "Queue depth by state, oldest ready age against the lane budget per region and lane, and this node's start and 429 counters",
			handle:  s.handleGetStats, response: statsResponse{}, status: 200, params: []param{regionEvery}},

		{method: "GET", path: "/v1/dead-letters", name: "listDeadLetters", role: auth.RoleProducer, summary: "List terminal jobs",
			handle: s.handleListDeadLetters, response: jobList{}, status: 200,
			params: []param{regionList, query("reason", "only this terminal reason", reasons()...), filterKind, filterTenant, pageAfter, pageLimit}},
		{method: "POST", path: "/v1/dead-letters/{id}/redrive", name: "redriveDeadLetter", resource: "job", role: auth.RoleProducer,
			summary: "Return a terminal job to waiting with fresh budgets",
			handle:  s.handleRedriveDeadLetter, response: jobView{}, status: 200, params: []param{regionJob}, vars: map[string]string{"id": "DEAD_JOB_ID"}},
		{method: "DELETE", path: "/v1/dead-letters/{id}", name: "deleteDeadLetter", resource: "job", role: auth.RoleProducer, summary: "Delete a terminal job",
			handle: s.handleDeleteDeadLetter, status: 204, params: []param{regionJob}, vars: map[string]string{"id": "DEAD_JOB_ID"}},
	}
	rts = append(rts, s.batchRoutes()...)
	if s.cfg.Keys != nil {
		rts = append(rts,
			route{method: "POST", path: "/v1/keys", name: "createKey", role: auth.RoleAdmin, summary: "Create an API key; the secret is shown once",
				handle: s.handleCreateKey, request: createKeyRequest{}, response: createKeyResponse{}, status: 201,
				example: `{"tenant":"acme","role":"producer","regions":["` + region + `"],"name":"billing-service"}`},
			route{method: "GET", path: "/v1/keys", name: "listKeys", role: auth.RoleAdmin, summary: "List API keys (never their secrets)",
				handle: s.handleListKeys, response: keyList{}, status: 200},
			route{method: "DELETE", path: "/v1/keys/{id}", name: "revokeKey", resource: "API key", role: auth.RoleAdmin, summary: "Revoke an API key",
				handle: s.handleRevokeKey, status: 204, vars: map[string]string{"id": "KEY_ID"}},
		)
	}
	rts = append(rts, s.scheduleRoutes()...)
	return rts
}

// exampleVars says where each shell variable of the curl examples comes from.
var exampleVars = map[string]string{
	"RATELANE_URL":     "the server's base URL, e.g. http://127.0.0.1:8080",
	"RATELANE_API_KEY": "an API key with the capability's role",
	"JOB_ID":           "a job id, from POST /v1/jobs or GET /v1/jobs; for worker capabilities, a job leased with POST /v1/leases",
	"LEASE_TOKEN":      "the lease_token POST /v1/leases returned with JOB_ID",
	"DEAD_JOB_ID":      "a terminal job's id, from GET /v1/dead-letters",
	"KEY_ID":           "an API key id, from GET /v1/keys",
	"SCHEDULE_ID":      "a schedule id, from POST /v1/schedules or GET /v1/schedules",
}

// curl renders the route's runnable example. Path wildcards become shell
// variables; a body that uses variables splices them between single-quoted
// parts so the JSON needs no escaping.
func (rt route) curl(region string) string {
	path := rt.path
	for name, v := range rt.vars {
		path = strings.ReplaceAll(path, "{"+name+"}", "$"+v)
	}
	path = strings.ReplaceAll(path, "{key}", "openai:gpt-4o-mini")
	if strings.Contains(rt.path, "{") && rt.hasParam("region") {
		path += "?region=" + region
	}
	var b strings.Builder
	b.WriteString("curl -sS")
	if rt.method != http.MethodGet {
		b.WriteString(" -X " + rt.method)
	}
	b.WriteString(` "$RATELANE_URL` + path + `"`)
	if rt.role != "" {
		b.WriteString(` -H "Authorization: Bearer $RATELANE_API_KEY"`)
	}
	if rt.example != "" {
		body := strings.ReplaceAll(rt.example, "$LEASE_TOKEN", `'"$LEASE_TOKEN"'`)
		body = strings.ReplaceAll(body, "$JOB_ID", `'"$JOB_ID"'`)
		b.WriteString(` -H "Content-Type: application/json" -d '` + body + `'`)
	}
	return b.String()
}

// fromMount is a mount.Param as the core's route table holds it.
func fromMount(p mount.Param) param { return param{in: p.In, name: p.Name, doc: p.Doc, enum: p.Enum} }
