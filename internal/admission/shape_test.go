package admission

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratelane/ratelane/internal/job"
	"github.com/ratelane/ratelane/internal/upstream"
)

// TestWindowBound is invariant 6 for windows and multi-shape keys, as a
// property over random shapes, costs and arrival patterns (seeded, so a
// failure reproduces): admitted starts never exceed any window's limit
// over its period, nor the bucket's rate*t + burst, and the start logs
// survive MarshalShapes/UnmarshalShapes on every step, as they do
// through a store.
func TestWindowBound(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 150 {
		c := Config{Name: "k"}
		if rng.IntN(2) == 0 {
			c.Rate, c.Burst = 1+rng.Float64()*50, float64(1+rng.IntN(8))
		}
		for range 1 + rng.IntN(2) {
			w := Window{Limit: float64(1 + rng.IntN(30)), Period: time.Duration(1+rng.IntN(3000)) * time.Millisecond}
			if rng.IntN(3) == 0 { // a fixed window, guarded or not
				w.Fixed = true
				w.Guard = time.Duration(rng.Int64N(int64(w.Period) / 2))
			}
			c.Windows = append(c.Windows, w)
		}
		s := NewState(c)
		maxCost := int64(min(4, c.MaxCost()))
		type st struct {
			at   time.Time
			cost int64
		}
		var starts []st
		now := t0
		var buf []byte
		for range 1500 {
			now = now.Add(time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond)))
			cost := 1 + rng.Int64N(maxCost)
			ok, next := s.Check(now, cost)
			if !ok {
				if next.Before(now) {
					t.Fatalf("trial %d: refused with next %v before now %v", trial, next, now)
				}
				continue
			}
			s.Take(now, cost)
			s.End(now, cost) // answered at once; TestWindowTransit has transit
			starts = append(starts, st{now, cost})
			buf = s.MarshalShapes(buf)
			var back State
			back.Config = s.Config
			if err := back.UnmarshalShapes(buf); err != nil {
				t.Fatal(err)
			}
			s.logs = back.logs
		}
		c = c.WithDefaults()
		for i := range starts {
			var in int64
			for k := i; k < len(starts); k++ {
				in += starts[k].cost
				span := starts[k].at.Sub(starts[i].at)
				if c.Rate > 0 && float64(in) > c.Rate*span.Seconds()+c.Burst+1e-6 {
					t.Fatalf("trial %d %+v: %d units in %v over the bucket", trial, c, in, span)
				}
				for _, w := range c.Windows {
					if !w.Fixed && span < w.Period && float64(in) > w.Limit {
						t.Fatalf("trial %d %+v: %d units within %v over the window %v/%v", trial, c, in, span, w.Limit, w.Period)
					}
				}
			}
		}
		// A fixed window: every aligned window [kW, (k+1)W), widened
		// back by the guard, holds at most Limit.
		for _, w := range c.Windows {
			if !w.Fixed {
				continue
			}
			p := int64(w.Period)
			for _, st := range starts {
				ws := st.at.UnixNano() / p * p
				lo, hi := ws-int64(w.Guard), ws+p
				var in int64
				for _, o := range starts {
					if t := o.at.UnixNano(); t >= lo && t < hi {
						in += o.cost
					}
				}
				if float64(in) > w.Limit {
					t.Fatalf("trial %d %+v: %d units in the aligned window at %v (guard %v), over %v", trial, c, in, time.Unix(0, ws).UTC(), w.Guard, w.Limit)
				}
			}
		}
		if len(starts) == 0 {
			t.Fatalf("trial %d %+v: nothing admitted", trial, c)
		}
	}
}

// TestWindowExact checks the boundary: a 3-per-second window admits three
// starts at once, refuses the fourth until exactly one period after the
// first, and admits it then.
func TestWindowExact(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "w", Windows: []Window{{Limit: 3, Period: time.Second}}})
	for i := range 3 {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		if ok, _ := s.Check(now, 1); !ok {
			t.Fatalf("start %d refused", i)
		}
		s.Take(now, 1)
		s.End(now, 1)
	}
	ok, next := s.Check(t0.Add(500*time.Millisecond), 1)
	if ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("fourth start: ok=%v next=+%v, want refused until +1s", ok, next.Sub(t0))
	}
	if ok, _ := s.Check(next, 1); !ok {
		t.Fatal("refused at the time Check named")
	}
	if got := s.Tokens(t0.Add(500 * time.Millisecond)); got != 0 {
		t.Fatalf("tokens in a full window = %v", got)
	}
}

