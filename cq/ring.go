package cq

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/hcasim/hcasim/internal/dma"
)

// Ring errors.
var (
	ErrGeometry = errors.New("cq: ring or doorbell record of the wrong size or alignment")
	ErrOverflow = errors.New("cq: overflow: the consumer did not keep up")
)

// Doorbell-record layout: word 0 the consumer index (24 bits), word 1 the
// last arm command.
const (
	DBRecCI   = 0 // offset of the consumer index (MLX5_CQ_SET_CI)
	DBRecArm  = 4 // offset of the arm word (MLX5_CQ_ARM_DB)
	DBRecSize = 8
	// Arm commands (bits 27:24 of the arm word, MLX5_CQ_DB_REQ_NOT*).
	ArmNext      = 0 << 24
	ArmSolicited = 1 << 24
	// ArmInitialOpOwn is what the driver writes into every op_own before
	// use: opcode INVALID, owner 1.
	ArmInitialOpOwn = uint8(OpInvalid)<<4 | 1
	indexMask       = 1<<24 - 1
)

// ArmWord builds the arm doorbell word: sn<<28 | cmd | ci.
func ArmWord(sn uint8, cmd uint32, ci uint32) uint32 {
	return uint32(sn&3)<<28 | cmd&(0xF<<24) | ci&indexMask
}

// Ring is the device side of one completion queue: it writes CQEs into the
// ring the driver allocated in host memory and tells the driver when an
// armed CQ gets one. A Ring is safe for concurrent use: several queues may
// complete to one CQ.
type Ring struct {
	mu      sync.Mutex
	buf     []byte // 2^logSize CQEs
	dbrec   []byte
	logSize uint8
	pi      uint32 // CQEs written (24-bit wrap)
	armed   bool
	solOnly bool
	broken  bool
	notify  func()
}

// NewRing returns the ring over buf (2^logSize CQEs, 8-byte aligned) with
// its doorbell record dbrec. notify, if not nil, is called (without locks
// held) when an armed CQ gets a completion that its arming asked for.
func NewRing(buf, dbrec []byte, logSize uint8, notify func()) (*Ring, error) {
	if logSize > 22 || len(buf) != CQESize<<logSize || !dma.Aligned(buf) || len(dbrec) < DBRecSize || !dma.Aligned(dbrec) {
		return nil, fmt.Errorf("%d-byte ring for 2^%d CQEs, %d-byte doorbell record: %w", len(buf), logSize, len(dbrec), ErrGeometry)
	}
	return &Ring{buf: buf, dbrec: dbrec[:DBRecSize], logSize: logSize, notify: notify}, nil
}

// Size returns the number of CQEs the ring holds.
func (r *Ring) Size() uint32 { return 1 << r.logSize }

// ConsumerIndex returns the driver's consumer index from the doorbell record.
func (r *Ring) ConsumerIndex() uint32 { return dma.LoadBE32(r.dbrec[DBRecCI:]) & indexMask }

// Push writes one CQE. solicited marks a completion that a solicited-only
// arming reports (solicited events and errors). A full ring is an
// overflow: nothing is written, the ring stays broken (every later Push
// fails too) and the caller raises the CQ error event.
func (r *Ring) Push(f *Fields, solicited bool) error {
	_, err := r.PushN(unsafe.Slice(f, 1), solicited)
	return err
}

// PushN writes the CQEs fs in order under one lock, each as Push writes
// one (solicited applies to each), and returns how many it wrote; it
// stops at an overflow and returns the error.
func (r *Ring) PushN(fs []Fields, solicited bool) (int, error) {
	r.mu.Lock()
	var err error
	n, fire := 0, false
	ci := r.ConsumerIndex()
	for i := range fs {
		if r.broken {
			err = ErrOverflow
			break
		}
		if (r.pi-ci)&indexMask >= r.Size() {
			ci = r.ConsumerIndex() // the driver may have polled since
		}
		if (r.pi-ci)&indexMask >= r.Size() {
			r.broken = true
			err = fmt.Errorf("producer %d, consumer %d, %d entries: %w", r.pi, ci, r.Size(), ErrOverflow)
			break
		}
		f := &fs[i]
		slot := r.pi & (r.Size() - 1)
		c := CQE(r.buf[slot*CQESize : (slot+1)*CQESize])
		last := c.Encode(f, uint8(r.pi>>r.logSize))
		dma.StoreBytes(c[offWQECounter:], last)
		r.pi = (r.pi + 1) & indexMask
		n++
		if r.armed && (!r.solOnly || solicited || f.Opcode == OpReqErr || f.Opcode == OpRespErr) {
			r.armed, fire = false, true
		}
	}
	r.mu.Unlock()
	if fire && r.notify != nil {
		r.notify()
	}
	return n, err
}

