//go:build cpulabels && !linux

package sqlite

// Off Linux a cpulabels build times a COMMIT's wall only: the thread's
// clocks and schedstat are Linux's.

func threadClocks() (cpu, mono int64) { return 0, 0 }

func gettid() int { return 0 }

type threadSched struct{ tid int }

func openThreadSched() *threadSched               { return nil }
func (t *threadSched) read() (wait, slices int64) { return 0, 0 }
func (t *threadSched) close()                     {}
