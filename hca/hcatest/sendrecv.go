package hcatest

import (
	"fmt"
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
)

var sendRecvScenarios = []scenario{
	{"PingPong", pingPong},
	{"GatherScatter", gatherScatter},
	{"ZeroLength", zeroLengthSend},
	{"WithImm", sendWithImm},
	{"WithInvalidate", sendWithInvalidate},
	{"WithInvalidateNotAllowed", sendWithInvalidateNotAllowed},
}

// pingPong bounces messages of varying sizes between the two sides.
func pingPong(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	const rounds = 200
	for i := range rounds {
		size := 1 + (i*97)%4000
		for _, dir := range []struct {
			from, to *ep
			name     string
		}{{ea, eb, "ping"}, {eb, ea, "pong"}} {
			from, to := dir.from, dir.to
			msg := pattern(size, byte(i))
			copy(from.n.buf[:size], msg)
			rid := uint64(i)<<8 | 0x11
			sid := uint64(i)<<8 | 0x22
			// Receive at an offset that changes, so stale data cannot pass.
			roff := 8192 + (i%7)*512
			clear(to.n.buf[roff : roff+size])
			to.recv(rwr(rid, to.n.mr.SGE(roff, 8192)))
			from.post(send(sid, from.n.mr.SGE(0, size)))
			Check(t, fmt.Sprintf("round %d %s send", i, dir.name), Poll1(t, from.scq), Want{WRID: sid, Op: verbs.WCSend, Len: AnyLen, QPN: from.qp.QPN()})
			Check(t, fmt.Sprintf("round %d %s recv", i, dir.name), Poll1(t, to.rcq), Want{WRID: rid, Op: verbs.WCRecv, Len: size, QPN: to.qp.QPN()})
			sameBytes(t, fmt.Sprintf("round %d %s data", i, dir.name), to.n.buf[roff:roff+size], msg)
			if t.Failed() {
				return
			}
		}
	}
	Quiet(t, ea.scq, 0, "a send CQ")
	Quiet(t, eb.rcq, 0, "b recv CQ")
}

