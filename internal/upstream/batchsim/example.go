package batchsim

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"

	"github.com/ratelane/ratelane/internal/upstream"
)

// BadOutput is the answer of a request whose fault is [FaultBadOutput]: a
// JSON object with a property no structured-output schema allows (both
// providers require every object closed), so it fails any schema the
// request asked for, as a model that ignored its format would.
const BadOutput = `{"ratelane_sim_unexpected":true}`

// SchemaResponder answers a request that asked for structured output with
// a deterministic instance of its schema ([Example]), and any other
// request as upstream.DefaultResponder does. It is the simulator's
// default Responder, so that generic extraction requests (any schema) get
// an answer their schema accepts.
func SchemaResponder(r upstream.LLMRequest) string {
	if len(r.Schema) == 0 {
		return upstream.DefaultResponder(r)
	}
	var s map[string]any
	if err := json.Unmarshal(r.Schema, &s); err != nil {
		return upstream.DefaultResponder(r)
	}
	b, err := json.Marshal(Example(s))
	if err != nil {
		return upstream.DefaultResponder(r)
	}
	return string(b)
}

// Example returns a small deterministic value the JSON Schema s accepts,
// for the subset structured outputs use: const and enum (the first value),
// type (the first non-null of a list), object (every property, in key
// order), array (minItems copies of its items), string (minLength padding;
// "2026-01-01" for format date, "2026-01-01T00:00:00Z" for date-time),
// integer and number (minimum, else 0), boolean (false), anyOf and oneOf
// (the first branch), allOf (the first), and local $ref to $defs or
// definitions. A findings schema gives {"findings":[]}.
func Example(s map[string]any) any {
	return example(s, s, 0)
}

func example(s, root map[string]any, depth int) any {
	if depth > 16 || s == nil {
		return nil
	}
	if ref, ok := s["$ref"].(string); ok {
		for _, kw := range []string{"#/$defs/", "#/definitions/"} {
			if name, ok := strings.CutPrefix(ref, kw); ok {
				defs, _ := root[strings.Trim(kw[1:], "/")].(map[string]any)
				d, _ := defs[name].(map[string]any)
				return example(d, root, depth+1)
			}
		}
		return nil
	}
	if v, ok := s["const"]; ok {
		return v
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, kw := range []string{"anyOf", "oneOf", "allOf"} {
		if list, ok := s[kw].([]any); ok && len(list) > 0 {
			m, _ := list[0].(map[string]any)
			return example(m, root, depth+1)
		}
	}
	typ := ""
	switch t := s["type"].(type) {
	case string:
		typ = t
	case []any:
		for _, v := range t {
			if v, ok := v.(string); ok && v != "null" {
				typ = v
				break
			}
		}
		if typ == "" && slices.Contains(t, any("null")) {
			return nil
		}
	}
	if typ == "" && s["properties"] != nil {
		typ = "object"
	}
	switch typ {
	case "object":
		props, _ := s["properties"].(map[string]any)
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		sort.Strings(names)
		out := make(map[string]any, len(names))
		for _, k := range names {
			m, _ := props[k].(map[string]any)
			out[k] = example(m, root, depth+1)
		}
		return out
	case "array":
		n, _ := s["minItems"].(float64)
		items, _ := s["items"].(map[string]any)
		out := make([]any, 0, int(n))
		for range int(n) {
			out = append(out, example(items, root, depth+1))
		}
		return out
	case "string":
		switch s["format"] {
		case "date":
			return "2026-01-01"
		case "date-time":
			return "2026-01-01T00:00:00Z"
		}
		v := "sim"
		if n, ok := s["minLength"].(float64); ok && int(n) > len(v) {
			v += strings.Repeat("x", int(n)-len(v))
		}
		return v
	case "integer", "number":
		if m, ok := s["minimum"].(float64); ok {
			return m
		}
		if m, ok := s["exclusiveMinimum"].(float64); ok {
			return m + 1
		}
		return 0
	case "boolean":
		return false
	}
	return nil
}

// answer is the text of successful request r: BadOutput under
// FaultBadOutput, else the Responder's.
func (s *Server) answer(r simRequest) string {
	if r.fault == FaultBadOutput {
		return BadOutput
	}
	return s.cfg.Responder(r.req)
}