// TestFixedWindowAllowance checks what a fixed window gives that a
// sliding one does not: a full window's allowance at the end of one
// aligned window and again as the next opens, refused in between until
// exactly the next window's start; and that a guard counts a start near
// a window's end in the next window too.
func TestFixedWindowAllowance(t *testing.T) {
	t.Parallel()
	fill := func(s *State, at time.Time, n int) {
		t.Helper()
		for i := range n {
			if ok, next := s.Check(at, 1); !ok {
				t.Fatalf("start %d at +%v refused until +%v", i, at.Sub(t0), next.Sub(t0))
			}
			s.Take(at, 1)
			s.End(at, 1)
		}
	}
	s := NewState(Config{Name: "f", Windows: []Window{{Limit: 5, Period: time.Second, Fixed: true}}})
	fill(&s, t0.Add(900*time.Millisecond), 5) // t0 is aligned to the second
	ok, next := s.Check(t0.Add(950*time.Millisecond), 1)
	if ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("sixth start: ok=%v next=+%v, want refused until the next window at +1s", ok, next.Sub(t0))
	}
	if got := s.Tokens(t0.Add(950 * time.Millisecond)); got != 0 {
		t.Fatalf("tokens in a full fixed window = %v", got)
	}
	fill(&s, t0.Add(time.Second), 5) // a sliding window would refuse these until +1.9s
	if ok, next := s.Check(t0.Add(1500*time.Millisecond), 1); ok || !next.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("eleventh start: ok=%v next=+%v, want refused until +2s", ok, next.Sub(t0))
	}
	// Through MarshalShapes, as through a store.
	back := State{Config: s.Config}
	if err := back.UnmarshalShapes(s.MarshalShapes(nil)); err != nil {
		t.Fatal(err)
	}
	if ok, _ := back.Check(t0.Add(1500*time.Millisecond), 1); ok {
		t.Fatal("a full fixed window admitted after a round trip of its log")
	}

	g := NewState(Config{Name: "g", Windows: []Window{{Limit: 5, Period: time.Second, Fixed: true, Guard: 30 * time.Millisecond}}})
	fill(&g, t0.Add(980*time.Millisecond), 5) // within the guard: counts in both windows
	if ok, next := g.Check(t0.Add(time.Second), 1); ok || !next.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("guarded: ok=%v next=+%v, want the next window full too, until +2s", ok, next.Sub(t0))
	}
	h := NewState(g.Config)
	fill(&h, t0.Add(960*time.Millisecond), 5) // before the guard: only its own window
	fill(&h, t0.Add(time.Second), 5)
}

// TestLogBounded checks that a dense stream of starts keeps a window's log
// within LogSlots+1 entries and its state small.
func TestLogBounded(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "tpm", Windows: []Window{{Limit: 1e9, Period: time.Minute}}})
	now := t0
	for range 100_000 {
		now = now.Add(time.Millisecond)
		s.Take(now, 1)
		s.End(now, 1)
	}
	if n := len(s.logs[0].entries); n > LogSlots+1 {
		t.Fatalf("log holds %d entries, want at most %d", n, LogSlots+1)
	}
	if b := s.MarshalShapes(nil); len(b) > 8*(LogSlots+1) {
		t.Fatalf("encoded log is %d bytes", len(b))
	}
	if got := s.logs[0].since(now.Add(-time.Minute).UnixNano()); got < 60_000 || got > 60_000+int64(2*time.Minute/time.Millisecond/LogSlots) {
		t.Fatalf("log counts %d starts in the last minute, want 60000 (conservatively rounded up by at most a slot)", got)
	}
}

