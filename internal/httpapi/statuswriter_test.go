package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestStatusWriter pins what the API's metrics and the dashboard's proxy
// read from StatusWriter: the first status written, 200 for a body written
// without WriteHeader, 0 before anything, and the writer beneath reachable.
func TestStatusWriter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		write func(w http.ResponseWriter)
		want  int
	}{
		{"nothing", func(http.ResponseWriter) {}, 0},
		{"body first", func(w http.ResponseWriter) { _, _ = w.Write([]byte("x")); w.WriteHeader(http.StatusTeapot) }, http.StatusOK},
		{"first status kept", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusUnauthorized)
			w.WriteHeader(http.StatusInternalServerError)
		}, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			sw := &StatusWriter{ResponseWriter: rec}
			tc.write(sw)
			if sw.Status != tc.want {
				t.Errorf("Status = %d, want %d", sw.Status, tc.want)
			}
			if sw.Unwrap() != rec {
				t.Error("Unwrap does not return the writer beneath")
			}
		})
	}
}
