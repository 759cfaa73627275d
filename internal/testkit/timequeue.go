package testkit

import (
	"container/heap"
	"time"
)

// Timed is a value a TimeQueue holds: something due at an instant.
type Timed interface {
	Due() time.Time
}

// TimeQueue is the event queue of a simulation in virtual time: values
// due at instants, taken earliest first (a container/heap min-heap on
// Due; equal instants come out in heap order, not insertion order). The
// zero value is an empty queue. It is not safe for concurrent use.
type TimeQueue[T Timed] struct {
	h timeHeap[T]
}

// Len returns how many values the queue holds.
func (q *TimeQueue[T]) Len() int { return len(q.h) }

// Push adds v.
func (q *TimeQueue[T]) Push(v T) { heap.Push(&q.h, v) }

// PopDue removes and returns the earliest value if it is due at or
// before now; otherwise (or when the queue is empty) it returns false.
func (q *TimeQueue[T]) PopDue(now time.Time) (T, bool) {
	if len(q.h) == 0 || q.h[0].Due().After(now) {
		var zero T
		return zero, false
	}
	return heap.Pop(&q.h).(T), true
}

// timeHeap is TimeQueue's container/heap.Interface.
type timeHeap[T Timed] []T

func (h timeHeap[T]) Len() int           { return len(h) }
func (h timeHeap[T]) Less(i, j int) bool { return h[i].Due().Before(h[j].Due()) }
func (h timeHeap[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap[T]) Push(x any)        { *h = append(*h, x.(T)) }
func (h *timeHeap[T]) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}