// TestOverflowSafe pins the two failures of issue 10: a cost of 1e12 on a
// shared key froze it for a century, and about 9e9 wrapped the bucket's
// arithmetic to a free start. Now such costs are refused by CheckCost, and
// when they reach the arithmetic anyway it saturates.
func TestOverflowSafe(t *testing.T) {
	t.Parallel()
	c := Config{Name: "shared", Rate: 1, Burst: 10} // 1 s per unit: 9.3e9 units wrapped int64 ns
	for _, cost := range []int64{0, -1, 11, 9e9, 1e12, math.MaxInt64} {
		if c.CheckCost(cost) == nil {
			t.Errorf("CheckCost(%d) accepted on burst 10", cost)
		}
	}
	if err := c.CheckCost(10); err != nil {
		t.Fatal(err)
	}
	if err := (Config{Name: "w", Windows: []Window{{Limit: 5, Period: time.Second}}}).CheckCost(6); err == nil {
		t.Fatal("cost above a window's limit accepted")
	}
	if err := (Config{Name: "free"}).CheckCost(1e9); err != nil {
		t.Fatalf("an unpaced key refused a large cost: %v", err)
	}
	for _, cost := range []int64{9e9, 9_300_000_000, 1e12, math.MaxInt64} {
		s := NewState(c)
		s.Take(t0, 1) // not full: the cost is checked
		ok, next := s.Check(t0, cost)
		if ok {
			t.Fatalf("cost %d admitted for free", cost)
		}
		if next.Before(t0) || next.After(t0.Add(MaxAhead)) {
			t.Fatalf("cost %d: next %v outside [now, now+MaxAhead]", cost, next)
		}
		s.Take(t0, cost)
		if s.TAT.Before(t0) || s.TAT.After(t0.Add(MaxAhead)) {
			t.Fatalf("cost %d: TAT %v wrapped", cost, s.TAT)
		}
		if w := s.Wait(t0, cost); w < 0 || w > MaxAhead {
			t.Fatalf("cost %d: wait %v", cost, w)
		}
	}
}

// FuzzAdmission drives one key with extreme rates, bursts, costs, windows
// and times: nothing panics, a refusal never names a time before now, the
// key's times stay representable, and its encoded state round-trips.
func FuzzAdmission(f *testing.F) {
	f.Add(10.0, 10.0, int64(1), 5.0, int64(time.Second), int64(0), int64(time.Millisecond), true)
	f.Add(1e-9, 0.0, int64(1e12), 1.0, int64(time.Millisecond), int64(-1e18), int64(1), false)
	f.Add(1e9, 1e12, int64(9e9), 1e12, int64(24*time.Hour), int64(4e18), int64(1e15), true)
	f.Add(0.0, 0.0, int64(math.MaxInt64), 0.0, int64(0), int64(0), int64(0), false)
	f.Fuzz(func(t *testing.T, rate, burst float64, cost int64, limit float64, period, start, step int64, adaptive bool) {
		c := Config{Name: "k", Rate: rate, Burst: burst, Adaptive: adaptive}
		if limit != 0 || period != 0 {
			c.Windows = []Window{{Limit: limit, Period: time.Duration(period)}}
		}
		if c.Validate() != nil {
			return
		}
		s := NewState(c)
		// Times from 1680 to 2260: the range Unix nanoseconds hold.
		now := time.Unix(0, start%(9e18-int64(2*MaxAhead)))
		for i := range 50 {
			ok, next := s.Check(now, cost)
			if !ok && next.Before(now) {
				t.Fatalf("refused with next %v before now %v", next, now)
			}
			switch i % 5 {
			case 0, 1:
				if ok {
					s.Take(now, cost)
				}
			case 2:
				s.Throttled(now, now.Add(time.Second), cost)
			case 3:
				s.RateLimited(now, now.Add(1500*time.Microsecond), cost)
				s.Hint(now, job.Hint{Limit: 100, Remaining: cost % 100, Reset: time.Duration(step)})
				s.Hint(now, job.Hint{Limit: cost, Remaining: -1, Window: time.Duration(step)})
			case 4:
				s.Succeeded(now)
				s.Reconcile(now, cost, cost/2+1)
			}
			s.End(now, cost)
			if s.TAT.After(now.Add(2 * MaxAhead)) {
				t.Fatalf("TAT %v ran past the saturation bound", s.TAT)
			}
			if w := s.Wait(now, cost); w < 0 || w > MaxAhead+time.Duration(7*24*time.Hour) {
				t.Fatalf("wait %v", w)
			}
			if lr := s.LearnedRate; math.IsNaN(lr) || lr < 0 || (s.Adaptive && lr > s.Rate) {
				t.Fatalf("learned rate %v (ceiling %v)", lr, s.Rate)
			}
			var back State
			back.Config = s.Config
			if err := back.UnmarshalShapes(s.MarshalShapes(nil)); err != nil {
				t.Fatal(err)
			}
			now = now.Add(time.Duration(max(0, step%int64(time.Hour))))
		}
	})
}

