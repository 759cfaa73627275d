// Package deptest holds the layering test of the module: the intended
// import graph (API -> engine -> admission/store -> vocabulary; nothing
// below imports above; the core imports no plug-in SDK), checked over
// `go list -deps` the way tailscale's tstest/deptest does, so a change that
// crosses a layer fails a test instead of drifting. It also type-checks the
// module to hold that only engine.Jobs (and the store itself) calls the
// store's job-writing methods (writers_test.go).
package deptest
