package sq

import (
	"errors"
	"fmt"

	"github.com/hcasim/hcasim/internal/dma"
)

// Ring errors.
var (
	ErrGeometry = errors.New("sq: ring or doorbell record of the wrong size or alignment")
	ErrBadWQE   = errors.New("sq: malformed WQE")
)

// The QP doorbell record, big-endian 32-bit words:
//
//	offset 0  receive counter (MLX5_RCV_DBR), low 16 bits the RQ producer
//	offset 4  send counter (MLX5_SND_DBR), low 16 bits the SQ producer
//	offset 8  model extension: send activity hint (DBRecHintSize)
const (
	DBRecRecv = 0 // offset of the receive counter
	DBRecSend = 4 // offset of the send counter
	DBRecHint = 8 // offset of the send activity hint
)

// DBRecSize is the size of a QP doorbell record: the receive and the
// send counter.
const DBRecSize = 8

// DBRecHintSize is the size of a doorbell record with the model's send
// activity hint (CREATE_QP flag QPFlagDBHint): word 2, written by the
// device, is non-zero while the send queue's engine runs and will read the
// send counter again before it sleeps; a driver that sees it non-zero
// after writing the send counter may skip the doorbell.
const DBRecHintSize = 12

// Ring is the device's view of a send queue: 2^logSize WQEBBs in host
// memory and the send counter of the doorbell record. It is
// thread-compatible: the queue's goroutine owns it.
type Ring struct {
	buf     []byte
	dbrec   []byte // the send counter word
	logSize uint8
	ci      uint16 // next WQEBB to fetch (a free-running 16-bit counter)
	avail   uint16 // WQEBBs posted from ci on, as Peek last saw them (Take)
}

// NewRing returns the ring over buf (2^logSize WQEBBs) with the send
// counter at dbrec (4 bytes, 4-byte aligned).
func NewRing(buf, dbrec []byte, logSize uint8) (*Ring, error) {
	if logSize > 15 || len(buf) != WQEBBSize<<logSize || !dma.Aligned(dbrec) {
		return nil, fmt.Errorf("%d-byte ring for 2^%d WQEBBs: %w", len(buf), logSize, ErrGeometry)
	}
	return &Ring{buf: buf, dbrec: dbrec[:4], logSize: logSize}, nil
}

// Size returns the number of WQEBBs.
func (r *Ring) Size() int { return 1 << r.logSize }

// Producer returns the driver's send counter from the doorbell record.
func (r *Ring) Producer() uint16 { return uint16(dma.LoadBE32(r.dbrec)) }

// Consumer returns the counter of the next WQEBB to fetch.
func (r *Ring) Consumer() uint16 { return r.ci }

// Pending reports whether the driver has posted WQEs not yet fetched.
func (r *Ring) Pending() bool { return r.Producer() != r.ci }

// Peek returns the control fields of the next posted WQE without
// consuming it; ok is false when none is posted.
func (r *Ring) Peek() (f CtrlFields, ok bool) {
	ok = r.PeekInto(&f)
	return f, ok
}

// PeekInto is Peek decoding into f (which it leaves alone when nothing is
// posted). It keeps how many WQEBBs are posted for Take. A slot past the
// send counter is never read: the driver may be writing it.
func (r *Ring) PeekInto(f *CtrlFields) bool {
	r.avail = r.Producer() - r.ci // the atomic load first: it publishes the WQE bytes
	if r.avail == 0 {
		return false
	}
	off := int(r.ci&uint16(r.Size()-1)) * WQEBBSize
	CtrlSeg(r.buf[off : off+CtrlSegSize]).Decode(f)
	return true
}

// Take consumes the WQE whose control fields the last Peek returned as f:
// Fetch's checks and copy into scratch, without reading the control
// segment again.
func (r *Ring) Take(scratch []byte, f *CtrlFields) ([]byte, error) {
	nbb := WQEBBs(f.DS)
	if f.DS == 0 || int(f.DS) > MaxDS || uint16(nbb) > r.avail || nbb > r.Size() {
		r.ci++
		return nil, fmt.Errorf("WQE at %d: ds %d, %d WQEBBs posted: %w", r.ci-1, f.DS, r.avail, ErrBadWQE)
	}
	off := int(r.ci&uint16(r.Size()-1)) * WQEBBSize
	w := scratch[:int(f.DS)*SegSize]
	if first := copy(w, r.buf[off:]); first < len(w) {
		copy(w[first:], r.buf)
	}
	r.ci += uint16(nbb)
	r.avail -= uint16(nbb)
	return w, nil
}

// Reset restarts the consumer counter at 0 (a QP back in RESET; the
// driver restarts its producer counter too).
func (r *Ring) Reset() { r.ci = 0 }

// Fetch copies the WQE at the consumer counter into scratch (at least
// MaxWQEBBs*WQEBBSize bytes), reading segments modulo the ring so a WQE
// may wrap at its end, advances the counter past it, and returns its
// bytes (DS×16 of them) and control fields. A WQE whose DS is 0, larger
// than MaxDS or than the posted WQEBBs is malformed, and so is a fetch
// with nothing posted: the counter is advanced by one WQEBB so the queue
// can flush it.
func (r *Ring) Fetch(scratch []byte) ([]byte, CtrlFields, error) {
	var f CtrlFields
	r.PeekInto(&f) // nothing posted: f is zero, and Take refuses its DS of 0
	w, err := r.Take(scratch, &f)
	return w, f, err
}
