package hookapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ratelane/ratelane/internal/httpapi/mount"
	"github.com/ratelane/ratelane/internal/store"
)

// TestPutSubscriberErrorNamesALostSave checks that a PUT whose save lost to
// another request answers a 409 that says so, rather than the API's generic
// conflict about a job's state, and that every other error passes through.
func TestPutSubscriberErrorNamesALostSave(t *testing.T) {
	for name, err := range map[string]error{
		"wrapped": fmt.Errorf("subscriber acme_sub: save: %w", store.ErrConflict),
		// A lost create also settles the key it wrote (Registry.Put).
		"joined": errors.Join(fmt.Errorf("save: %w", store.ErrConflict), errors.New("settle: store closed")),
	} {
		var p *mount.Problem
		if !errors.As(putSubscriberError(err, "acme_sub"), &p) {
			t.Fatalf("%s: %v is not a problem", name, putSubscriberError(err, "acme_sub"))
		}
		if p.Status != http.StatusConflict || p.Slug != "conflict" {
			t.Errorf("%s: status %d slug %q, want 409 conflict", name, p.Status, p.Slug)
		}
		for _, want := range []string{"subscriber acme_sub", "nothing of this PUT was saved", "PUT again"} {
			if !strings.Contains(p.Detail, want) {
				t.Errorf("%s: detail %q does not say %q", name, p.Detail, want)
			}
		}
	}
	other := fmt.Errorf("subscriber acme_sub: limit key: %w", store.ErrNotFound)
	if got := putSubscriberError(other, "acme_sub"); got != other {
		t.Errorf("an error that is not a lost save came back as %v", got)
	}
}
