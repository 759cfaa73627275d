package sqlite

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/admission"
	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// walPages returns the page numbers of WAL frames [from, to) of s, read
// on a file handle of the test's own.
func walPages(t *testing.T, s *Store, from, to int64) []uint32 {
	t.Helper()
	f, err := os.Open(s.cfg.Path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pages := readWALPages(f, from, to)
	if len(pages) != int(to-from) {
		t.Fatalf("read %d of the WAL's frames %d to %d", len(pages), from, to)
	}
	return pages
}

// TestWindowKeyLeaseKeepsFileHeader checks that a lease on a key with a
// sliding window, whose start log has grown past what a limit_keys leaf
// holds inline (a minute of starts at a few a second: ~2.7 KiB in
// bench batch-isolation), writes its key without reallocating pages: no
// frame of page 1 (the file header, which holds the freelist's head and
// count and the file's size) and no change to the freelist. A row
// rewritten at another size frees its overflow pages and takes new ones,
// so each lease wrote page 1 and a freelist trunk page besides the key's
// pages (docs/benchmarks.md, "Session 34 (s34h1)").
func TestWindowKeyLeaseKeepsFileHeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := OpenTest(t, Config{Synchronous: SyncNormal})
	if _, err := s.UpsertLimit(ctx, admission.Config{Name: "k", PerStart: true,
		Windows: []admission.Window{{Limit: 6000, Period: time.Minute}}}, storetest.T0); err != nil {
		t.Fatal(err)
	}
	const warm, measured = 400, 200
	var writes, header, frames int
	// measure runs w and counts its frames and its frames of page 1.
	measure := func(i int, w func()) {
		mx0, _ := walFrames(t, s)
		w()
		mx1, _ := walFrames(t, s)
		if i < warm || mx1 <= mx0 { // warming up, or the WAL restarted
			return
		}
		writes++
		frames += int(mx1 - mx0)
		for _, pg := range walPages(t, s, mx0, mx1) {
			if pg == 1 {
				header++
			}
		}
	}
	for i := range warm + measured {
		now := storetest.T0.Add(time.Duration(i) * 150 * time.Millisecond)
		j := storetest.NewJob("acme", job.LaneInteractive, "k")
		j.CreatedAt, j.EligibleAt = now, now
		if _, err := s.Insert(ctx, []*job.Job{j}, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
		var got []*job.Job
		measure(i, func() {
			var err error
			if got, err = s.Lease(ctx, store.LeaseParams{Now: now, Max: 1, LeaseFor: time.Minute}); err != nil || len(got) != 1 {
				t.Fatalf("lease %d: %d jobs, %v", i, len(got), err)
			}
		})
		measure(i, func() {
			if errs, err := s.Finish(ctx, successes(got, job.StateValidated, now)); err != nil || errs[0] != nil {
				t.Fatalf("finish %d: %v, %v", i, errs, err)
			}
		})
	}
	var stored []byte
	if err := s.rdb.QueryRowContext(ctx, `SELECT shapes FROM limit_keys WHERE name = 'k'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	// The padded log reads back as the log written: the state loaded
	// encodes to the stored bytes less the padding.
	var enc []byte
	if err := s.write(ctx, func(tx *writeTx) error {
		keys, err := s.loadKeys(tx, []string{"k"})
		if err == nil {
			enc = keys["k"].MarshalShapes(nil)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(enc) > len(stored) || !bytes.Equal(enc, stored[:len(enc)]) || len(bytes.Trim(stored[len(enc):], "\x00")) != 0 {
		t.Fatalf("the stored log (%d bytes) is not the loaded state's (%d bytes) and zero bytes", len(stored), len(enc))
	}
	t.Logf("start log %d bytes stored in %d; %d leases and finishes measured: %d frames, page 1 in %d", len(enc), len(stored), writes, frames, header)
	if len(enc) < 1500 {
		t.Fatalf("the key's start log is %d bytes, want ≥ 1,500 (past a WITHOUT ROWID leaf's inline payload)", len(enc))
	}
	if writes < measured {
		t.Fatalf("%d of %d measured writes were read in one WAL (restarts in between)", writes, 2*measured)
	}
	if header > writes/20 {
		t.Errorf("page 1 written by %d of %d leases and finishes, want ≤ %d: the key's row reallocates its overflow pages", header, writes, writes/20)
	}
}
