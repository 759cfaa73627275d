package store

import (
	"fmt"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
)

// KeyTx is a driver's side of UpsertLimit and DeclareLimit: the reads and
// the write of one limit key, in the transaction that holds it (created
// if it was missing, read and locked), in the driver's SQL. What to do
// with them is ReconfigureKey, the same on every driver.
type KeyTx struct {
	// Declared returns the fingerprint of the declaration last applied
	// to the key (LimitFingerprint; "" when none was).
	Declared func() (string, error)
	// Running counts the running jobs naming the key: the in-flight
	// count of an unpaced key, which its row does not keep.
	Running func() (int, error)
	// Save writes st, the key reconfigured: its configuration and live
	// state, and declared with it when that is not "".
	Save func(st *admission.State, declared string) error
}

// CheckLimit is UpsertLimit's and DeclareLimit's validation of c, before
// any write, with the error both drivers return.
func CheckLimit(c admission.Config) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("limit key %q: %w", c.Name, err)
	}
	return nil
}

// ReconfigureKey is UpsertLimit (declared "") and DeclareLimit (declared
// the configuration's LimitFingerprint) on st, the key's state as tx read
// it. A declaration equal to the last one applied leaves the key alone
// (false), so a restart does not undo an operator's change; otherwise the
// key is reconfigured keeping its live state (admission.State.Reconfigure)
// and saved (true). A key unpaced before the change, or left alone while
// unpaced, gets its in-flight count from its running jobs: it was not
// kept while the key was unpaced (admission.Config.Unpaced). st is what
// the call returns either way.
func ReconfigureKey(st *admission.State, c admission.Config, now time.Time, declared string, tx KeyTx) (bool, error) {
	countRunning := func() error {
		n, err := tx.Running()
		st.InFlight = n
		return err
	}
	if declared != "" {
		last, err := tx.Declared()
		if err != nil {
			return false, err
		}
		if last == declared {
			if st.Unpaced() {
				return false, countRunning()
			}
			return false, nil
		}
	}
	wasUnpaced := st.Unpaced()
	st.Reconfigure(c, now)
	if wasUnpaced {
		if err := countRunning(); err != nil {
			return false, err
		}
	}
	return true, tx.Save(st, declared)
}