// TestReconfigureKeepsWindowLog checks that reconfiguring a key keeps the
// start log of a window whose period is unchanged (the starts happened)
// and starts a new window empty; a key that loses its windows loses its
// logs.
func TestReconfigureKeepsWindowLog(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "w", Windows: []Window{{Limit: 5, Period: time.Second}}})
	for i := range 5 {
		s.Take(t0.Add(time.Duration(i)*time.Millisecond), 1)
	}
	s.Reconfigure(Config{Name: "w", Windows: []Window{{Limit: 6, Period: time.Second}, {Limit: 100, Period: time.Minute}}}, t0)
	if ok, _ := s.Check(t0.Add(10*time.Millisecond), 2); ok {
		t.Fatal("the raised window forgot the five starts it holds")
	}
	if ok, _ := s.Check(t0.Add(10*time.Millisecond), 1); !ok {
		t.Fatal("the sixth unit of a 6-per-second window was refused")
	}
	s.Reconfigure(Config{Name: "w", Rate: 10}, t0)
	if len(s.logs) != 0 || s.MarshalShapes(nil) != nil {
		t.Fatalf("a bucket-only key kept %d logs", len(s.logs))
	}
}

// TestWindowTransit is invariant 6 where the upstream counts: each admitted
// start reaches the upstream at a random time between its lease (Take) and
// its finish (End), which come in random order and up to several periods
// apart, as lease commits, handler starts and sends delay requests on a
// loaded machine. Whatever the transit, the arrivals never exceed a
// window's limit: over any interval of Period for a sliding window, in any
// aligned window for a fixed one (guarded or not). A window that logged a
// start at its lease instead fails this at once.
func TestWindowTransit(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	type flying struct {
		end, arrive time.Time
		cost        int64
	}
	for trial := range 200 {
		w := Window{Limit: float64(1 + rng.IntN(20)), Period: time.Duration(50+rng.IntN(2000)) * time.Millisecond}
		if rng.IntN(2) == 0 {
			w.Fixed = true
			if rng.IntN(2) == 0 {
				w.Guard = time.Duration(rng.Int64N(int64(w.Period) / 2))
			}
		}
		c := Config{Name: "k", Windows: []Window{w}}
		if rng.IntN(3) == 0 {
			c.Rate, c.Burst = w.Limit/w.Period.Seconds()*(0.5+rng.Float64()), float64(1+rng.IntN(int(w.Limit)))
		}
		s := NewState(c)
		maxCost := int64(min(3, w.Limit))
		// Transit up to this long: mostly well under the period, in some
		// trials several periods.
		spread := time.Duration(float64(w.Period) * []float64{0.05, 0.3, 3}[rng.IntN(3)])
		var flights []flying
		type arrival struct {
			at   time.Time
			cost int64
		}
		var arrivals []arrival
		now := t0.Add(time.Duration(rng.Int64N(int64(time.Second))))
		var buf []byte
		for range 1200 {
			now = now.Add(time.Duration(rng.ExpFloat64() * float64(w.Period) / 20))
			// Finishes due by now land first, in time order.
			slices.SortFunc(flights, func(a, b flying) int { return a.end.Compare(b.end) })
			for len(flights) > 0 && !flights[0].end.After(now) {
				s.End(flights[0].end, flights[0].cost)
				flights = flights[1:]
			}
			cost := 1 + rng.Int64N(maxCost)
			if ok, _ := s.Check(now, cost); !ok {
				continue
			}
			s.Take(now, cost)
			arrive := now.Add(time.Duration(rng.Int64N(int64(spread) + 1)))
			end := arrive.Add(time.Duration(rng.Int64N(int64(spread)/2 + 1)))
			flights = append(flights, flying{end: end, arrive: arrive, cost: cost})
			arrivals = append(arrivals, arrival{arrive, cost})
			buf = s.MarshalShapes(buf) // through a store's encoding
			back := State{Config: s.Config}
			if err := back.UnmarshalShapes(buf); err != nil {
				t.Fatal(err)
			}
			s.logs = back.logs
		}
		if len(arrivals) < 10 {
			t.Fatalf("trial %d %+v: only %d starts admitted", trial, w, len(arrivals))
		}
		slices.SortFunc(arrivals, func(a, b arrival) int { return a.at.Compare(b.at) })
		for i, a := range arrivals {
			var in int64
			for _, o := range arrivals[i:] {
				if !w.Fixed && o.at.Sub(a.at) < w.Period {
					in += o.cost
				}
				if w.Fixed && o.at.UnixNano()/int64(w.Period) == a.at.UnixNano()/int64(w.Period) {
					in += o.cost
				}
			}
			if float64(in) > w.Limit {
				t.Fatalf("trial %d %+v, transit up to %v: %d units arrived in the window from %v, over %v",
					trial, w, spread, in, a.at.Sub(t0), w.Limit)
			}
		}
	}
}

