package httpapi

import (
	"cmp"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/job"
)

// capability is one entry of the discovery document.
type capability struct {
	Name          string         `json:"name"`
	Method        string         `json:"method"`
	Path          string         `json:"path"`
	Role          string         `json:"role" doc:"role a key needs (admin may do everything); public needs no key"`
	Summary       string         `json:"summary"`
	Parameters    []paramDoc     `json:"parameters,omitempty"`
	RequestSchema map[string]any `json:"request_schema,omitempty"`
	Example       string         `json:"example" doc:"a runnable curl command"`
	ExampleNeeds  []string       `json:"example_needs" doc:"shell variables the example uses; see variables"`
	// Resource is what a 404 or 409 of the capability names, with the
	// path's id (route.resource).
	Resource string `json:"resource,omitempty" doc:"what the capability acts on; its not-found and conflict problems name it and the path's id"`
}

type paramDoc struct {
	In          string   `json:"in"`
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Enum        []string `json:"enum,omitempty"`
}

// discovery is the GET /v1 document.
type discovery struct {
	Name           string            `json:"name"`
	Version        string            `json:"version"`
	OpenAPI        string            `json:"openapi"`
	Authentication string            `json:"authentication"`
	Errors         string            `json:"errors"`
	Regions        []string          `json:"regions"`
	Variables      map[string]string `json:"variables"`
	Capabilities   []capability      `json:"capabilities"`
	// ReservedKinds are the built-in job kinds POST /v1/jobs and POST
	// /v1/leases refuse (422 reserved-kind), and ReservedPrefix the
	// namespace kept for future ones.
	ReservedKinds  []job.BuiltinKind `json:"reserved_kinds" doc:"built-in job kinds only ratelane creates and runs; POST /v1/jobs and POST /v1/leases refuse them"`
	ReservedPrefix string            `json:"reserved_prefix" doc:"every kind starting with this is reserved too"`
}

var varRef = regexp.MustCompile(`\$([A-Z_]+)`)

func (s *Server) discoveryDoc() discovery {
	d := discovery{
		Name: "ratelane", Version: s.cfg.Version, OpenAPI: "/v1/openapi.json",
		Authentication: "send Authorization: Bearer <API key> on every /v1 endpoint except GET /v1 and GET /v1/openapi.json; " +
			"roles: producer (enqueue, read, cancel and redrive its tenant's jobs), worker (lease, heartbeat, report outcomes), admin (everything, every tenant)",
		Errors: "errors are RFC 9457 application/problem+json with type " + problemBase + "<slug>, a detail to act on and per-field errors; " +
			"a not-found (404) or conflict (409) names the capability's resource and the path's id",
		Regions:   s.regions,
		Variables: s.vars,
		// The packages that own built-in kinds reserve them (job.ReserveKind);
		// the kinds of every package linked into this program are listed.
		ReservedKinds: job.ReservedKinds(), ReservedPrefix: job.ReservedPrefix,
	}
	for _, rt := range s.table {
		c := capability{
			Name: rt.name, Method: rt.method, Path: rt.path, Role: string(rt.role), Summary: rt.summary,
			RequestSchema: schemaOf(rt.request, true), Example: rt.curl(s.regions[0]), ExampleNeeds: []string{"RATELANE_URL"},
			Resource: rt.resource,
		}
		c.Role = cmp.Or(c.Role, "public")
		for _, m := range varRef.FindAllStringSubmatch(c.Example, -1) {
			if m[1] != "RATELANE_URL" && !slices.Contains(c.ExampleNeeds, m[1]) {
				c.ExampleNeeds = append(c.ExampleNeeds, m[1])
			}
		}
		for _, p := range rt.params {
			c.Parameters = append(c.Parameters, paramDoc{In: p.in, Name: p.name, Description: p.doc, Enum: p.enum})
		}
		d.Capabilities = append(d.Capabilities, c)
	}
	return d
}

