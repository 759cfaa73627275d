package finding

import (
	"encoding/json"
	"slices"
	"sync"
)

// strictKeywords are the schema keywords kept in the provider-strict
// variant: the subset that OpenAI strict structured outputs (and the other
// providers' schema modes) accept everywhere. Length, range and count
// limits are dropped; ValidateOutput still enforces them.
var strictKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "description": true,
}

var strict = sync.OnceValue(func() []byte {
	var doc map[string]any
	if err := json.Unmarshal(schemaJSON, &doc); err != nil {
		panic("finding: embedded schema is not JSON: " + err.Error())
	}
	b, err := json.Marshal(strictify(doc))
	if err != nil {
		panic("finding: strict schema does not marshal: " + err.Error())
	}
	return b
})

// StrictSchema returns the provider-strict variant of Schema, for OpenAI
// "strict": true structured outputs. It differs from Schema in three ways:
//
//   - every object lists all its properties in "required"; optional fields
//     are still expressed by their nullable types (["integer","null"]), so
//     the model must send end_line and suggestion, as null when unused;
//   - keywords outside the strict subset ($schema, $id, minLength,
//     maxLength, minimum, maximum, maxItems) are removed;
//   - additionalProperties stays false on every object.
//
// Any output that satisfies StrictSchema and the dropped limits satisfies
// Schema, so ValidateOutput is the check for both. The caller may not
// modify the result.
func StrictSchema() []byte { return strict() }

// strictify returns a copy of a schema object reduced to strictKeywords,
// with every property required, recursing into properties and items.
func strictify(s map[string]any) map[string]any {
	out := make(map[string]any, len(s))
	for k, v := range s {
		if strictKeywords[k] {
			out[k] = v
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		names := make([]string, 0, len(props))
		sub := make(map[string]any, len(props))
		for name, p := range props {
			names = append(names, name)
			if pm, ok := p.(map[string]any); ok {
				sub[name] = strictify(pm)
			}
		}
		slices.Sort(names)
		out["properties"] = sub
		out["required"] = names
		out["additionalProperties"] = false
	}
	if items, ok := s["items"].(map[string]any); ok {
		out["items"] = strictify(items)
	}
	return out
}
