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

// BenchmarkCheckTakeWindows is BenchmarkCheckTake on a key with a bucket
// and two windows (5/s-and-200/min style), including the encode and
// decode of the start logs that a store does once per lease call.
func BenchmarkCheckTakeWindows(b *testing.B) {
	s := NewState(Config{Name: "k", Rate: 1e6, Burst: 100,
		Windows: []Window{{Limit: 1e5, Period: 100 * time.Millisecond}, {Limit: 1e6, Period: time.Second}}})
	now := time.Unix(1_700_000_000, 0)
	var buf []byte
	b.ReportAllocs()
	for i := range b.N {
		now = now.Add(time.Microsecond)
		if ok, _ := s.Check(now, 1); ok {
			s.Take(now, 1)
			s.End(now, 1)
		}
		if i%10 == 0 { // a lease call admits about ten starts per key
			buf = s.MarshalShapes(buf)
			if err := s.UnmarshalShapes(buf); err != nil {
				b.Fatal(err)
			}
		}
	}
}
