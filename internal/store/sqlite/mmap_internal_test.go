package sqlite

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"testing"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

const testMmap = 64 << 20

// TestReadMmapSetOnEveryReader checks that ReadMmapSize reaches every
// connection of the read pool, and none of the writer's.
func TestReadMmapSetOnEveryReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := OpenTest(t, Config{ReadMmapSize: testMmap})
	conns := make([]*sql.Conn, s.cfg.Readers)
	for i := range conns {
		c, err := s.rdb.Conn(ctx) // all held at once: every reader opened
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	for i, c := range conns {
		var n int64
		if err := c.QueryRowContext(ctx, `PRAGMA mmap_size`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != testMmap {
			t.Errorf("reader %d: mmap_size %d, want %d", i, n, testMmap)
		}
	}
	var w int64
	if err := s.onWriterConn(func(c *sql.Conn) error {
		return c.QueryRowContext(ctx, `PRAGMA mmap_size`).Scan(&w)
	}); err != nil {
		t.Fatal(err)
	}
	if w != 0 {
		t.Errorf("writer: mmap_size %d, want 0", w)
	}
}

// TestReadMmapSeesCommits checks that memory-mapped readers see the
// writer's commits as they land: while the file grows past its first map,
// after a checkpoint that truncates the WAL (the next commit restarts
// it), and after a VACUUM that shrinks the file under the readers' maps.
// A reader held inside a read transaction across the same commits is the
// control that shows the checks can see a stale reader.
func TestReadMmapSeesCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := OpenTest(t, Config{ReadMmapSize: testMmap})
	stale, err := s.rdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	tx, err := stale.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	count := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) int {
		var n int
		if err := q.QueryRowContext(ctx, `SELECT count(*) FROM jobs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	held := count(tx) // the control's snapshot
	total := 0
	insert := func(n int, pad int) []string {
		batch := make([]*job.Job, n)
		ids := make([]string, n)
		for i := range batch {
			batch[i] = storetest.NewJob("t", job.LaneBatch, "k"+strconv.Itoa(i%8))
			batch[i].Payload = make([]byte, pad) // grows the file by pages
			ids[i] = batch[i].ID
		}
		if _, err := s.Insert(ctx, batch, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
		total += n
		return ids
	}
	see := func(step string, ids []string) {
		t.Helper()
		for _, id := range ids {
			if _, err := s.Get(ctx, id); err != nil {
				t.Fatalf("%s: get %s: %v", step, id, err)
			}
		}
		if n := count(s.rdb); n != total {
			t.Fatalf("%s: readers count %d jobs, want %d", step, n, total)
		}
	}
	for i := range 8 { // ~8 MB: past the file's size when the first map was made
		see("grow "+strconv.Itoa(i), insert(256, 4000))
	}
	if n := count(tx); n != held {
		t.Fatalf("control: a reader in one read transaction counts %d, want its snapshot %d", n, held)
	}
	if n := count(s.rdb); n == held {
		t.Fatalf("control: the pool counts %d, the held snapshot's figure: the checks cannot see staleness", n)
	}
	tx.Rollback()
	stale.Close()
	checkpoint := func(step string) {
		t.Helper()
		if err := s.onWriterConn(func(c *sql.Conn) error {
			_, err := c.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
			return err
		}); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	checkpoint("checkpoint")
	see("after checkpoint", nil)
	see("WAL restarted", insert(16, 100))
	size := func() int64 {
		fi, err := os.Stat(s.cfg.Path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	grown := size()
	// Shrink the file under the readers' maps: delete most rows, VACUUM,
	// checkpoint so the file itself is truncated.
	if err := s.onWriterConn(func(c *sql.Conn) error {
		if _, err := c.ExecContext(ctx, `DELETE FROM jobs WHERE length(payload) > 1000`); err != nil {
			return err
		}
		_, err := c.ExecContext(ctx, `VACUUM`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	total = 16
	checkpoint("checkpoint after VACUUM")
	if shrunk := size(); shrunk*4 > grown {
		t.Fatalf("VACUUM left the file at %d bytes of %d: not shrunk under the maps", shrunk, grown)
	}
	see("after VACUUM", insert(16, 100))
}
