package bench

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// contendLockProfileMutex makes a goroutine wait on mu, held here until the
// waiter is seen blocked; its name is what the profiles must hold.
func contendLockProfileMutex(mu *sync.Mutex) {
	mu.Lock()
	var wg sync.WaitGroup
	wg.Add(1)
	waiting := make(chan struct{})
	waited := 0
	go func() {
		defer wg.Done()
		close(waiting)
		mu.Lock()
		waited++
		mu.Unlock()
	}()
	<-waiting
	// Hold the lock long enough for the waiter to park (not a bound on
	// anything: a shorter hold only records less).
	time.Sleep(20 * time.Millisecond)
	mu.Unlock()
	wg.Wait()
	_ = waited
}

// TestLockProfileRecordsPhases: --lock-profile's recorder writes both
// profiles per phase, the block profile holding a contended Go mutex's
// waiter and the mutex profile its releaser, and restores the mutex
// profile's fraction when it stops.
func TestLockProfileRecordsPhases(t *testing.T) {
	before := runtime.SetMutexProfileFraction(-1)
	l := &lockProfile{dir: filepath.Join(t.TempDir(), "p")}
	if err := l.start(); err != nil {
		t.Fatal(err)
	}
	defer l.stop()
	var mu sync.Mutex
	contendLockProfileMutex(&mu)
	if err := l.write("baseline"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"block", "mutex"} {
		f, err := os.Open(filepath.Join(l.dir, name+".baseline.pb.gz"))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(zr)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("contendLockProfileMutex")) {
			t.Errorf("the %s profile lacks the contended mutex's stack", name)
		}
	}
	l.stop()
	if got := runtime.SetMutexProfileFraction(-1); got != before {
		t.Errorf("mutex profile fraction after stop = %d, want %d", got, before)
	}
}
