package finding

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

//go:embed schema.json
var schemaJSON []byte

// schemaURL names the embedded schema inside the compiler; it is never
// fetched.
const schemaURL = "https://ratelane.dev/schemas/review-findings/v1.json"

// MaxOutputBytes is the largest model output ValidateOutput accepts. It
// bounds the work done on a runaway response; 1 MiB is far above what 200
// findings of schema v1 can take.
const MaxOutputBytes = 1 << 20

// Schema returns the validation schema (JSON Schema draft 2020-12) of the
// model output: {"findings": [Finding...]}. Optional fields (end_line,
// suggestion) may be absent or null. The caller may not modify the result.
func Schema() []byte { return schemaJSON }

var compiled = sync.OnceValues(func() (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	return c.Compile(schemaURL)
})

// OutputErrorKind says why model output was rejected.
type OutputErrorKind string

const (
	// KindMalformed means the output is not one JSON value (or is too big).
	KindMalformed OutputErrorKind = "malformed"
	// KindSchema means the output is JSON but violates schema v1.
	KindSchema OutputErrorKind = "schema"
)

// OutputError is returned by ValidateOutput. Msg is short and never
// contains model output or diff content, so the error is safe to log and
// to store as a terminal reason detail.
type OutputError struct {
	Kind OutputErrorKind
	Msg  string
}

// Error implements error.
func (e *OutputError) Error() string {
	return fmt.Sprintf("model output %s: %s", e.Kind, e.Msg)
}

// ValidateOutput parses raw model output, validates it against Schema and
// returns its findings. Errors are always *OutputError. The findings are
// not yet checked against the diff: call Verify next.
func ValidateOutput(raw []byte) ([]Finding, error) {
	sch, err := compiled()
	if err != nil {
		return nil, fmt.Errorf("compile embedded schema: %w", err)
	}
	if len(raw) > MaxOutputBytes {
		return nil, &OutputError{KindMalformed, fmt.Sprintf("output exceeds %d bytes", MaxOutputBytes)}
	}
	v, oerr := decodeOne(raw)
	if oerr != nil {
		return nil, oerr
	}
	if err := sch.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return nil, &OutputError{KindSchema, describe(ve)}
		}
		return nil, &OutputError{KindSchema, "validation failed"}
	}
	var out Output
	if err := json.Unmarshal(raw, &out); err != nil {
		// The schema allows e.g. 1.0 or 1e30 as an integer; Go does not.
		return nil, &OutputError{KindSchema, "a number does not fit its field"}
	}
	return out.Findings, nil
}

// decodeOne decodes exactly one JSON value, with numbers kept exact as the
// validator expects.
func decodeOne(raw []byte) (any, *OutputError) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &OutputError{KindMalformed, syntaxMessage(err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &OutputError{KindMalformed, "trailing data after the JSON value"}
	}
	return v, nil
}

// syntaxMessage describes a decoding error without quoting the input, which
// encoding/json's own messages do ("invalid character 'x' ...").
func syntaxMessage(err error) string {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF):
		return "empty output"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	case errors.As(err, &se):
		return "invalid JSON at byte offset " + strconv.FormatInt(se.Offset, 10)
	}
	return "invalid JSON"
}

// knownNames are the property names that may appear in an error location:
// anything else in an instance location came from the model and is masked.
var knownNames = map[string]bool{
	"findings": true, "path": true, "line": true, "end_line": true, "severity": true,
	"category": true, "message": true, "evidence": true, "suggestion": true, "confidence": true,
}

// describe summarises the first leaf of a validation error as
// "<location>: <keyword>", using only array indexes, schema property names
// and schema keywords.
func describe(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	loc := make([]string, len(ve.InstanceLocation))
	for i, tok := range ve.InstanceLocation {
		if _, err := strconv.Atoi(tok); err == nil || knownNames[tok] {
			loc[i] = tok
		} else {
			loc[i] = "?"
		}
	}
	kw := "constraint"
	if p := ve.ErrorKind.KeywordPath(); len(p) > 0 {
		kw = p[len(p)-1]
	}
	msg := "/" + strings.Join(loc, "/") + ": violates " + kw
	if r, ok := ve.ErrorKind.(*kind.Required); ok {
		msg += " (missing " + strings.Join(maskUnknown(r.Missing), ", ") + ")"
	}
	return msg
}

func maskUnknown(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "?"
		if knownNames[n] {
			out[i] = n
		}
	}
	return out
}
