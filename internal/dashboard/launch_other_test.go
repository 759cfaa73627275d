//go:build !linux

package dashboard_test

import "syscall"

// groupProcAttr is nil off Linux: there is no Pdeathsig, and chromedp
// kills the browser process itself when its allocator is cancelled.
func groupProcAttr() *syscall.SysProcAttr { return nil }

// killGroup does nothing off Linux (see groupProcAttr).
func killGroup(int) {}
