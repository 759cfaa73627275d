package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemoSmall runs the demo end to end in a small mode and expects
// every delivery to arrive exactly once.
func TestDemoSmall(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	res, err := Run(context.Background(), Config{Events: 20, Subscribers: 3, Duration: 60 * time.Second, Out: &out, Refresh: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	WriteTable(&out, res)
	t.Log("\n" + out.String())
	if !res.OK() || res.Lost != 0 || res.Duplicates != 0 || res.Delivered != 60 {
		t.Fatalf("result %+v, want 60 delivered, none lost or duplicated", res)
	}
	if !strings.Contains(out.String(), "delivered 60/60") {
		t.Fatal("no plain progress line for a non-terminal writer")
	}
}

func TestAllowances(t *testing.T) {
	t.Parallel()
	a := Allowances(20)
	if a[0].Rate != 2 || a[19].Rate != 200 || a[0].Burst < 1 {
		t.Fatalf("allowances %+v, want 2/s to 200/s", a)
	}
}
