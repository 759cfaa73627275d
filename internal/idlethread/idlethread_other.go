//go:build !linux

package idlethread

import "time"

func enter() (*Thread, error) { return nil, ErrUnsupported }

func idle() (bool, error) { return false, ErrUnsupported }

func threadCPU(int) (time.Duration, bool) { return 0, false }
