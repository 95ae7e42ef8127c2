package hca

import (
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"sync"
	"unsafe"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/klm"
)

var _ ifc.Function = (*Func)(nil)

// Func is a function of an in-process device. It is safe for concurrent use.
type Func struct {
	dev   *Device
	mem   *klm.Memory
	mkeys *klm.Table

	mu           sync.Mutex
	closed       bool
	pds          domains // PDs
	xrcds        domains // XRC domains
	cqs          map[uint32]*CQ
	nextCQN      uint32
	qps          map[uint32]*QP
	srqs         map[uint32]*SRQ
	nextSRQN     uint32
	psvs         map[uint32]*PSV // changed with mu and psvMu held; psv reads it with psvMu
	psvMu        sync.RWMutex
	nextPSV      uint32
	dmaNext      uint64
	dma          map[uint64][]byte
	charged      uint64            // device memory its objects hold (budget.go)
	budgetLogged bool              // its refusal by a budget was logged
	mkeyCost     map[uint32]uint64 // what each mkey was charged

	evMu   sync.Mutex
	events []ifc.Event
	evSig  chan struct{}

	sigCache sync.Map // mkey index → *sigCacheEntry
	sigMu    sync.Mutex
	sigErrs  map[uint32]*sigState
}

func newFunc(d *Device) *Func {
	mem := klm.NewMemory()
	mem.Limit = d.caps.MaxMappedBytes
	f := &Func{
		dev:      d,
		mem:      mem,
		mkeys:    klm.NewTable(d.caps.Mkey, mem),
		pds:      newDomains("PD"),
		xrcds:    newDomains("XRC domain"),
		mkeyCost: map[uint32]uint64{},
		cqs:      map[uint32]*CQ{},
		nextCQN:  1,
		qps:      map[uint32]*QP{},
		srqs:     map[uint32]*SRQ{},
		nextSRQN: 1,
		psvs:     map[uint32]*PSV{},
		nextPSV:  1,
		dmaNext:  1 << 32,
		dma:      map[uint64][]byte{},
		evSig:    make(chan struct{}, 1),
		sigErrs:  map[uint32]*sigState{},
	}
	f.mkeys.SetCheck(f.checkMkey)
	return f
}

// Device returns the function's device.
func (f *Func) Device() *Device { return f.dev }

// Memory returns the function's DMA address space (for tests and tools;
// drivers use AllocDMA).
func (f *Func) Memory() *klm.Memory { return f.mem }

// Mkeys returns the function's mkey table (for tests and tools).
func (f *Func) Mkeys() *klm.Table { return f.mkeys }

// MapBuffer maps caller memory at iova for DMA: an in-process driver may
// register any Go buffer, as a kernel driver maps pages.
func (f *Func) MapBuffer(iova uint64, buf []byte) error { return f.mem.Map(iova, buf) }

// UnmapBuffer undoes MapBuffer.
func (f *Func) UnmapBuffer(iova uint64) error { return f.mem.Unmap(iova) }

// AllocDMA implements ifc.Function.AllocDMA.
func (f *Func) AllocDMA(n int, align int) ([]byte, uint64, error) {
	if n <= 0 || align <= 0 || align&(align-1) != 0 {
		return nil, 0, fmt.Errorf("alloc dma %d bytes aligned %d: %w", n, align, klm.ErrEmptyMap)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, 0, ErrClosed
	}
	// Over-allocate so that the buffer itself is aligned in Go memory too
	// (atomic words, and WQEBB-aligned rings).
	raw := make([]byte, n+align+64)
	off := 0
	for addrOf(raw[off:])%uint64(max(align, 64)) != 0 {
		off++
	}
	buf := raw[off : off+n : off+n]
	iova, err := f.mapDMA(buf, align)
	if err != nil {
		return nil, 0, err
	}
	return buf, iova, nil
}

// MapDMA maps memory the caller owns (a transport's shared memory) as if
// AllocDMA had returned it: at a fresh IOVA aligned to align (at least a
// page), released with FreeDMA.
func (f *Func) MapDMA(buf []byte, align int) (uint64, error) {
	if len(buf) == 0 || align <= 0 || align&(align-1) != 0 {
		return 0, fmt.Errorf("map dma %d bytes aligned %d: %w", len(buf), align, klm.ErrEmptyMap)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, ErrClosed
	}
	return f.mapDMA(buf, align)
}

