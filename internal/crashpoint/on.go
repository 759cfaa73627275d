//go:build ratelane_crashpoints

package crashpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Enabled reports whether this build has crash points.
const Enabled = true

var (
	mu    sync.Mutex
	armed string
	nth   = 1
	hits  int
)

func init() {
	v := os.Getenv(Env)
	name, n, ok := strings.Cut(v, "@")
	armed = name
	if ok {
		if k, err := strconv.Atoi(n); err == nil && k > 0 {
			nth = k
		}
	}
}

// Hit exits the process with ExitCode when name is the armed crash point
// and this is its nth hit. It says so on stderr first, so that the test
// can tell a crash point from any other death.
func Hit(name string) {
	if name != armed {
		return
	}
	mu.Lock() // held until exit: no other goroutine passes a crash point
	hits++
	if hits < nth {
		mu.Unlock()
		return
	}
	fmt.Fprintf(os.Stderr, "crashpoint %s: exiting with %d\n", name, ExitCode)
	os.Exit(ExitCode)
}
