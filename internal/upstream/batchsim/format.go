package batchsim

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
)

// schemaName is OpenAI's rule for response_format.json_schema.name.
var schemaName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// openAIFormat is an OpenAI chat completions response_format.
type openAIFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// anthropicOutputConfig is an Anthropic Messages output_config.
type anthropicOutputConfig struct {
	Format *struct {
		Type   string          `json:"type"`
		Schema json.RawMessage `json:"schema"`
	} `json:"format"`
}

// structured reads a request's structured-output request in provider's
// wire format: the schema it asks the answer to match (nil for free text)
// and what is wrong with it ("" when nothing is). OpenAI's strict mode
// requires every object closed (additionalProperties false) and every
// property required; Anthropic's structured outputs require objects
// closed. Both providers refuse such a request with a 400, which in a
// batch is a per-request error.
func structured(p chatParams, provider string) (json.RawMessage, string) {
	switch provider {
	case ProviderOpenAI:
		if len(p.ResponseFormat) == 0 || string(p.ResponseFormat) == "null" {
			return nil, ""
		}
		var f openAIFormat
		if err := json.Unmarshal(p.ResponseFormat, &f); err != nil {
			return nil, "response_format: must be an object"
		}
		switch f.Type {
		case "text", "json_object":
			return nil, ""
		case "json_schema":
		default:
			return nil, fmt.Sprintf("response_format.type: must be text, json_object or json_schema, not %q", f.Type)
		}
		if f.JSONSchema == nil {
			return nil, "response_format.json_schema: required when type is json_schema"
		}
		if !schemaName.MatchString(f.JSONSchema.Name) {
			return nil, "response_format.json_schema.name: must match ^[a-zA-Z0-9_-]{1,64}$"
		}
		strict := f.JSONSchema.Strict != nil && *f.JSONSchema.Strict
		return checkSchema(f.JSONSchema.Schema, "response_format.json_schema.schema", strict)
	default:
		if len(p.OutputConfig) == 0 || string(p.OutputConfig) == "null" {
			return nil, ""
		}
		var oc anthropicOutputConfig
		if err := json.Unmarshal(p.OutputConfig, &oc); err != nil {
			return nil, "output_config: must be an object"
		}
		if oc.Format == nil {
			return nil, ""
		}
		if oc.Format.Type != "json_schema" {
			return nil, fmt.Sprintf("output_config.format.type: must be json_schema, not %q", oc.Format.Type)
		}
		return checkSchema(oc.Format.Schema, "output_config.format.schema", false)
	}
}

// checkSchema decodes a schema and checks the providers' structured-output
// rules on every object in it; requireAll is OpenAI's strict rule that
// every property is required.
func checkSchema(raw json.RawMessage, field string, requireAll bool) (json.RawMessage, string) {
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil || s == nil {
		return nil, field + ": must be a JSON Schema object"
	}
	if why := checkNode(s, field, requireAll); why != "" {
		return nil, why
	}
	return raw, ""
}

func checkNode(s map[string]any, at string, requireAll bool) string {
	props, _ := s["properties"].(map[string]any)
	if isObject(s) {
		if ap, ok := s["additionalProperties"].(bool); !ok || ap {
			return at + ": additionalProperties must be supplied and false on every object"
		}
		if requireAll {
			req, _ := s["required"].([]any)
			names := make([]string, 0, len(props))
			for k := range props {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				if !slices.Contains(req, any(k)) {
					return fmt.Sprintf("%s: required must list every property in strict mode; %q is missing", at, k)
				}
			}
		}
	}
	var children []struct {
		at string
		s  map[string]any
	}
	add := func(at string, v any) {
		if m, ok := v.(map[string]any); ok {
			children = append(children, struct {
				at string
				s  map[string]any
			}{at, m})
		}
	}
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
	sort.Slice(children, func(i, j int) bool { return children[i].at < children[j].at })
	for _, c := range children {
		if why := checkNode(c.s, c.at, requireAll); why != "" {
			return why
		}
	}
	return ""
}

// isObject reports a schema node that describes an object.
func isObject(s map[string]any) bool {
	switch t := s["type"].(type) {
	case string:
		return t == "object"
	case []any:
		return slices.Contains(t, any("object"))
	}
	_, ok := s["properties"]
	return ok
}
