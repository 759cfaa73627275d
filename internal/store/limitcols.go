package store

import (
	"encoding/json"
	"fmt"

	"github.com/ratelane/ratelane/internal/admission"
)

// LimitKeyCols are the limit_keys columns both SQL drivers read a key
// state from, in the order their scanners take them (the times as Unix
// nanoseconds; windows and shapes as the documents WindowsJSON and
// admission.State.MarshalShapes write).
const LimitKeyCols = `name, rate, burst, concurrency, adaptive, min_rate, learned_rate, tat, paused_until, in_flight,
	last_decrease, windows, shapes, per_start`

// WindowsJSON encodes a key's windows for the windows column: "[]" when
// it has none.
func WindowsJSON(ws []admission.Window) string {
	if len(ws) == 0 {
		return "[]"
	}
	b, err := json.Marshal(ws)
	if err != nil {
		// Window has only plain fields; Marshal cannot fail on it.
		panic(fmt.Sprintf("encode windows: %v", err))
	}
	return string(b)
}

// DecodeLimitKey fills st's windows and shapes from the windows and
// shapes columns of its row, the part of a key's scan that does not
// depend on the driver's column types.
func DecodeLimitKey(st *admission.State, windows, shapes []byte) error {
	if len(windows) > 0 && string(windows) != "[]" {
		if err := json.Unmarshal(windows, &st.Windows); err != nil {
			return fmt.Errorf("limit key %s: windows: %w", st.Name, err)
		}
	}
	if err := st.UnmarshalShapes(shapes); err != nil {
		return fmt.Errorf("limit key %s: %w", st.Name, err)
	}
	return nil
}
