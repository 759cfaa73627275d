package engine

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

// SCRATCH probe (not for merge): fetch-loop events, dumped for outliers.
var probeOn = os.Getenv("RATELANE_PROBE") != ""

type probeEv struct {
	at, end time.Time
	what    string
	a, b    int
}

var probeMu sync.Mutex
var probeRing []probeEv

func probe(at, end time.Time, what string, a, b int) {
	if !probeOn {
		return
	}
	probeMu.Lock()
	probeRing = append(probeRing, probeEv{at, end, what, a, b})
	if len(probeRing) > 20000 {
		probeRing = append(probeRing[:0], probeRing[10000:]...)
	}
	probeMu.Unlock()
}

func probeOutlier(j *job.Job, ready, now time.Time) {
	if !probeOn || j.Lane == job.LaneBatch || now.Sub(ready) < 100*time.Millisecond {
		return
	}
	probeMu.Lock()
	defer probeMu.Unlock()
	fmt.Fprintf(os.Stderr, "PROBE outlier job %s kind %s attempt %d queued %v created %s eligible %s lease %s\n", j.ID, j.Kind, j.Attempt,
		now.Sub(ready), j.CreatedAt.Format("15:04:05.000000"), j.EligibleAt.Format("15:04:05.000000"), now.Format("15:04:05.000000"))
	for _, ev := range probeRing {
		if ev.end.Before(ready.Add(-5*time.Millisecond)) || ev.at.After(now) {
			continue
		}
		fmt.Fprintf(os.Stderr, "PROBE   %s +%v dur %v %s %d %d\n", ev.at.Format("15:04:05.000000"), ev.at.Sub(ready), ev.end.Sub(ev.at), ev.what, ev.a, ev.b)
	}
}

var probeCommitted sync.Map // job id -> time its insert returned

var probePre, probePost []time.Duration

func probeInserted(ids []string) {
	if !probeOn {
		return
	}
	now := time.Now()
	for _, id := range ids {
		probeCommitted.Store(id, now)
	}
}

func probeSplit(j *job.Job, ready, now time.Time) {
	if !probeOn || j.Lane == job.LaneBatch {
		return
	}
	v, ok := probeCommitted.Load(j.ID)
	if !ok {
		return
	}
	c := v.(time.Time)
	probeMu.Lock()
	defer probeMu.Unlock()
	probePre = append(probePre, c.Sub(ready))
	probePost = append(probePost, now.Sub(c))
	if len(probePre)%100 == 0 {
		q := func(xs []time.Duration) string {
			ys := append([]time.Duration(nil), xs...)
			slices.Sort(ys)
			var sum time.Duration
			for _, y := range ys {
				sum += y
			}
			return fmt.Sprintf("mean %v p50 %v p99 %v max %v", sum/time.Duration(len(ys)), ys[len(ys)/2], ys[len(ys)*99/100], ys[len(ys)-1])
		}
		fmt.Fprintf(os.Stderr, "PROBE split n=%d ready->insert-returned: %s | insert-returned->lease: %s\n", len(probePre), q(probePre), q(probePost))
	}
}
