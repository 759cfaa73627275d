package finding

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const leak = "SECRET_MODEL_TEXT"

const validOutput = `{"findings":[{"path":"a.go","line":3,"end_line":null,"severity":"error",
"category":"bug","message":"m","evidence":"x := 1","suggestion":null,"confidence":0.5},
{"path":"b.go","line":1,"end_line":2,"severity":"info","category":"docs","message":"m",
"evidence":"e","suggestion":"do it","confidence":1}]}`

func TestValidateOutputValid(t *testing.T) {
	t.Parallel()
	fs, err := ValidateOutput([]byte(validOutput))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].EndLine != nil || fs[1].EndLine == nil || *fs[1].EndLine != 2 ||
		fs[1].Suggestion == nil || *fs[1].Suggestion != "do it" || fs[0].Severity != SeverityError {
		t.Errorf("findings = %+v", fs)
	}
	// Optional fields may also be absent.
	fs, err = ValidateOutput([]byte(`{"findings":[{"path":"a","line":1,"severity":"info","category":"style","message":"m","evidence":"e","confidence":0}]}`))
	if err != nil || len(fs) != 1 {
		t.Errorf("absent optional fields: %v %v", fs, err)
	}
	if fs, err := ValidateOutput([]byte(` {"findings":[]} `)); err != nil || len(fs) != 0 {
		t.Errorf("empty findings: %v %v", fs, err)
	}
}

func TestValidateOutputErrors(t *testing.T) {
	t.Parallel()
	item := func(over string) string {
		return `{"findings":[{"path":"a","line":1,"severity":"info","category":"style","message":"m","evidence":"e","confidence":0.1` + over + `}]}`
	}
	tests := []struct {
		name string
		in   string
		kind OutputErrorKind
		msg  string
	}{
		{"empty", "", KindMalformed, "empty output"},
		{"prose", "Sure! " + leak, KindMalformed, "invalid JSON at byte offset"},
		{"truncated", `{"findings":[{"path":"` + leak, KindMalformed, "truncated"},
		{"trailing", `{"findings":[]} ` + leak, KindMalformed, "trailing data"},
		{"two values", `{"findings":[]}{"findings":[]}`, KindMalformed, "trailing data"},
		{"too big", `{"findings":[],"x":"` + strings.Repeat("a", MaxOutputBytes) + `"}`, KindMalformed, "exceeds"},
		{"not object", `["` + leak + `"]`, KindSchema, "violates type"},
		{"missing findings", `{}`, KindSchema, "missing findings"},
		{"extra top-level", `{"findings":[],"` + leak + `":1}`, KindSchema, "additionalProperties"},
		{"extra item field", item(`,"` + leak + `":1`), KindSchema, "/findings/0: violates additionalProperties"},
		{"bad severity", strings.Replace(item(""), `"info"`, `"`+leak+`"`, 1), KindSchema, "/findings/0/severity: violates enum"},
		{"bad category", strings.Replace(item(""), `"style"`, `"nit"`, 1), KindSchema, "/findings/0/category: violates enum"},
		{"confidence > 1", strings.Replace(item(""), `0.1`, `1.5`, 1), KindSchema, "/findings/0/confidence: violates maximum"},
		{"line 0", strings.Replace(item(""), `"line":1`, `"line":0`, 1), KindSchema, "/findings/0/line: violates minimum"},
		{"fractional line", strings.Replace(item(""), `"line":1`, `"line":1.5`, 1), KindSchema, "violates type"},
		{"huge line", strings.Replace(item(""), `"line":1`, `"line":1e300`, 1), KindSchema, "does not fit"},
		{"empty evidence", strings.Replace(item(""), `"evidence":"e"`, `"evidence":""`, 1), KindSchema, "minLength"},
		{"missing message", strings.Replace(item(""), `"message":"m",`, ``, 1), KindSchema, "missing message"},
		{"string line", strings.Replace(item(""), `"line":1`, `"line":"`+leak+`"`, 1), KindSchema, "/findings/0/line: violates type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ValidateOutput([]byte(tt.in))
			var oe *OutputError
			if !errors.As(err, &oe) {
				t.Fatalf("err = %v (%T), want *OutputError", err, err)
			}
			if oe.Kind != tt.kind || !strings.Contains(oe.Msg, tt.msg) {
				t.Errorf("err = %q (kind %s), want kind %s containing %q", err, oe.Kind, tt.kind, tt.msg)
			}
			if strings.Contains(err.Error(), leak) || len(oe.Msg) > 200 {
				t.Errorf("error leaks model output or is long: %q", err)
			}
		})
	}
}

