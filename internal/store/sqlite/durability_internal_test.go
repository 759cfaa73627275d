package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadDurabilityRefusesMismatch is the refusal Open relies on when a
// filesystem keeps SQLite out of WAL, or the level read back is not the one
// configured: a connection left in journal_mode=delete, and one in WAL at
// NORMAL checked against FULL, are both refused with the file named.
func TestReadDurabilityRefusesMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "us.db")
	for _, c := range []struct{ pragmas, want, says string }{
		{"_pragma=journal_mode(DELETE)&_pragma=synchronous(FULL)", SyncFull, "journal_mode"},
		{"_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)", SyncFull, "synchronous=NORMAL"},
	} {
		db, err := sql.Open("sqlite", "file:"+path+"?"+c.pragmas)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		_, err = readDurability(context.Background(), db, path, c.want)
		db.Close()
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s checked against %s: %v, want a refusal naming %s and the file", c.pragmas, c.want, err, c.says)
		}
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if d, err := readDurability(context.Background(), db, path, SyncFull); err != nil || d != (Durability{"wal", SyncFull}) {
		t.Fatalf("WAL at FULL: %+v, %v", d, err)
	}
}
