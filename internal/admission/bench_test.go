package admission

import (
	"testing"
	"time"
)

// BenchmarkCheckTake measures one admission (Check then Take, then the
// Release that ends it) on a paced key, the work a lease does per key per
// start. It is the figure the lease path's throughput rests on.
func BenchmarkCheckTake(b *testing.B) {
	s := NewState(Config{Name: "k", Rate: 1e6, Burst: 100})
	now := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	for range b.N {
		now = now.Add(time.Microsecond)
		if ok, _ := s.Check(now, 1); ok {
			s.Take(now, 1)
		}
		s.Release()
	}
}
