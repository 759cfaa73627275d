package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/ratelane/ratelane/internal/crashpoint"
)

// ackThenCrash answers like writeJSON, but with a Content-Length and a
// flush, so the client holds the complete acknowledgement, then passes
// the crash point point. Only builds with crash points call it (the call
// sites test crashpoint.Enabled, a constant), so the proof "the client
// was answered, then the process died" is exact.
func ackThenCrash(w http.ResponseWriter, status int, v any, point string) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	if _, err := w.Write(b); err != nil {
		return err
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		return err
	}
	crashpoint.Hit(point)
	return nil
}