func compile(t *testing.T, doc []byte) *jsonschema.Schema {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("mem://s.json", v); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem://s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStrictSchema(t *testing.T) {
	t.Parallel()
	strictSch := compile(t, StrictSchema())
	var doc map[string]any
	if err := json.Unmarshal(StrictSchema(), &doc); err != nil {
		t.Fatal(err)
	}
	walkObjects(t, doc)
	for _, kw := range []string{"$schema", "minLength", "maximum", "maxItems"} {
		if bytes.Contains(StrictSchema(), []byte(`"`+kw+`"`)) {
			t.Errorf("strict schema keeps %s", kw)
		}
	}
	// A strict-shaped output (every field present, nulls for unused
	// optionals) passes both schemas.
	v, _ := jsonschema.UnmarshalJSON(strings.NewReader(validOutput))
	if err := strictSch.Validate(v); err != nil {
		t.Errorf("strict schema rejects a valid output: %v", err)
	}
	if _, err := ValidateOutput([]byte(validOutput)); err != nil {
		t.Errorf("validation schema rejects a strict output: %v", err)
	}
	// Strict mode requires optional fields to be present.
	absent := `{"findings":[{"path":"a","line":1,"severity":"info","category":"style","message":"m","evidence":"e","confidence":0}]}`
	v, _ = jsonschema.UnmarshalJSON(strings.NewReader(absent))
	if err := strictSch.Validate(v); err == nil {
		t.Error("strict schema accepts absent optional fields")
	}
}

// walkObjects asserts that every object schema requires all its properties
// and forbids others.
func walkObjects(t *testing.T, s map[string]any) {
	t.Helper()
	props, ok := s["properties"].(map[string]any)
	if ok {
		req, _ := s["required"].([]any)
		if len(req) != len(props) || s["additionalProperties"] != false {
			t.Errorf("object with %d properties requires %d, additionalProperties %v", len(props), len(req), s["additionalProperties"])
		}
		for _, p := range props {
			walkObjects(t, p.(map[string]any))
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		walkObjects(t, items)
	}
}

func TestSchemaIsDraft2020(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	if err := json.Unmarshal(Schema(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" || doc["additionalProperties"] != false {
		t.Errorf("schema header = %v %v", doc["$schema"], doc["additionalProperties"])
	}
	compile(t, Schema())
}

func FuzzValidateOutput(f *testing.F) {
	f.Add([]byte(validOutput))
	f.Add([]byte(`{"findings":[]}`))
	f.Add([]byte(`{"findings":[{"path":"a","line":1e309}]}`))
	f.Add([]byte(`[[[[[[[[`))
	f.Add([]byte("\xff\xfe{"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		fs, err := ValidateOutput(raw)
		if err != nil {
			var oe *OutputError
			if !errors.As(err, &oe) || (oe.Kind != KindMalformed && oe.Kind != KindSchema) {
				t.Fatalf("error %v is not a typed OutputError", err)
			}
			return
		}
		for _, f := range fs {
			if f.Line < 1 || f.Confidence < 0 || f.Confidence > 1 || f.Severity.Rank() == 0 || f.Evidence == "" {
				t.Fatalf("accepted invalid finding %+v", f)
			}
		}
		// What was accepted, written back as Go encodes it, must be
		// accepted again unchanged: the schema and the struct agree on
		// every field, so nothing is lost or invented between the two.
		re, err := json.Marshal(Output{Findings: fs})
		if err != nil {
			t.Fatalf("re-encode %+v: %v", fs, err)
		}
		back, err := ValidateOutput(re)
		if err != nil || !reflect.DeepEqual(back, fs) {
			t.Fatalf("ValidateOutput(%q) = %+v but its re-encoding %s gives %+v, %v", raw, fs, re, back, err)
		}
	})
}
