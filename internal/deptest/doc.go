// Package deptest holds the layering test of the module: the intended
// import graph (API -> engine -> admission/store -> vocabulary; nothing
// below imports above; the core imports no plug-in SDK), checked over
// `go list -deps` the way tailscale's tstest/deptest does, so a change that
// crosses a layer fails a test instead of drifting.
package deptest