// gatherScatter sends three gathered pieces into a receive of two
// scattered pieces.
func gatherScatter(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	fill(a.buf[:16384], 3)
	clear(b.buf)
	// Gather 100 + 3000 + 900 bytes from three places.
	sg := []verbs.SGE{a.mr.SGE(10, 100), a.mr.SGE(5000, 3000), a.mr.SGE(200, 900)}
	var msg []byte
	msg = append(msg, a.buf[10:110]...)
	msg = append(msg, a.buf[5000:8000]...)
	msg = append(msg, a.buf[200:1100]...)
	// Scatter into 1000 bytes at 100 and 5000 bytes at 20000.
	eb.recv(rwr(7, b.mr.SGE(100, 1000), b.mr.SGE(20000, 5000)))
	ea.post(send(8, sg...))
	Check(t, "send", Poll1(t, ea.scq), Want{WRID: 8, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "recv", Poll1(t, eb.rcq), Want{WRID: 7, Op: verbs.WCRecv, Len: len(msg)})
	sameBytes(t, "first scatter entry", b.buf[100:1100], msg[:1000])
	sameBytes(t, "second scatter entry", b.buf[20000:20000+len(msg)-1000], msg[1000:])
	sameBytes(t, "after the message", b.buf[20000+len(msg)-1000:20000+5000], make([]byte, 5000-(len(msg)-1000)))
	sameBytes(t, "before the first entry", b.buf[:100], make([]byte, 100))
}

// zeroLengthSend sends a message without data.
func zeroLengthSend(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	eb.recv(rwr(1, b.mr.SGE(0, 64)))
	ea.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
	Check(t, "send", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "recv", Poll1(t, eb.rcq), Want{WRID: 1, Op: verbs.WCRecv, Len: 0})
	// A zero-length message into a receive with no scatter entries.
	eb.recv(rwr(3))
	ea.post(verbs.SendWR{WRID: 4, Opcode: verbs.WRSendWithImm, Imm: 0x01020304, Flags: verbs.SendSignaled})
	Check(t, "send with imm", Poll1(t, ea.scq), Want{WRID: 4, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "recv with imm", Poll1(t, eb.rcq), Want{WRID: 3, Op: verbs.WCRecv, Len: 0, Imm: 0x01020304, WithImm: true})
}

// sendWithImm carries 32 bits of immediate data with and without payload.
func sendWithImm(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	copy(a.buf, "immediate payload")
	for i, imm := range []uint32{0xDEADBEEF, 0, 0xFFFFFFFF, 0x00C0FFEE} {
		rid, sid := uint64(100+i), uint64(200+i)
		eb.recv(rwr(rid, b.mr.SGE(4096, 64)))
		ea.post(verbs.SendWR{WRID: sid, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: imm, SG: []verbs.SGE{a.mr.SGE(0, 17)}})
		Check(t, "send with imm", Poll1(t, ea.scq), Want{WRID: sid, Op: verbs.WCSend, Len: AnyLen})
		Check(t, "recv with imm", Poll1(t, eb.rcq), Want{WRID: rid, Op: verbs.WCRecv, Len: 17, Imm: imm, WithImm: true})
		sameBytes(t, "payload", b.buf[4096:4096+17], []byte("immediate payload"))
	}
}

// fastReg fast-registers region (from b's context) under a new key of mr
// on e's QP and returns the key.
func fastReg(t testing.TB, e *ep, mr *verbs.MR, sg []verbs.SGE, acc verbs.Access, wrid uint64) uint32 {
	t.Helper()
	if n, err := mr.MapSG(sg); err != nil || n != len(sg) {
		t.Fatalf("map sg: %d of %d mapped: %v", n, len(sg), err)
	}
	mr.IncKey()
	e.post(verbs.SendWR{WRID: wrid, Opcode: verbs.WRRegMR, Flags: verbs.SendSignaled, MR: mr, Key: mr.RKey, Access: acc})
	Check(t, "REG_MR", Poll1(t, e.scq), Want{WRID: wrid, Op: verbs.WCRegMR, Len: AnyLen})
	return mr.RKey
}

// sendWithInvalidate invalidates a fast-registered key of the receiver:
// before, the key gives access; after, it does not.
func sendWithInvalidate(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	region := b.alloc(2 * 4096)
	// A local-only MR gives the region's IOVA for the scatter list.
	lmr := b.reg(b.pd, region, verbs.AccessLocalWrite)
	fmr, err := b.pd.AllocMR(verbs.MRTypeMemReg, 2)
	if err != nil {
		t.Fatalf("alloc mr: %v", err)
	}
	key := fastReg(t, eb, fmr, []verbs.SGE{lmr.SGE(0, len(region))}, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead, 1)

	fill(a.buf[:256], 9)
	ea.post(write(2, a.mr.SGE(0, 256), fmr.Addr+4000, key))
	Check(t, "write through the fast-registered key", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	sameBytes(t, "written data (crosses a page)", region[4000:4256], a.buf[:256])

	copy(a.buf[1024:], "bye")
	eb.recv(rwr(3, b.mr.SGE(0, 64)))
	ea.post(verbs.SendWR{WRID: 4, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, InvalidateRKey: key, SG: []verbs.SGE{a.mr.SGE(1024, 3)}})
	Check(t, "send with invalidate", Poll1(t, ea.scq), Want{WRID: 4, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "recv with invalidate", Poll1(t, eb.rcq), Want{WRID: 3, Op: verbs.WCRecv, Len: 3, Imm: key, WithInv: true})
	sameBytes(t, "send payload", b.buf[:3], []byte("bye"))

	// The key no longer works, for writes and reads.
	for i, wr := range []verbs.SendWR{
		write(5, a.mr.SGE(0, 16), fmr.Addr, key),
		read(6, a.mr.SGE(0, 16), fmr.Addr, key),
	} {
		xa, xb := link(t, a, b)
		xa.post(wr)
		CheckErr(t, fmt.Sprintf("access %d through the invalidated key", i), Poll1(t, xa.scq), wr.WRID, verbs.WCRemAccessErr, xa.qp.QPN())
		brokenResponder(t, xb, b.mr.SGE(0, 64))
	}
	// Re-registered under a new key, the MR works again.
	key2 := fastReg(t, eb, fmr, []verbs.SGE{lmr.SGE(0, len(region))}, verbs.AccessLocalWrite|verbs.AccessRemoteWrite, 7)
	if key2 == key {
		t.Fatalf("IncKey kept the key %#x", key)
	}
	xa, _ := link(t, a, b)
	xa.post(write(8, a.mr.SGE(0, 16), fmr.Addr, key2))
	Check(t, "write through the re-registered key", Poll1(t, xa.scq), Want{WRID: 8, Op: verbs.WCRDMAWrite, Len: AnyLen})
}

// sendWithInvalidateNotAllowed names a key that cannot be remotely
// invalidated (an MR registered with RegMR, not enabled for remote
// invalidation): the receive fails and the key keeps working.
func sendWithInvalidateNotAllowed(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	eb.recv(rwr(1, b.mr.SGE(0, 64)))
	ea.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, InvalidateRKey: b.mr.RKey, SG: []verbs.SGE{a.mr.SGE(0, 8)}})
	if wc := Poll1(t, ea.scq); wc.Status == verbs.WCSuccess || wc.WRID != 2 {
		t.Errorf("send with invalidate of a key not enabled for it: %s, want an error", FormatWC(wc))
	}
	if wc := Poll1(t, eb.rcq); wc.Status == verbs.WCSuccess || wc.WRID != 1 {
		t.Errorf("its receive: %s, want an error", FormatWC(wc))
	}
	// The key survived.
	xa, _ := link(t, a, b)
	xa.post(write(3, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey))
	Check(t, "write through the key afterwards", Poll1(t, xa.scq), Want{WRID: 3, Op: verbs.WCRDMAWrite, Len: AnyLen})
}
