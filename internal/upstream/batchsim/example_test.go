package batchsim_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ratelane/ratelane/internal/review/finding"
	"github.com/ratelane/ratelane/internal/upstream"
	"github.com/ratelane/ratelane/internal/upstream/batchsim"
)

// TestSchemaResponder: the default answer of a structured request is an
// instance its schema accepts (checked with the validator the lane uses),
// the findings schema's is the empty review, a free-text request gets the
// default answer, and BadOutput fails every one of the schemas.
func TestSchemaResponder(t *testing.T) {
	t.Parallel()
	schemas := map[string]string{
		"findings": string(finding.StrictSchema()),
		"invoice": `{"type":"object","properties":{"vendor":{"type":"string","minLength":5},"total":{"type":"number","minimum":1},` +
			`"currency":{"type":"string","enum":["EUR","USD"]},"due":{"type":["string","null"],"format":"date"},` +
			`"lines":{"type":"array","minItems":2,"items":{"$ref":"#/$defs/line"}}},` +
			`"required":["vendor","total","currency","due","lines"],"additionalProperties":false,` +
			`"$defs":{"line":{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer","exclusiveMinimum":0}},` +
			`"required":["sku","qty"],"additionalProperties":false}}}`,
		"choice": `{"type":"object","properties":{"kind":{"anyOf":[{"const":"a"},{"type":"integer"}]},"ok":{"type":"boolean"}},` +
			`"required":["kind","ok"],"additionalProperties":false}`,
	}
	for name, raw := range schemas {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(raw)))
		if err != nil {
			t.Fatal(name, err)
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource("urn:test", doc); err != nil {
			t.Fatal(name, err)
		}
		sch, err := c.Compile("urn:test")
		if err != nil {
			t.Fatal(name, err)
		}
		answer := batchsim.SchemaResponder(upstream.LLMRequest{Schema: json.RawMessage(raw)})
		for text, valid := range map[string]bool{answer: true, batchsim.BadOutput: false} {
			v, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(text)))
			if err != nil {
				t.Fatalf("%s: %q is not JSON", name, text)
			}
			if err := sch.Validate(v); (err == nil) != valid {
				t.Errorf("%s: %s: valid %v, want %v (%v)", name, text, err == nil, valid, err)
			}
		}
		if name == "findings" && answer != `{"findings":[]}` {
			t.Errorf("findings schema answered %s, want the empty review", answer)
		}
	}
	if got := batchsim.SchemaResponder(upstream.LLMRequest{}); got != upstream.DefaultResponder(upstream.LLMRequest{}) {
		t.Errorf("free text answered %q", got)
	}
}
