package hca

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Batched datagrams (Linux UDP GSO and GRO). A message's packets go to the
// kernel in one sendmsg with a UDP_SEGMENT size: a run of equal datagrams,
// optionally ended by one shorter (the kernel's rule); a port that set
// UDP_GRO gets such a run back in one recvmsg and splits it at the size
// the control message gives. Each datagram is still the packet it would
// be alone, its ICRC its own. Without GSO (an error once), datagrams go
// one by one.

// gsoMax bounds a run: the kernel takes at most 64 segments and a 64 KiB
// datagram.
const (
	gsoMaxSegs  = 64
	gsoMaxBytes = 65000
)

// burst collects the datagrams of one send call for one destination.
type burst struct {
	w     *wire
	to    netip.AddrPort
	buf   *[]byte
	seg   int  // the run's datagram size
	n     int  // datagrams in the run
	short bool // the run ended with a shorter one
}

var burstBufs = sync.Pool{New: func() any { b := make([]byte, 0, gsoMaxBytes+packetSize); return &b }}

func (w *wire) newBurst() *burst { return &burst{w: w} }

// space returns the run's buffer, to append one datagram of size bytes
// for to (the run before it sent if it cannot join), or nil when the port
// does not batch (the caller builds the datagram elsewhere and calls
// send1). commit then takes the datagram appended.
func (u *burst) space(size int, to netip.AddrPort) []byte {
	w := u.w
	if !w.gso.Load() || w.faults.any() {
		return nil
	}
	if u.buf == nil {
		u.buf = burstBufs.Get().(*[]byte)
		*u.buf = (*u.buf)[:0]
	}
	fits := u.n > 0 && to == u.to && !u.short && size <= u.seg && len(*u.buf)+size <= gsoMaxBytes && u.n < gsoMaxSegs
	if !fits {
		u.flush()
		u.to, u.seg = to, size
	}
	return *u.buf
}

// commit takes into the run the datagram appended to space's buffer (b is
// that buffer extended by it).
func (u *burst) commit(b []byte) {
	size := len(b) - len(*u.buf)
	*u.buf = b
	u.n++
	if size < u.seg {
		u.short = true
	}
}

// flush sends the run queued.
func (u *burst) flush() {
	if u.n == 0 {
		return
	}
	w, b := u.w, *u.buf
	if u.n == 1 || !w.writeGSO(b, u.seg, u.to) {
		for off := 0; off < len(b); off += u.seg {
			w.write(b[off:min(off+u.seg, len(b))], u.to)
		}
	}
	*u.buf = b[:0]
	u.n, u.short = 0, false
}

// done flushes and returns the burst's buffer.
func (u *burst) done() {
	u.flush()
	if u.buf != nil {
		burstBufs.Put(u.buf)
		u.buf = nil
	}
}

// writeGSO sends b as datagrams of seg bytes in one sendmsg. It reports
// false if the kernel refused (GSO is then off for the port).
func (w *wire) writeGSO(b []byte, seg int, to netip.AddrPort) bool {
	if w.closed.Load() {
		return true
	}
	// One control message: SOL_UDP / UDP_SEGMENT, a 16-bit size.
	var words [4]uint64 // aligned for the header
	oob := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&words[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(seg))
	wireRelease()
	if _, _, err := w.conn.WriteMsgUDPAddrPort(b, oob, to); err != nil {
		w.gso.Store(false)
		w.dev.log.Info("roce: UDP GSO refused, sending datagrams one by one", "err", err)
		return false
	}
	k := uint64((len(b) + seg - 1) / seg)
	w.dev.ctr.txPackets.Add(k)
	w.dev.ctr.txBytes.Add(uint64(len(b)))
	if w.pcap != nil {
		for off := 0; off < len(b); off += seg {
			w.capture(w.local, to, b[off:min(off+seg, len(b))])
		}
	}
	return true
}

// enableGRO asks the kernel for coalesced receives; it reports whether
// it agreed.
func (w *wire) enableGRO() bool {
	rc, err := w.conn.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) }); err != nil {
		return false
	}
	return serr == nil
}

// groSize returns the segment size a receive's control messages carry, or
// 0 for a single datagram.
func groSize(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_UDP && m.Header.Type == unix.UDP_GRO && len(m.Data) >= 4 {
			return int(binary.NativeEndian.Uint32(m.Data))
		}
	}
	return 0
}
