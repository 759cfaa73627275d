package ratelane

// Sweeps returns how many sweep passes over accepted parents the engine of
// c's region has completed (engine.Engine.Sweeps; 0 for a region without
// an engine), so that the external tests can wait for sweeps to happen
// rather than for time to pass.
func Sweeps(c *Client, region string) uint64 {
	if e := c.regions[region].engine; e != nil {
		return e.Sweeps()
	}
	return 0
}

// InteractiveInFlight is the count of interactive work in flight of the
// engine of c's region (engine.Engine.InteractiveInFlight; 0 without an
// engine), for the external tests that show a request leaks none.
func InteractiveInFlight(c *Client, region string) int {
	if e := c.regions[region].engine; e != nil {
		return e.InteractiveInFlight()
	}
	return 0
}
