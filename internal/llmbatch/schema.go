package llmbatch

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
)

// StrictSchemaProblem checks a decoded JSON Schema against the providers'
// structured-output rules and returns what breaks them, naming the place
// under at ("" when nothing does): every object, wherever it is (under
// properties, items, anyOf, oneOf, allOf, $defs or definitions), must set
// additionalProperties to false (both providers), and with requireAll
// (OpenAI's strict mode) must list every property in required. A request
// whose schema breaks them is refused by the provider with a 400, which in
// a batch fails that item hours after submission; the batch lane checks
// them at intake instead, and the simulator answers as the providers do.
func StrictSchemaProblem(s map[string]any, at string, requireAll bool) string {
	props, _ := s["properties"].(map[string]any)
	if isObjectSchema(s) {
		if ap, ok := s["additionalProperties"].(bool); !ok || ap {
			return at + ": additionalProperties must be supplied and false on every object"
		}
		if requireAll {
			req, _ := s["required"].([]any)
			for _, k := range sortedKeys(props) {
				if !slices.Contains(req, any(k)) {
					return fmt.Sprintf("%s: required must list every property in strict mode; %q is missing", at, k)
				}
			}
		}
	}
	for _, c := range subschemas(s, at) {
		if why := StrictSchemaProblem(c.s, c.at, requireAll); why != "" {
			return why
		}
	}
	return ""
}

// UnsatisfiableSchemaProblem returns why no JSON value can satisfy a
// decoded schema, naming the place under at, or "" when it finds no such
// reason. It is sound but not complete: each reason it gives makes the
// schema unsatisfiable (an empty enum or type list; no enum or const
// value of the allowed types; a lower bound above its upper bound; a
// required property that a closed object does not define, or whose own
// schema is unsatisfiable or false; items that must exist but cannot;
// an allOf with one, or an anyOf or oneOf with every, branch
// unsatisfiable), but a schema it passes may still be unsatisfiable in
// ways only solving it would show. $ref targets are not followed.
// Without it, a schema no answer can meet is accepted and every item
// carrying it is quarantined after all its attempts.
func UnsatisfiableSchemaProblem(v any, at string) string {
	if b, ok := v.(bool); ok {
		if !b {
			return at + ": is false, which no value satisfies"
		}
		return ""
	}
	s, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	types, typed := schemaTypes(s)
	if typed && len(types) == 0 {
		return at + ".type: lists no type"
	}
	if why := valuesProblem(s, at, types, typed); why != "" {
		return why
	}
	for _, b := range [][2]string{{"minimum", "maximum"}, {"minLength", "maxLength"}, {"minItems", "maxItems"},
		{"minProperties", "maxProperties"}, {"minContains", "maxContains"}} {
		lo, okLo := number(s[b[0]])
		hi, okHi := number(s[b[1]])
		if okLo && okHi && lo > hi {
			return fmt.Sprintf("%s: %s %v is above %s %v", at, b[0], lo, b[1], hi)
		}
	}
	lo, okLo := number(s["exclusiveMinimum"])
	hi, okHi := number(s["exclusiveMaximum"])
	if okLo && okHi && lo >= hi {
		return fmt.Sprintf("%s: exclusiveMinimum %v is not below exclusiveMaximum %v", at, lo, hi)
	}
	if why := objectProblem(s, at, types, typed); why != "" {
		return why
	}
	if n, _ := number(s["minItems"]); n > 0 && (!typed || slices.Contains(types, "array")) {
		if why := UnsatisfiableSchemaProblem(s["items"], at+".items"); why != "" {
			return fmt.Sprintf("%s: minItems %v needs items, and %s", at, n, why)
		}
	}
	return branchesProblem(s, at)
}

// objectProblem checks an object schema's required properties: each must
// be defined when the object is closed, and satisfiable.
func objectProblem(s map[string]any, at string, types []string, typed bool) string {
	if typed && !slices.Contains(types, "object") {
		return ""
	}
	props, _ := s["properties"].(map[string]any)
	req, _ := s["required"].([]any)
	closed := s["additionalProperties"] == false
	for _, r := range req {
		name, _ := r.(string)
		sub, defined := props[name]
		if !defined {
			if closed {
				return fmt.Sprintf("%s: required property %q is not in properties, and additionalProperties false forbids it", at, name)
			}
			continue
		}
		if why := UnsatisfiableSchemaProblem(sub, at+".properties."+name); why != "" {
			return fmt.Sprintf("%s: required property %q cannot be given a value (%s)", at, name, why)
		}
	}
	return ""
}

