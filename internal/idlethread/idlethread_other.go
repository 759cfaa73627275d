//go:build !linux

package idlethread

func enter() (*Thread, error) { return nil, ErrUnsupported }

func idle() (bool, error) { return false, ErrUnsupported }
