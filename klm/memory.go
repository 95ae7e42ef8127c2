package klm

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Memory errors.
var (
	ErrOverlap    = errors.New("klm: region overlaps a mapped region")
	ErrNotMapped  = errors.New("klm: no region is mapped at that address")
	ErrEmptyMap   = errors.New("klm: region is empty or wraps the address space")
	ErrMapLimit   = errors.New("klm: mapped bytes limit reached")
	ErrUnmappedIO = errors.New("klm: access to unmapped memory")
)

// Memory is one function's DMA address space: buffers mapped at IOVAs. The
// device touches only mapped bytes, and every access is bounds-checked. A
// Memory is safe for concurrent use; lookups take no locks.
type Memory struct {
	mu    sync.Mutex // serialises Map and Unmap
	snap  atomic.Pointer[[]region]
	bytes uint64 // mapped bytes, under mu
	// Limit caps the mapped bytes (0: no limit). Set before use.
	Limit uint64
}

type region struct {
	iova uint64
	buf  []byte
}

func (r *region) end() uint64 { return r.iova + uint64(len(r.buf)) }

// NewMemory returns an empty address space.
func NewMemory() *Memory { return new(Memory) }

func (m *Memory) regions() []region {
	if p := m.snap.Load(); p != nil {
		return *p
	}
	return nil
}

// Map makes buf reachable by the device at [iova, iova+len(buf)). The
// memory stays the caller's; the device reads and writes it in place.
func (m *Memory) Map(iova uint64, buf []byte) error {
	n := uint64(len(buf))
	if n == 0 || iova+n < iova {
		return fmt.Errorf("map %#x+%#x: %w", iova, n, ErrEmptyMap)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.Limit != 0 && m.bytes+n > m.Limit {
		return fmt.Errorf("map %#x+%#x with %d of %d bytes mapped: %w", iova, n, m.bytes, m.Limit, ErrMapLimit)
	}
	old := m.regions()
	i, _ := slices.BinarySearchFunc(old, iova, func(r region, a uint64) int { return cmpU64(r.iova, a) })
	if (i > 0 && old[i-1].end() > iova) || (i < len(old) && old[i].iova < iova+n) {
		return fmt.Errorf("map %#x+%#x: %w", iova, n, ErrOverlap)
	}
	nr := make([]region, 0, len(old)+1)
	nr = append(append(append(nr, old[:i]...), region{iova, buf}), old[i:]...)
	m.snap.Store(&nr)
	m.bytes += n
	return nil
}

// Unmap removes the region mapped at iova. Accesses that resolve to it
// afterwards fault; slices handed out before stay valid Go memory.
func (m *Memory) Unmap(iova uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.regions()
	i, ok := slices.BinarySearchFunc(old, iova, func(r region, a uint64) int { return cmpU64(r.iova, a) })
	if !ok {
		return fmt.Errorf("unmap %#x: %w", iova, ErrNotMapped)
	}
	nr := slices.Delete(slices.Clone(old), i, i+1)
	m.snap.Store(&nr)
	m.bytes -= uint64(len(old[i].buf))
	return nil
}

// Mapped returns the number of mapped bytes.
func (m *Memory) Mapped() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}

// Segments appends to segs the slices of mapped memory that make up
// [iova, iova+n), in order, and returns the extended slice. A byte of the
// range that is not mapped gives ErrUnmappedIO and segs unchanged.
func (m *Memory) Segments(segs [][]byte, iova, n uint64) ([][]byte, error) {
	if n == 0 {
		return segs, nil
	}
	rs := m.regions()
	end := iova + n
	if end < iova {
		return segs, fmt.Errorf("access %#x+%#x: %w", iova, n, ErrUnmappedIO)
	}
	// The last region starting at or before iova.
	i, found := slices.BinarySearchFunc(rs, iova, func(r region, a uint64) int { return cmpU64(r.iova, a) })
	if !found {
		i--
	}
	start := len(segs)
	for a := iova; a < end; i++ {
		if i < 0 || i >= len(rs) || rs[i].iova > a || rs[i].end() <= a {
			return segs[:start], fmt.Errorf("access %#x+%#x at %#x: %w", iova, n, a, ErrUnmappedIO)
		}
		r := &rs[i]
		hi := min(end, r.end())
		segs = append(segs, r.buf[a-r.iova:hi-r.iova:hi-r.iova])
		a = hi
	}
	return segs, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