// branchesProblem checks allOf (every branch must be satisfiable) and
// anyOf and oneOf (at least one must be).
func branchesProblem(s map[string]any, at string) string {
	all, _ := s["allOf"].([]any)
	for i, b := range all {
		if why := UnsatisfiableSchemaProblem(b, fmt.Sprintf("%s.allOf[%d]", at, i)); why != "" {
			return why
		}
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		list, present := s[kw].([]any)
		if !present {
			continue
		}
		if len(list) == 0 {
			return fmt.Sprintf("%s.%s: lists no schema", at, kw)
		}
		first, satisfiable := "", false
		for i, b := range list {
			why := UnsatisfiableSchemaProblem(b, fmt.Sprintf("%s.%s[%d]", at, kw, i))
			if why == "" {
				satisfiable = true
				break
			}
			if first == "" {
				first = why
			}
		}
		if !satisfiable {
			return fmt.Sprintf("%s.%s: no branch can be satisfied (%s)", at, kw, first)
		}
	}
	return ""
}

// valuesProblem checks enum and const against each other and the types.
func valuesProblem(s map[string]any, at string, types []string, typed bool) string {
	enum, hasEnum := s["enum"].([]any)
	if _, present := s["enum"]; present && (!hasEnum || len(enum) == 0) {
		return at + ".enum: lists no value"
	}
	c, hasConst := s["const"]
	if hasConst {
		if typed && !typeAllows(types, c) {
			return fmt.Sprintf("%s.const: is not of type %v", at, types)
		}
		if hasEnum && !slices.ContainsFunc(enum, func(e any) bool { return jsonEqual(e, c) }) {
			return at + ": const is not one of enum"
		}
	}
	if hasEnum && typed && !slices.ContainsFunc(enum, func(e any) bool { return typeAllows(types, e) }) {
		return fmt.Sprintf("%s.enum: no value is of type %v", at, types)
	}
	return ""
}

// schemaTypes returns a schema's type keyword as a list, and whether it
// has one.
func schemaTypes(s map[string]any) ([]string, bool) {
	switch t := s["type"].(type) {
	case string:
		return []string{t}, true
	case []any:
		out := make([]string, 0, len(t))
		for _, v := range t {
			if name, ok := v.(string); ok {
				out = append(out, name)
			}
		}
		return out, true
	}
	return nil, false
}

// typeAllows reports whether a decoded JSON value has one of the types.
func typeAllows(types []string, v any) bool {
	var kinds []string
	switch x := v.(type) {
	case nil:
		kinds = []string{"null"}
	case bool:
		kinds = []string{"boolean"}
	case string:
		kinds = []string{"string"}
	case []any:
		kinds = []string{"array"}
	case map[string]any:
		kinds = []string{"object"}
	case float64:
		kinds = []string{"number"}
		if x == math.Trunc(x) {
			kinds = append(kinds, "integer")
		}
	case json.Number:
		kinds = []string{"number"}
		if _, err := x.Int64(); err == nil {
			kinds = append(kinds, "integer")
		}
	}
	return slices.ContainsFunc(kinds, func(k string) bool { return slices.Contains(types, k) })
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

func jsonEqual(a, b any) bool {
	x, errA := json.Marshal(a)
	y, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(x) == string(y)
}

// isObjectSchema reports a schema node that describes an object.
func isObjectSchema(s map[string]any) bool {
	if types, ok := schemaTypes(s); ok {
		return slices.Contains(types, "object")
	}
	_, ok := s["properties"]
	return ok
}

// located is a subschema and where it is.
type located struct {
	at string
	s  map[string]any
}

// subschemas lists a node's object subschemas in a stable order.
func subschemas(s map[string]any, at string) []located {
	var out []located
	add := func(at string, v any) {
		if m, ok := v.(map[string]any); ok {
			out = append(out, located{at, m})
		}
	}
	props, _ := s["properties"].(map[string]any)
	for k, v := range props {
		add(at+".properties."+k, v)
	}
	add(at+".items", s["items"])
	for _, kw := range []string{"anyOf", "oneOf", "allOf"} {
		list, _ := s[kw].([]any)
		for i, v := range list {
			add(fmt.Sprintf("%s.%s[%d]", at, kw, i), v)
		}
	}
	for _, kw := range []string{"$defs", "definitions"} {
		defs, _ := s[kw].(map[string]any)
		for k, v := range defs {
			add(at+"."+kw+"."+k, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

func sortedKeys(m map[string]any) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