// Arm carries out an arm doorbell: the driver wrote word (ArmWord) to the
// doorbell record's second word and rang the doorbell. If the CQ already
// holds a completion at or after the arm's consumer index, the event is
// delivered at once; otherwise at the next completion.
func (r *Ring) Arm(word uint32) {
	dma.StoreBE32(r.dbrec[DBRecArm:], word)
	r.mu.Lock()
	ci := word & indexMask
	sol := word&(0xF<<24) == ArmSolicited
	pending := r.pi != ci && !sol // a solicited arm waits for a new solicited CQE
	if pending {
		r.armed = false
	} else {
		r.armed, r.solOnly = true, sol
	}
	r.mu.Unlock()
	if pending && r.notify != nil {
		r.notify()
	}
}

// Resize moves the ring to buf (2^logSize CQEs), as mlx5's resize does:
// a RESIZE_CQ CQE (opcode 5) at the producer index of the old ring marks
// the switch, and the CQEs after it go to the new ring, the index space
// continuing. The driver copies the CQEs it has not polled, those before
// the marker, to the new ring one index later, and moves its consumer
// index past the marker. The new ring must hold them and the marker; an
// old ring with no room for the marker (or an overflowed one) cannot be
// resized.
func (r *Ring) Resize(buf []byte, logSize uint8) error {
	if logSize > 22 || len(buf) != CQESize<<logSize || !dma.Aligned(buf) {
		return fmt.Errorf("%d-byte ring for 2^%d CQEs: %w", len(buf), logSize, ErrGeometry)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	used := (r.pi - r.ConsumerIndex()) & indexMask
	switch {
	case r.broken:
		return fmt.Errorf("resize an overflowed CQ: %w", ErrOverflow)
	case used >= r.Size():
		return fmt.Errorf("resize a full CQ (%d entries): %w", used, ErrOverflow)
	case used+1 > 1<<logSize:
		return fmt.Errorf("%d unpolled CQEs and the resize marker in 2^%d entries: %w", used, logSize, ErrGeometry)
	}
	slot := r.pi & (r.Size() - 1)
	c := CQE(r.buf[slot*CQESize : (slot+1)*CQESize])
	last := c.Encode(&Fields{Opcode: OpResizeCQ}, uint8(r.pi>>r.logSize))
	dma.StoreBytes(c[offWQECounter:], last)
	r.pi = (r.pi + 1) & indexMask
	r.buf, r.logSize = buf, logSize
	return nil
}

// Outstanding returns how many written CQEs the driver has not consumed.
func (r *Ring) Outstanding() uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return (r.pi - r.ConsumerIndex()) & indexMask
}

// Broken reports whether the ring overflowed.
func (r *Ring) Broken() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.broken
}

// Poll is the driver's side: it returns the CQE at consumer index ci of a
// ring of 2^logSize CQEs if the device has written it, reading its last
// word atomically before the rest.
func Poll(buf []byte, logSize uint8, ci uint32) (CQE, bool) {
	i := ci & (1<<logSize - 1)
	c := CQE(buf[i*CQESize : (i+1)*CQESize])
	last := dma.LoadBytes(c[offWQECounter:])
	op, owner := Opcode(last[3]>>4), last[3]&1
	if op == OpInvalid || owner != uint8(ci>>logSize)&1 {
		return nil, false
	}
	return c, true
}

// InitRing prepares a ring for the device: every op_own INVALID with owner 1.
func InitRing(buf []byte) {
	for i := 0; i+CQESize <= len(buf); i += CQESize {
		dma.StoreBytes(buf[i+offWQECounter:], [4]byte{0, 0, 0, ArmInitialOpOwn})
	}
}

// SetConsumerIndex is the driver's update of the doorbell record after
// polling (the consumer index, 24 bits).
func SetConsumerIndex(dbrec []byte, ci uint32) { dma.StoreBE32(dbrec[DBRecCI:], ci&indexMask) }
