package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Launching Chromium on a loaded 2-core CI machine can take well past
// chromedp's 20 s default before it prints its DevTools URL (CI saw
// "websocket url timeout reached"). The launch gets launchTimeout, and a
// launch that still fails is retried, up to launchAttempts in all; only
// the launch is retried, never a step of a test.
const (
	launchTimeout  = 60 * time.Second
	launchAttempts = 3
)

// headless is a launched Chromium: Ctx runs actions in its first tab.
type headless struct {
	Ctx   context.Context
	close func()
}

// launch starts Chromium (exe, with flags) and returns once it answers
// over DevTools, retrying a failed launch. Each attempt runs in a process
// group of its own with a fresh profile directory from dir; a failed
// attempt's whole group (the browser and any zygote or renderer it forked)
// is killed and reaped before the next, so a slow launch leaves nothing
// running. The caller closes the browser that launched.
func launch(t *testing.T, exe string, dir func() string, timeout time.Duration, attempts int, flags ...chromedp.ExecAllocatorOption) (*headless, error) {
	var errs []error
	for i := range attempts {
		b, err := launchOnce(exe, dir(), timeout, flags)
		if err == nil {
			if i > 0 {
				t.Logf("chromium launched on attempt %d of %d after: %v", i+1, attempts, errors.Join(errs...))
			}
			return b, nil
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", i+1, err))
	}
	return nil, fmt.Errorf("chromium did not launch in %d attempts of %v: %w", attempts, timeout, errors.Join(errs...))
}

func launchOnce(exe, profile string, timeout time.Duration, flags []chromedp.ExecAllocatorOption) (*headless, error) {
	var cmd *exec.Cmd
	opts := append(append(chromedp.DefaultExecAllocatorOptions[:0:0], flags...),
		chromedp.ExecPath(exe), chromedp.UserDataDir(profile), chromedp.WSURLReadTimeout(timeout),
		chromedp.ModifyCmdFunc(func(c *exec.Cmd) {
			// Pdeathsig as chromedp sets it, plus a process group, so a
			// failed launch's children can be killed with it (Linux).
			c.SysProcAttr = groupProcAttr()
			cmd = c
		}))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	stop := func() {
		cancelCtx()
		cancelAlloc() // kills the browser process and waits for it
		if cmd != nil && cmd.Process != nil {
			killGroup(cmd.Process.Pid) // what it forked
		}
	}
	// An empty Run allocates: it starts the browser and connects to it.
	// The bound covers a DevTools connection that hangs after the URL.
	lctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- chromedp.Run(ctx) }()
	var err error
	select {
	case err = <-errc:
	case <-lctx.Done():
		err = fmt.Errorf("no DevTools connection within %v", timeout+10*time.Second)
	}
	if err != nil {
		stop()
		return nil, err
	}
	return &headless{Ctx: ctx, close: stop}, nil
}
