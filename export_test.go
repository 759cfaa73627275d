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
