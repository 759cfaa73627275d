//go:build !linux

package sqlite

import "errors"

// niceWriterThread is Linux's alone: elsewhere a thread's nice cannot be
// set apart from its process's (validate refuses WriterNice first).
func niceWriterThread(n int) error {
	return errors.New("sqlite: WriterNice is supported on Linux only")
}

// writerNiceHook is niceWriterThread, as on Linux.
var writerNiceHook = niceWriterThread

// writerNiceSupported reports whether WriterNice can be set here.
const writerNiceSupported = false
