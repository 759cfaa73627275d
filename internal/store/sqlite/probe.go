package sqlite

// Scratch probe (s12h5): how much batch-lane work an interactive write
// waits behind, in rows changed (SQLite's total_changes), not time.

import (
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

var (
	probeBatchRows atomic.Int64 // rows changed by batch-lane writes, ended
	probeMu        sync.Mutex
	probeOn        bool
	probeAhead     []float64 // per interactive write: batch rows ended during its wait
	probeAheadN    []float64 // per interactive write: batch writes ended during its wait
	probeBatchSize []float64 // per batch write: rows changed
	probeInterSize []float64
)

// ProbeReset starts a new window.
func ProbeReset() {
	probeMu.Lock()
	probeOn = true
	probeAhead, probeAheadN, probeBatchSize, probeInterSize = nil, nil, nil, nil
	probeMu.Unlock()
}

func (s *Store) probeChanges(tx *sql.Tx) int64 {
	var n int64
	_ = s.queryRow(tx, `SELECT total_changes()`).Scan(&n)
	return n
}

func probeWrite(r *writeReq, rows int64) {
	probeMu.Lock()
	defer probeMu.Unlock()
	if !probeOn {
		return
	}
	if r.lane == "batch" {
		probeBatchSize = append(probeBatchSize, float64(rows))
		return
	}
	probeInterSize = append(probeInterSize, float64(rows))
}

func probeStarted(r *writeReq) {
	if r.lane == "batch" {
		return
	}
	probeMu.Lock()
	defer probeMu.Unlock()
	if !probeOn {
		return
	}
	probeAhead = append(probeAhead, float64(probeBatchRows.Load()-r.probeRows))
}

// ProbeReport summarizes the window.
func ProbeReport() string {
	probeMu.Lock()
	defer probeMu.Unlock()
	var b strings.Builder
	stat := func(name string, v []float64) {
		if len(v) == 0 {
			fmt.Fprintf(&b, "probe: %-45s none\n", name)
			return
		}
		v = append([]float64(nil), v...)
		sort.Float64s(v)
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		fmt.Fprintf(&b, "probe: %-45s n %d mean %.1f p50 %.0f p90 %.0f p99 %.0f max %.0f sum %.0f\n", name, len(v), sum/float64(len(v)), v[len(v)/2], v[len(v)*9/10], v[len(v)*99/100], v[len(v)-1], sum)
	}
	stat("interactive write: batch rows ended in its wait", probeAhead)
	stat("batch write: rows changed", probeBatchSize)
	stat("interactive write: rows changed", probeInterSize)
	return b.String()
}
