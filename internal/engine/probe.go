package engine

// Scratch probe (s12h5): where an interactive job's queued stage goes.

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelane/ratelane/internal/job"
)

const (
	psIdle  = iota // waiting for a wake-up or the poll timer
	psSlot         // all worker slots busy: waiting for one
	psLease        // in the lease call
	psNap          // the 1 ms nap for more slots
	psRun          // starting the leased jobs, bookkeeping
	psN
)

var psNames = [psN]string{"idle", "slot_wait", "lease_call", "nap", "other"}

type probeMark struct {
	at    time.Time
	state int
}

type probeJob struct {
	ready, leased time.Time
	batchRunning  int64
	interRunning  int64
}

type probeLease struct {
	start, end       time.Time
	free, inter, bat int
}

type probeSlotWait struct {
	batch, inter int64
}

var probe struct {
	mu        sync.Mutex
	on        bool
	marks     []probeMark
	jobs      []probeJob
	leases    []probeLease
	slotWaits []probeSlotWait
}

var probeBatchRunning, probeInterRunning atomic.Int64

// ProbeReset starts a new probe window.
func ProbeReset() {
	probe.mu.Lock()
	probe.on = true
	probe.marks, probe.jobs, probe.leases, probe.slotWaits = nil, nil, nil, nil
	probe.mu.Unlock()
}

func probeState(s int) {
	probe.mu.Lock()
	if probe.on {
		probe.marks = append(probe.marks, probeMark{time.Now(), s})
		if s == psSlot {
			probe.slotWaits = append(probe.slotWaits, probeSlotWait{probeBatchRunning.Load(), probeInterRunning.Load()})
		}
	}
	probe.mu.Unlock()
}

func probeLeased(start time.Time, free int, jobs []*job.Job, ready func(*job.Job) time.Time) {
	end := time.Now()
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if !probe.on {
		return
	}
	l := probeLease{start: start, end: end, free: free}
	for _, j := range jobs {
		if j.Lane == job.LaneBatch {
			l.bat++
			continue
		}
		l.inter++
		probe.jobs = append(probe.jobs, probeJob{ready: ready(j), leased: end, batchRunning: probeBatchRunning.Load(), interRunning: probeInterRunning.Load()})
	}
	probe.leases = append(probe.leases, l)
}

// ProbeReport summarizes the window.
func ProbeReport() string {
	probe.mu.Lock()
	defer probe.mu.Unlock()
	var b strings.Builder
	var total [psN]time.Duration
	var queued time.Duration
	var callsBetween, batchInCalls, batchRunSum []float64
	for _, j := range probe.jobs {
		queued += j.leased.Sub(j.ready)
		for i, m := range probe.marks {
			end := j.leased
			if i+1 < len(probe.marks) && probe.marks[i+1].at.Before(end) {
				end = probe.marks[i+1].at
			}
			start := m.at
			if start.Before(j.ready) {
				start = j.ready
			}
			if end.After(start) {
				total[m.state] += end.Sub(start)
			}
		}
		n, nb := 0, 0
		for _, l := range probe.leases {
			if l.start.After(j.ready) && l.end.Before(j.leased) {
				n++
				nb += l.bat
			}
		}
		callsBetween = append(callsBetween, float64(n))
		batchInCalls = append(batchInCalls, float64(nb))
		batchRunSum = append(batchRunSum, float64(j.batchRunning))
	}
	nj := float64(max(1, len(probe.jobs)))
	fmt.Fprintf(&b, "probe: interactive jobs leased %d, queued mean %.2f ms\n", len(probe.jobs), float64(queued.Milliseconds())/nj)
	for s := range psN {
		fmt.Fprintf(&b, "probe:   queued in fetch state %-10s mean %.2f ms\n", psNames[s], float64(total[s].Microseconds())/1000/nj)
	}
	stat := func(name string, v []float64) {
		if len(v) == 0 {
			return
		}
		sort.Float64s(v)
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		fmt.Fprintf(&b, "probe:   %-40s mean %.2f p50 %.0f p99 %.0f max %.0f\n", name, sum/float64(len(v)), v[len(v)/2], v[len(v)*99/100], v[len(v)-1])
	}
	stat("lease calls wholly between ready and lease", callsBetween)
	stat("batch jobs those calls leased", batchInCalls)
	stat("batch handlers running at its lease", batchRunSum)
	var sb, si []float64
	for _, w := range probe.slotWaits {
		sb = append(sb, float64(w.batch))
		si = append(si, float64(w.inter))
	}
	fmt.Fprintf(&b, "probe: slot waits (all %s busy) %d\n", "slots", len(probe.slotWaits))
	stat("  of the slots, batch handlers", sb)
	stat("  of the slots, interactive handlers", si)
	var lb, li, lf, ld []float64
	for _, l := range probe.leases {
		lb = append(lb, float64(l.bat))
		li = append(li, float64(l.inter))
		lf = append(lf, float64(l.free))
		ld = append(ld, float64(l.end.Sub(l.start).Microseconds())/1000)
	}
	fmt.Fprintf(&b, "probe: lease calls %d\n", len(probe.leases))
	stat("  free slots asked", lf)
	stat("  batch jobs leased", lb)
	stat("  interactive jobs leased", li)
	stat("  call ms", ld)
	return b.String()
}
