// Package sqlitetest holds what tests of several packages do to a SQLite
// store's file from outside the store, so that the knowledge of how to do
// it (here: where SQLite reads a page from) is written once. Only tests
// import it.
package sqlitetest

import (
	"database/sql"
	"os"
	"strings"
	"testing"

	_ "modernc.org/sqlite" // registers "sqlite", for the checkpoint below
)

// DamageHeader overwrites the first 128 bytes of the database file at path
// (the SQLite header and the start of page 1) with garbage, under a store
// that may have it open, so that the next fresh connection finds no
// database there. It checkpoints first: until a checkpoint page 1 is read
// from the write-ahead log, and the checkpoint would later overwrite the
// damage with the good copy.
func DamageHeader(t testing.TB, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(strings.Repeat("garbage!", 16)), 0); err != nil {
		t.Fatal(err)
	}
}

// CutBatchCreation makes the complete batch id in the database at path
// look as a kill -9 between two pieces of the store's CreateBatch leaves
// it: marked creating, with only its first keep items (in custom_id
// order). It writes through its own connection, as another process would.
func CutBatchCreation(t testing.TB, path, id string, keep int) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(1)&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE batches SET creating = 1 WHERE id = ?`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM batch_items WHERE batch_id = ? AND custom_id NOT IN
		(SELECT custom_id FROM batch_items WHERE batch_id = ? ORDER BY custom_id LIMIT ?)`, id, id, keep); err != nil {
		t.Fatal(err)
	}
}
