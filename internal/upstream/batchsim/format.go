package batchsim

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/ratelane/ratelane/internal/llmbatch"
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
	if why := llmbatch.StrictSchemaProblem(s, field, requireAll); why != "" {
		return nil, why
	}
	return raw, ""
}
