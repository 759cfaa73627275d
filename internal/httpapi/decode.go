package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/job"
)

// maxBody is the most a request body may hold: a full payload plus room
// for the other fields. Reading stops there, so a client cannot make the
// server buffer more.
const maxBody = job.MaxPayloadBytes + 64<<10

// decode reads one JSON object from the request body into dst, refusing
// another media type (415), unknown fields (400), malformed JSON (400) and
// oversized bodies (413).
func decode(w http.ResponseWriter, r *http.Request, dst any) error {
	return decodeMax(w, r, dst, maxBody)
}

// decodeMax is decode with a body bound of limit bytes.
func decodeMax(w http.ResponseWriter, r *http.Request, dst any, limit int64) error {
	if err := checkJSONType(r); err != nil {
		return err
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return decodeError(err)
		}
		return problemf(http.StatusBadRequest, "malformed-json", "the body must hold exactly one JSON object, with nothing after it")
	}
	return nil
}

// checkJSONType accepts application/json and any +json media type.
func checkJSONType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return problemf(http.StatusUnsupportedMediaType, "unsupported-media-type",
		"send the body as JSON with the header Content-Type: application/json (got %s)", ct).
		withHeader("Accept-Post", "application/json")
}

// decodeError turns a json.Decoder error into a problem a person can act on.
func decodeError(err error) *apiError {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return problemf(http.StatusRequestEntityTooLarge, "payload-too-large",
			"the request body exceeds %d bytes; a job payload may hold at most %d bytes: store large content elsewhere and pass a reference to it in the payload",
			maxBody, job.MaxPayloadBytes)
	case errors.Is(err, io.EOF):
		return problemf(http.StatusBadRequest, "malformed-json", "the request body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return problemf(http.StatusBadRequest, "malformed-json", "the request body ends in the middle of a JSON value")
	case errors.As(err, &syntax):
		return problemf(http.StatusBadRequest, "malformed-json", "the request body is not valid JSON at byte %d: %s", syntax.Offset, syntax.Error())
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(body)"
		}
		e := problemf(http.StatusBadRequest, "invalid-request", "field %s must be a JSON %s, not %s", field, jsonKind(typ.Type.Kind().String()), typ.Value)
		e.p.Errors = []job.FieldError{{Field: field, Detail: fmt.Sprintf("must be a JSON %s, not %s", jsonKind(typ.Type.Kind().String()), typ.Value)}}
		return e
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for DisallowUnknownFields.
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		e := problemf(http.StatusBadRequest, "unknown-field", "the body has the unknown field %q; check its spelling against GET /v1", name)
		e.p.Errors = []job.FieldError{{Field: name, Detail: "unknown field"}}
		return e
	default:
		return problemf(http.StatusBadRequest, "malformed-json", "the request body could not be read as JSON")
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "map", "struct":
		return "object"
	default:
		return "number"
	}
}

// compactJSON returns raw without insignificant whitespace, or nil for an
// absent or null value (mount.CompactJSON, shared with mounted routes).
func compactJSON(raw json.RawMessage) (json.RawMessage, error) { return mount.CompactJSON(raw) }