// mapDMA maps buf at the next free IOVA; called with f.mu held.
func (f *Func) mapDMA(buf []byte, align int) (uint64, error) {
	a := uint64(max(align, 4096))
	iova := (f.dmaNext + a - 1) &^ (a - 1)
	if err := f.mem.Map(iova, buf); err != nil {
		return 0, err
	}
	f.dmaNext = iova + uint64(len(buf)) + 4096 // a guard gap between allocations
	f.dma[iova] = buf
	return iova, nil
}

// FreeDMA implements ifc.Function.FreeDMA.
func (f *Func) FreeDMA(iova uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.dma[iova]; !ok {
		return fmt.Errorf("free dma %#x: %w", iova, klm.ErrNotMapped)
	}
	delete(f.dma, iova)
	return f.mem.Unmap(iova)
}

// lookupQP returns the function's QP qpn, or nil.
func (f *Func) lookupQP(qpn uint32) *QP {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.qps[qpn]
}

// lookupCQ returns the function's CQ cqn, or nil.
func (f *Func) lookupCQ(cqn uint32) *CQ {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cqs[cqn]
}

// allQPs returns a snapshot of the function's QPs.
func (f *Func) allQPs() []*QP {
	f.mu.Lock()
	defer f.mu.Unlock()
	qps := make([]*QP, 0, len(f.qps))
	for _, qp := range f.qps {
		qps = append(qps, qp)
	}
	return qps
}

// RingSQ implements ifc.Function.RingSQ.
func (f *Func) RingSQ(qpn uint32) {
	qp := f.lookupQP(qpn)
	if qp != nil {
		qp.doorbell()
	}
}

// RingRQ implements ifc.Function.RingRQ.
func (f *Func) RingRQ(qpn uint32) {
	qp := f.lookupQP(qpn)
	if qp != nil {
		qp.ringRQ()
	}
}

// ArmCQ implements ifc.Function.ArmCQ.
func (f *Func) ArmCQ(cqn uint32, word uint32) {
	c := f.lookupCQ(cqn)
	if c != nil {
		c.ring.Arm(word)
	}
}

// Events implements ifc.Function.Events.
func (f *Func) Events() <-chan struct{} { return f.evSig }

// DrainEvents implements ifc.Function.DrainEvents.
func (f *Func) DrainEvents(evs []ifc.Event) []ifc.Event {
	f.evMu.Lock()
	defer f.evMu.Unlock()
	evs = append(evs, f.events...)
	f.events = f.events[:0]
	return evs
}

// event queues an event for the driver; it never blocks.
func (f *Func) event(t ifc.EventType, obj uint32) {
	f.evMu.Lock()
	f.events = append(f.events, ifc.Event{Type: t, Obj: obj})
	f.evMu.Unlock()
	select {
	case f.evSig <- struct{}{}:
	default:
	}
}

// Quiesce moves every QP of the function to error, so that outstanding
// and posted work completes with flush errors (a daemon shutting down does
// this before it closes its functions).
func (f *Func) Quiesce() {
	for _, qp := range f.allQPs() {
		qp.toError()
	}
}

// Close implements ifc.Function.Close: every QP moves to error and stops, the
// function's objects and memory are released. Idempotent.
func (f *Func) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	for _, qp := range f.allQPs() {
		qp.destroy()
	}
	f.mu.Lock()
	f.dev.uncharge(f.charged) // what its mkeys, CQs and PSVs held
	f.charged = 0
	f.mu.Unlock()
	f.dev.removeFunc(f)
	return nil
}

// CQ is a completion queue object.
type CQ struct {
	cqn  uint32
	fn   *Func
	ring *cq.Ring
	qps  int  // QPs completing to it, under fn.mu
	errd bool // the overflow was reported, under fn.mu
}

// push writes a CQE; an overflow raises the CQ error event once.
func (c *CQ) push(fl *cq.Fields, solicited bool) bool {
	return c.pushN(unsafe.Slice(fl, 1), solicited)
}

// pushN writes CQEs in order under one lock of the ring; an overflow
// raises the CQ error event once.
func (c *CQ) pushN(fs []cq.Fields, solicited bool) bool {
	if _, err := c.ring.PushN(fs, solicited); err != nil {
		if !c.ring.Broken() {
			return false
		}
		c.fn.cqError(c)
		return false
	}
	return true
}

func (f *Func) cqError(c *CQ) {
	f.mu.Lock()
	first := !c.errd
	c.errd = true
	f.mu.Unlock()
	if first {
		f.event(ifc.EventCQError, c.cqn)
	}
}

// PSV is a protection signature variable object: per-domain running
// signature state set by SET_PSV (its meaning comes with the signature
// pipeline).
type PSV struct {
	index uint32
	pd    uint32
	mu    sync.Mutex
	bg    uint16
	app   uint16
	ref   uint32
}
