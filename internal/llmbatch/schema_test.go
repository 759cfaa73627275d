package llmbatch

import (
	"encoding/json"
	"strings"
	"testing"
)

func decodeSchema(t *testing.T, raw string) map[string]any {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return s
}

// TestStrictSchemaProblem: every object must be closed wherever it is, and
// in strict mode list every property as required; the answer names the
// place.
func TestStrictSchemaProblem(t *testing.T) {
	t.Parallel()
	closed := `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`
	for _, tc := range []struct {
		name, schema string
		requireAll   bool
		want         string // a substring of the problem, "" for none
	}{
		{"closed, all required", closed, true, ""},
		{"open root", `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`, false, "schema: additionalProperties must be supplied and false"},
		{"additionalProperties true", `{"type":"object","properties":{},"additionalProperties":true}`, false, "schema: additionalProperties"},
		{"optional property, Anthropic", `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`, false, ""},
		{"optional property, strict", `{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":false}`, true, `"a" is missing`},
		{"open nested object", `{"type":"object","properties":{"a":` + `{"type":"object","properties":{}}},"required":["a"],"additionalProperties":false}`, false, "schema.properties.a: additionalProperties"},
		{"open object in items", `{"type":"object","properties":{"a":{"type":"array","items":{"properties":{}}}},"required":["a"],"additionalProperties":false}`, true, "schema.properties.a.items:"},
		{"open object in anyOf", `{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"type":["object","null"]}]}},"required":["a"],"additionalProperties":false}`, true, "schema.properties.a.anyOf[1]:"},
		{"open object in $defs", `{"type":"object","properties":{},"additionalProperties":false,"$defs":{"x":{"type":"object"}}}`, true, "schema.$defs.x:"},
	} {
		got := StrictSchemaProblem(decodeSchema(t, tc.schema), "schema", tc.requireAll)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestUnsatisfiableSchemaProblem: each contradiction it knows is found and
// named; schemas that some value satisfies pass, including ones whose
// contradictions sit where no value has to go (an optional property, an
// array that may be empty, one anyOf branch).
func TestUnsatisfiableSchemaProblem(t *testing.T) {
	t.Parallel()
	obj := func(props, required string) string {
		return `{"type":"object","properties":{` + props + `},"required":[` + required + `],"additionalProperties":false}`
	}
	for _, tc := range []struct {
		name, schema string
		want         string
	}{
		{"satisfiable", obj(`"a":{"type":"string","enum":["x"]},"n":{"type":"integer","minimum":1,"maximum":1}`, `"a","n"`), ""},
		{"empty enum", obj(`"a":{"type":"string","enum":[]}`, `"a"`), "schema.properties.a.enum: lists no value"},
		{"enum of the wrong type", obj(`"a":{"type":"string","enum":[1,2]}`, `"a"`), "no value is of type [string]"},
		{"enum allowed by a nullable type", obj(`"a":{"type":["string","null"],"enum":[null]}`, `"a"`), ""},
		{"integer enum of an integer", obj(`"a":{"type":"integer","enum":[2.0]}`, `"a"`), ""},
		{"const of the wrong type", obj(`"a":{"type":"boolean","const":"yes"}`, `"a"`), "const: is not of type"},
		{"const outside enum", obj(`"a":{"enum":["x"],"const":"y"}`, `"a"`), "const is not one of enum"},
		{"empty type list", obj(`"a":{"type":[]}`, `"a"`), "type: lists no type"},
		{"minimum above maximum", obj(`"a":{"type":"number","minimum":5,"maximum":1}`, `"a"`), "minimum 5 is above maximum 1"},
		{"minLength above maxLength", obj(`"a":{"type":"string","minLength":3,"maxLength":2}`, `"a"`), "minLength 3 is above maxLength 2"},
		{"minItems above maxItems", obj(`"a":{"type":"array","minItems":2,"maxItems":1}`, `"a"`), "minItems 2 is above maxItems 1"},
		{"empty exclusive range", obj(`"a":{"type":"number","exclusiveMinimum":1,"exclusiveMaximum":1}`, `"a"`), "exclusiveMinimum 1 is not below"},
		{"required but undefined in a closed object", obj(`"a":{"type":"string"}`, `"a","b"`), `required property "b" is not in properties`},
		{"required but undefined in an open object", `{"type":"object","properties":{},"required":["b"]}`, ""},
		{"required false", obj(`"a":false`, `"a"`), `required property "a" cannot be given a value`},
		{"optional contradiction", `{"type":"object","properties":{"a":{"enum":[]}},"additionalProperties":false}`, ""},
		{"nested required contradiction", obj(`"a":`+obj(`"b":{"type":"string","maxLength":-1,"minLength":0}`, `"b"`), `"a"`), `required property "a" cannot be given a value`},
		{"items needed but impossible", obj(`"a":{"type":"array","minItems":1,"items":{"enum":[]}}`, `"a"`), "minItems 1 needs items"},
		{"items impossible but not needed", obj(`"a":{"type":"array","items":{"enum":[]}}`, `"a"`), ""},
		{"every anyOf branch impossible", obj(`"a":{"anyOf":[{"enum":[]},{"type":[]}]}`, `"a"`), "anyOf: no branch can be satisfied"},
		{"one anyOf branch possible", obj(`"a":{"anyOf":[{"enum":[]},{"type":"null"}]}`, `"a"`), ""},
		{"empty oneOf", obj(`"a":{"oneOf":[]}`, `"a"`), "oneOf: lists no schema"},
		{"one allOf branch impossible", obj(`"a":{"allOf":[{"type":"string"},{"type":"string","enum":[3]}]}`, `"a"`), "allOf[1]"},
	} {
		got := UnsatisfiableSchemaProblem(decodeSchema(t, tc.schema), "schema")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
