package httpapi

import (
	"encoding/json"
	"reflect"
	"strings"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/auth"
	"github.com/ratelane/ratelane/internal/job"
)

// schemaOf derives a JSON Schema (2020-12, the dialect of OpenAPI 3.1) from
// a Go type, following encoding/json's rules, so the documented schema is
// the one the decoder enforces. Request schemas forbid unknown properties
// (the API decodes with DisallowUnknownFields) and mark fields tagged
// required:"true"; response schemas mark every field without omitempty or
// omitzero as required. Tags doc and enum add a description and allowed
// values.
func schemaOf(v any, request bool) map[string]any {
	if v == nil {
		return nil
	}
	return typeSchema(reflect.TypeOf(v), request)
}

var (
	timeType = reflect.TypeFor[time.Time]()
	durType  = reflect.TypeFor[time.Duration]()
	rawType  = reflect.TypeFor[json.RawMessage]()
	anyMap   = reflect.TypeFor[map[string]any]()
	// windowType marshals itself (see admission.Window.MarshalJSON).
	windowType = reflect.TypeFor[admission.Window]()
)

// enums lists the values of the vocabulary's string types.
var enums = map[reflect.Type][]string{
	reflect.TypeFor[job.State]():  states(),
	reflect.TypeFor[job.Reason](): reasons(),
	reflect.TypeFor[job.Lane]():   {string(job.LaneInteractive), string(job.LaneBatch)},
	reflect.TypeFor[auth.Role]():  {string(auth.RoleProducer), string(auth.RoleWorker), string(auth.RoleAdmin)},
}

func states() []string {
	out := make([]string, len(job.States))
	for i, s := range job.States {
		out[i] = string(s)
	}
	return out
}

func reasons() []string {
	out := make([]string, len(job.Reasons))
	for i, r := range job.Reasons {
		out[i] = string(r)
	}
	return out
}

func typeSchema(t reflect.Type, request bool) map[string]any {
	switch t {
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case durType:
		return map[string]any{"type": "integer", "description": "nanoseconds"}
	case rawType:
		return map[string]any{"description": "any JSON value"}
	case anyMap:
		return map[string]any{"type": "object"}
	case windowType: // custom JSON: period as a duration string
		return map[string]any{"type": "object", "required": []string{"limit", "period"}, "properties": map[string]any{
			"limit":  map[string]any{"type": "number", "description": "cost units that may start in any window"},
			"period": map[string]any{"type": "string", "description": "the window's length as a Go duration, 1ms to 24h: 1s, 1m"},
			"fixed":  map[string]any{"type": "boolean", "description": "true: each period aligned to the Unix epoch counts (a quota reset at :00); absent: any period (sliding)"},
			"guard":  map[string]any{"type": "string", "description": "fixed windows: a start this close to a window's end also counts in the next window (a Go duration); absent means 0"},
		}}
	}
	if e, ok := enums[t]; ok {
		return map[string]any{"type": "string", "enum": e}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeSchema(t.Elem(), request)
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": typeSchema(t.Elem(), request)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": typeSchema(t.Elem(), request)}
	case reflect.Struct:
		return structSchema(t, request)
	}
	return map[string]any{}
}

func structSchema(t reflect.Type, request bool) map[string]any {
	props := map[string]any{}
	required := []string{}
	addFields(t, request, props, &required)
	s := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	if request {
		s["additionalProperties"] = false
	}
	return s
}

// addFields adds t's JSON fields, flattening embedded structs as
// encoding/json does.
func addFields(t reflect.Type, request bool, props map[string]any, required *[]string) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(ft, request, props, required)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		fs := typeSchema(f.Type, request)
		if doc := f.Tag.Get("doc"); doc != "" {
			fs["description"] = doc
		}
		if e := f.Tag.Get("enum"); e != "" {
			fs["enum"] = strings.Split(e, ",")
		}
		props[name] = fs
		optional := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		if typ, ok := fs["type"].(string); ok && !request && !optional && f.Type.Kind() == reflect.Pointer {
			fs["type"] = []string{typ, "null"} // encoding/json writes a nil pointer as null
		}
		if (request && f.Tag.Get("required") == "true") || (!request && !optional) {
			*required = append(*required, name)
		}
	}
}
