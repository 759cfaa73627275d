//go:build cpulabels

package sqlite_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/store/sqlite"
	"github.com/ratelane/ratelane/internal/store/storetest"
)

// TestWriteStatsRecordsEachTransactionsIO (cpulabels builds): every WALTx
// line of RATELANE_WRITESTATS carries the IO figures io-floor's replay
// reads: when its COMMIT ended, within the test's run, and its lane.
func TestWriteStatsRecordsEachTransactionsIO(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ws.jsonl")
	t.Setenv("RATELANE_WRITESTATS", out)
	ctx := context.Background()
	t0 := time.Now()
	s := sqlite.OpenTest(t, sqlite.Config{})
	for i := range 3 {
		lane := job.LaneInteractive
		if i == 1 {
			lane = job.LaneBatch
		}
		if _, err := s.Insert(ctx, []*job.Job{storetest.NewJob("t", lane, "k")}, storetest.Unpaced); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var txs, inter int
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var kind struct{ WALTx bool }
		if err := json.Unmarshal(sc.Bytes(), &kind); err != nil {
			t.Fatal(err)
		}
		if !kind.WALTx {
			continue // another figure (a WALPages line's Pages is a map)
		}
		var l struct {
			WALTx bool
			Pages []uint32
			IO    struct {
				EndNs       int64
				Interactive bool
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		txs++
		if l.IO.Interactive {
			inter++
		}
		if l.IO.EndNs < t0.UnixNano() || l.IO.EndNs > t1.UnixNano() || len(l.Pages) == 0 {
			t.Errorf("a transaction ending at %d with %d pages; want within [%d, %d], pages > 0", l.IO.EndNs, len(l.Pages), t0.UnixNano(), t1.UnixNano())
		}
	}
	if txs < 3 || inter < 2 {
		t.Errorf("%d transactions, %d interactive; want the 3 inserts', 2 interactive", txs, inter)
	}
}
