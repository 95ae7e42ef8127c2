package hca

import "sync"

// mbox is a many-producer, one-consumer queue that wakes its consumer once
// per batch: producers append under a lock and signal a channel of
// capacity one; the consumer takes the whole batch at once, handing back
// its previous buffer, so a steady flow allocates nothing.
type mbox[T any] struct {
	mu    sync.Mutex
	items []T
	sig   chan struct{}
	limit int
}

func newMbox[T any](limit int) *mbox[T] {
	return &mbox[T]{sig: make(chan struct{}, 1), limit: limit}
}

// put appends items and wakes the consumer; items beyond the limit are
// dropped (a requester retransmits them after its timeout). It returns how
// many it took: items[:n].
func (m *mbox[T]) put(items ...T) int {
	if len(items) == 0 {
		return 0
	}
	m.mu.Lock()
	n := min(len(items), m.limit-len(m.items))
	if n > 0 {
		m.items = append(m.items, items[:n]...)
	}
	m.mu.Unlock()
	select {
	case m.sig <- struct{}{}:
	default:
	}
	return max(n, 0)
}

// take returns the queued items and keeps buf (emptied) as the next
// batch's storage.
func (m *mbox[T]) take(buf []T) []T {
	m.mu.Lock()
	out := m.items
	clear(buf[:cap(buf)])
	m.items = buf[:0]
	m.mu.Unlock()
	return out
}
