package sqlite_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/sqlite/sqlitetest"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// populated creates a closed store file at dir/us.db holding n jobs, so it
// spans many pages.
func populated(t testing.TB, dir string, n int) string {
	t.Helper()
	path := filepath.Join(dir, "us.db")
	s := sqlite.OpenTest(t, sqlite.Config{Path: path})
	for i := 0; i < n; i += 1000 {
		var batch []*job.Job
		for k := i; k < min(n, i+1000); k++ {
			j := storetest.NewJob(fmt.Sprintf("t%d", k%7), job.LaneBatch, "k"+fmt.Sprint(k%10))
			j.IdempotencyKey = fmt.Sprintf("idem-%d", k)
			batch = append(batch, j)
		}
		if _, err := s.Insert(context.Background(), batch, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil { // the last close checkpoints the WAL into the file
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the WAL survived the close (%v); the damage below would not be in the file SQLite reads", err)
	}
	return path
}

// pageSize reads the page size from the database header (bytes 16-17).
func pageSize(t *testing.T, b []byte) int {
	t.Helper()
	n := int(binary.BigEndian.Uint16(b[16:18]))
	if n == 1 {
		n = 65536
	}
	if n < 512 {
		t.Fatalf("page size %d: not a database header", n)
	}
	return n
}

func mustRefuse(t *testing.T, path string) *sqlite.CorruptError {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Region: "us"})
	if err == nil {
		s.Close()
		t.Fatal("Open served a damaged store")
	}
	var ce *sqlite.CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("Open failed, but not with a CorruptError: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{path, "restore", "backup"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message does not say %q: %s", want, msg)
		}
	}
	return ce
}

// TestOpenRefusesDamagedFiles damages a real store file the ways disks and
// operators do (Jepsen's file-corruption nemesis: bit-flips in pages and
// truncation), plus a file that was never a database, and checks that Open
// refuses each with the file's path and the remedy in the message, and
// that the undamaged copy opens.
func TestOpenRefusesDamagedFiles(t *testing.T) {
	t.Parallel()
	pristine, err := os.ReadFile(populated(t, t.TempDir(), 2000))
	if err != nil {
		t.Fatal(err)
	}
	ps := pageSize(t, pristine)
	pages := len(pristine) / ps
	if pages < 20 {
		t.Fatalf("the store has only %d pages", pages)
	}
	cases := map[string]func([]byte) []byte{
		"garbage header": func(b []byte) []byte {
			copy(b, strings.Repeat("\xde\xad\xbe\xef", 25))
			return b
		},
		// SQLite has no page checksums: a flip inside a row's bytes goes
		// unnoticed. A flip in a b-tree page's header (its type and cell
		// count) is what quick_check finds; two pages get one each, as
		// Jepsen's nemesis flips about two bits per file.
		"bit-flips in page headers": func(b []byte) []byte {
			for _, p := range []int{pages / 3, 2 * pages / 3} {
				b[p*ps] ^= 0x40   // page type
				b[p*ps+4] ^= 0x10 // cell count, low byte
			}
			return b
		},
		"truncated to half":     func(b []byte) []byte { return b[:len(b)/2] },
		"truncated mid-page":    func(b []byte) []byte { return b[:len(b)-ps-ps/3] },
		"truncated to 0 bytes":  func(b []byte) []byte { return b[:0] },
		"truncated to a header": func(b []byte) []byte { return b[:100] },
		"not a database": func([]byte) []byte {
			return []byte(strings.Repeat("this is a log file, not a database\n", 200))
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "us.db")
			if err := os.WriteFile(path, damage(append([]byte(nil), pristine...)), 0o600); err != nil {
				t.Fatal(err)
			}
			ce := mustRefuse(t, path)
			t.Logf("%s: %s", name, ce.Detail)
		})
	}
	t.Run("undamaged", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "us.db")
		if err := os.WriteFile(path, pristine, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Region: "us"})
		if err != nil {
			t.Fatalf("an undamaged copy was refused: %v", err)
		}
		defer s.Close()
		if err := s.IntegrityCheck(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestMigrateChecksIntegrity damages the file under an open store (pages the
// open connections have not cached) and checks that Migrate, which
// `ratelane migrate` runs, reports it.
func TestMigrateChecksIntegrity(t *testing.T) {
	t.Parallel()
	path := populated(t, t.TempDir(), 2000)
	s := sqlite.OpenTest(t, sqlite.Config{Path: path})
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	const ps = 4096
	for p := int64(2); p < fi.Size()/ps; p += 3 {
		if _, err := f.WriteAt([]byte{0x00, 0xff, 0xff}, p*ps); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	var ce *sqlite.CorruptError
	if err := s.Migrate(context.Background()); !errors.As(err, &ce) || ce.Path != path {
		t.Fatalf("Migrate on a damaged file: %v", err)
	}
}

// TestReadyFailsWhenFileIsBroken overwrites and then removes the database
// file under an open store: Ready reads through a fresh connection, so it
// sees both, and never recreates a removed file.
func TestReadyFailsWhenFileIsBroken(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "us.db")
	s := sqlite.OpenTest(t, sqlite.Config{Path: path})
	if err := s.Ready(context.Background()); err != nil {
		t.Fatalf("healthy store not ready: %v", err)
	}
	sqlitetest.DamageHeader(t, path)
	if err := s.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Ready on an overwritten header: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(context.Background()); err == nil {
		t.Fatal("Ready on a removed file succeeded")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Ready recreated the removed file: %v", err)
	}
}

// TestDurabilityReadBack checks the pragmas the writer connection reports
// for both configured levels.
func TestDurabilityReadBack(t *testing.T) {
	t.Parallel()
	for _, sync := range []string{sqlite.SyncFull, sqlite.SyncNormal} {
		s := sqlite.OpenTest(t, sqlite.Config{Synchronous: sync})
		if d := s.Durability(); d.JournalMode != "wal" || d.Synchronous != sync {
			t.Errorf("configured %s, store reports %+v", sync, d)
		}
		s.Close()
	}
}

// BenchmarkStartupCheck measures the two SQLite checks on a store of
// 200,000 jobs (RATELANE_CHECK_JOBS overrides), the figure behind Open's
// choice of quick_check (docs/operations.md).
func BenchmarkStartupCheck(b *testing.B) {
	n := 200000
	if v := os.Getenv("RATELANE_CHECK_JOBS"); v != "" {
		fmt.Sscan(v, &n)
	}
	path := populated(b, b.TempDir(), n)
	fi, _ := os.Stat(path)
	s := sqlite.OpenTest(b, sqlite.Config{Path: path})
	b.Logf("store: %d jobs, %.1f MB", n, float64(fi.Size())/1e6)
	b.Run("quick_check", func(b *testing.B) {
		for range b.N {
			if err := s.Migrate(context.Background()); err != nil { // quick_check + no-op migrations
				b.Fatal(err)
			}
		}
	})
	b.Run("integrity_check", func(b *testing.B) {
		for range b.N {
			if err := s.IntegrityCheck(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("open", func(b *testing.B) {
		for range b.N {
			start := time.Now()
			s2 := sqlite.OpenTest(b, sqlite.Config{Path: path})
			s2.Close()
			b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/open")
		}
	})
}

// BenchmarkReady measures one readiness probe (a fresh read-only
// connection, the header and schema, a page of jobs) on a small store.
func BenchmarkReady(b *testing.B) {
	s := sqlite.OpenTest(b, sqlite.Config{})
	for range b.N {
		if err := s.Ready(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