// TestWindowAnswersOutOfOrder lands a sliding window's answers out of
// order, as a finish batch applies them: an answer earlier than the latest
// logged is logged at that latest time (startLog.add), so it leaves the
// window with it, later than it answered; placing it at its own time was
// measured and not kept (it sped up sliding and many under the virtual
// quiet lag but cost the issue mix's half-none under the loaded lag:
// docs/benchmarks.md, "Session 21 (s21r2)"). With answers landing in
// shuffled batches behind random transit, no window of the upstream's
// ever counts more arrivals than the limit.
func TestWindowAnswersOutOfOrder(t *testing.T) {
	t.Parallel()
	s := NewState(Config{Name: "w", Windows: []Window{{Limit: 2, Period: time.Second}}})
	s.Take(t0, 1)
	s.Take(t0.Add(10*time.Millisecond), 1)
	s.End(t0.Add(100*time.Millisecond), 1) // the later start's answer lands first
	s.End(t0.Add(50*time.Millisecond), 1)
	if ok, next := s.Check(t0.Add(500*time.Millisecond), 1); ok || !next.Equal(t0.Add(1100*time.Millisecond)) {
		t.Fatalf("third start: ok=%v next=+%v, want refused until +1.1s (the latest answer's period)", ok, next.Sub(t0))
	}

	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 100 {
		w := Window{Limit: float64(1 + rng.IntN(20)), Period: time.Duration(50+rng.IntN(2000)) * time.Millisecond}
		s := NewState(Config{Name: "k", Windows: []Window{w}})
		spread := time.Duration(float64(w.Period) * []float64{0.05, 0.3}[rng.IntN(2)])
		type flying struct{ arrive, end time.Time }
		var flights []flying
		var arrivals []time.Time
		now := t0
		for range 800 {
			now = now.Add(time.Duration(rng.ExpFloat64() * float64(w.Period) / 20))
			// A batch: every answer in by now, applied in a random order.
			var due []flying
			flights = slices.DeleteFunc(flights, func(f flying) bool {
				if !f.end.After(now) {
					due = append(due, f)
					return true
				}
				return false
			})
			rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
			for _, f := range due {
				s.End(f.end, 1)
			}
			if ok, _ := s.Check(now, 1); !ok {
				continue
			}
			s.Take(now, 1)
			arrive := now.Add(time.Duration(rng.Int64N(int64(spread) + 1)))
			flights = append(flights, flying{arrive, arrive.Add(time.Duration(rng.Int64N(int64(spread) + 1)))})
			arrivals = append(arrivals, arrive)
		}
		slices.SortFunc(arrivals, time.Time.Compare)
		if n := upstream.MaxInWindow(arrivals, w.Period); float64(n) > w.Limit {
			t.Fatalf("trial %d %+v: %d arrivals within one period, over the limit", trial, w, n)
		}
	}
}