func (s *Server) handleGetDiscovery(w http.ResponseWriter, _ *http.Request, _ auth.Principal) error {
	return writeBytes(w, s.discovery)
}

func (s *Server) handleGetOpenAPI(w http.ResponseWriter, _ *http.Request, _ auth.Principal) error {
	return writeBytes(w, s.openapi)
}

// writeBytes answers 200 with a pre-rendered JSON document.
func writeBytes(w http.ResponseWriter, b []byte) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, err := w.Write(b)
	return err
}

var pathParam = regexp.MustCompile(`\{([a-z]+)\}`)

// openAPI builds the OpenAPI 3.1 document from the route table.
func (s *Server) openAPI() map[string]any {
	paths := map[string]any{}
	for _, rt := range s.table {
		item, _ := paths[rt.path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[rt.path] = item
		}
		item[strings.ToLower(rt.method)] = s.operation(rt)
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":   "ratelane API",
			"version": s.cfg.Version,
			"summary": "A durable, rate-aware job queue: admission control at lease time, 429s pause limit keys for every worker.",
			"license": map[string]any{"name": "Apache License 2.0", "identifier": "Apache-2.0"},
		},
		"servers": []any{map[string]any{
			"url": "{base}", "description": "a ratelane server",
			"variables": map[string]any{"base": map[string]any{"default": "http://127.0.0.1:8080", "description": "the server's base URL ($RATELANE_URL)"}},
		}},
		"paths": paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{
				"apiKey": map[string]any{"type": "http", "scheme": "bearer", "description": "a ratelane API key (rl_<prefix>_<secret>)"},
			},
			"schemas": map[string]any{"Problem": schemaOf(Problem{}, false)},
			"responses": map[string]any{
				"Problem": map[string]any{
					"description": "an RFC 9457 problem",
					"content":     map[string]any{"application/problem+json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Problem"}}},
				},
			},
		},
		"security": []any{map[string]any{"apiKey": []any{}}},
	}
}

func (s *Server) operation(rt route) map[string]any {
	op := map[string]any{
		"operationId": rt.name,
		"summary":     rt.summary,
		"tags":        []any{tag(rt.path)},
		"responses": map[string]any{
			strconv.Itoa(rt.status): successResponse(rt),
			// Every route may answer a problem: bad input, a missing or
			// weak key, overload, an unavailable store.
			"4XX":     map[string]any{"$ref": "#/components/responses/Problem"},
			"5XX":     map[string]any{"$ref": "#/components/responses/Problem"},
			"default": map[string]any{"$ref": "#/components/responses/Problem"},
		},
	}
	if rt.role == "" {
		op["security"] = []any{}
	} else {
		op["description"] = "Needs a " + string(rt.role) + " or admin API key."
	}
	var params []any
	for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
		params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
	}
	for _, p := range rt.params {
		schema := map[string]any{"type": "string"}
		if len(p.enum) > 0 {
			schema["enum"] = p.enum
		}
		params = append(params, map[string]any{"name": p.name, "in": p.in, "description": p.doc, "schema": schema})
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	if rt.request != nil {
		op["requestBody"] = map[string]any{
			"required": true,
			"content":  map[string]any{"application/json": map[string]any{"schema": schemaOf(rt.request, true)}},
		}
	}
	return op
}

func successResponse(rt route) map[string]any {
	resp := map[string]any{"description": rt.summary}
	switch {
	case rt.path == "/metrics":
		resp["content"] = map[string]any{"text/plain": map[string]any{"schema": map[string]any{"type": "string"}}}
	case rt.response != nil:
		media := rt.media
		media = cmp.Or(media, "application/json")
		resp["content"] = map[string]any{media: map[string]any{"schema": schemaOf(rt.response, false)}}
	}
	return resp
}

// tag groups operations by the first path segment after /v1.
func tag(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1/")
	switch {
	case !ok && path != "/v1":
		return "operations"
	case !ok || rest == "openapi.json":
		return "docs"
	}
	first, _, _ := strings.Cut(rest, "/")
	return first
}
