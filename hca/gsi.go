package hca

// QP1 on the RoCEv2 wire: the General Services Interface. The device
// has no GSI QP a client can post to; the daemon's connection manager
// sends and receives its MADs here ([Device.SendMAD],
// [Device.SetMADHandler]) as UD SEND ONLY packets from QP1 to QP1 with
// the GSI Q_Key, which is what a ConnectX puts on the wire for the
// kernel CM.

import (
	"fmt"
	"net/netip"

	"github.com/hcasim/hcasim/roce"
)

// The GSI QP and its well-known Q_Key.
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
)

// MADSize is the size of a management datagram.
const MADSize = 256

// MADHandler takes a MAD that arrived on QP1 from the host at from. It
// runs on the port's receive goroutine: it must not block, and mad is
// valid only during the call.
type MADHandler func(from netip.Addr, mad []byte)

// SetMADHandler makes h (nil: none) the receiver of the MADs that arrive
// on the port's QP1; without one they are dropped.
func (d *Device) SetMADHandler(h MADHandler) {
	if h == nil {
		d.mad.Store(nil)
		return
	}
	d.mad.Store(&h)
}

// SendMAD sends a 256-byte MAD from the port's QP1 to QP1 of the host at
// to. Like every MAD it may be lost on the wire; the sender retries.
func (d *Device) SendMAD(to netip.Addr, mad []byte) error {
	w := d.wire.Load()
	switch {
	case w == nil:
		return fmt.Errorf("%w: no roce port for a mad", ErrWire)
	case len(mad) != MADSize:
		return fmt.Errorf("%w: a mad of %d bytes", ErrWire, len(mad))
	}
	p := roce.Packet{BTH: roce.BTH{Opcode: roce.OpUDSendOnly, PKey: 0xFFFF, DestQP: GSIQPN, PSN: d.gsiPSN.Add(1) & 0xFFFFFF},
		DETH: roce.DETH{QKey: GSIQKey, SrcQP: GSIQPN}}
	u := w.newBurst()
	w.tx(u, netip.AddrPortFrom(to.Unmap(), w.port), &p, [][]byte{mad}, 0, len(mad))
	u.done()
	return nil
}

// deliverMAD hands a packet for QP1 to the MAD handler; anything but a
// GSI datagram of one MAD is dropped.
func (w *wire) deliverMAD(from netip.AddrPort, p *roce.Packet) {
	h := w.dev.mad.Load()
	if h == nil || p.Opcode != roce.OpUDSendOnly || p.DETH.QKey != GSIQKey || len(p.Payload) != MADSize {
		w.dev.ctr.rxDropped.Add(1)
		return
	}
	(*h)(from.Addr(), p.Payload)
}
