package job

import (
	"errors"
	"strings"
	"testing"
)

func TestReservedKinds(t *testing.T) {
	t.Parallel()
	ReserveKind("test.builtin", "the kind test")
	ReserveKind("test.builtin", "the kind test") // idempotent for the same owner
	for kind, want := range map[string]bool{
		"test.builtin": true, "ratelane.anything": true, "ratelane.": true,
		"test.builtin2": false, "email.send": false, "ratelane": false, "": false,
	} {
		if _, got := Reserved(kind); got != want {
			t.Errorf("Reserved(%q) = %v, want %v", kind, got, want)
		}
	}
	var names []string
	for _, k := range ReservedKinds() {
		names = append(names, k.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "test.builtin") {
		t.Fatalf("ReservedKinds() = %v, want test.builtin listed", names)
	}

	err := CheckPublicKind("kind", "test.builtin")
	var rk *ReservedKindError
	if !errors.As(err, &rk) || rk.Field != "kind" || rk.Kind.Owner != "the kind test" ||
		!strings.Contains(err.Error(), `"test.builtin"`) || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("CheckPublicKind = %v, want a ReservedKindError naming the field, kind and owner", err)
	}
	if err := CheckPublicKind("kind", "email.send"); err != nil {
		t.Fatalf("CheckPublicKind(email.send) = %v", err)
	}

	defer func() {
		if recover() == nil {
			t.Fatal("a second owner of a reserved kind did not panic")
		}
	}()
	ReserveKind("test.builtin", "someone else")
}
