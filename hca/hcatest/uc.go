package hcatest

import (
	"fmt"
	"testing"
	"time"

	"github.com/hcasim/hcasim/hca/verbs"
)

var ucScenarios = []scenario{
	{"SendAndWrite", ucSendAndWrite},
	{"NoReceiveDropped", ucNoReceive},
	{"BadRKeyDropped", ucBadRKey},
	{"TooLongDropped", ucTooLong},
	{"NoReadOrAtomic", ucNoRead},
	{"PeerGone", ucPeerGone},
}

// ucLink creates a connected UC endpoint pair between a and b.
func ucLink(t testing.TB, a, b *node) (*ep, *ep) {
	t.Helper()
	ea, eb := a.ep(&epOpts{typ: verbs.QPTypeUC}), b.ep(&epOpts{typ: verbs.QPTypeUC})
	connect(t, ea, eb, nil, nil)
	return ea, eb
}

// ucSync waits until what a sent before has reached b: a UC send
// completes once it is on its way, so a SEND behind it (UC keeps order)
// that b receives says the rest arrived, or was dropped.
func ucSync(t testing.TB, a, b *ep) {
	t.Helper()
	b.recv(rwr(0xFE, b.n.mr.SGE(bufSize-64, 64)))
	a.post(send(0xFE, a.n.mr.SGE(bufSize-64, 8)))
	Check(t, "sync send", Poll1(t, a.scq), Want{WRID: 0xFE, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "sync receive", Poll1(t, b.rcq), Want{WRID: 0xFE, Op: verbs.WCRecv, Len: 8, QPN: b.qp.QPN()})
}

// ucSendAndWrite: a UC pair carries SENDs (one packet and several), SEND
// with immediate, WRITEs and WRITE with immediate, in order, as RC does.
func ucSendAndWrite(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := ucLink(t, a, b)
	if ea.qp.Type() != verbs.QPTypeUC {
		t.Fatalf("QP type %v, want UC", ea.qp.Type())
	}
	for i, n := range []int{1, 64, 4096, 10000} {
		msg := pattern(n, byte(i+1))
		copy(a.buf, msg)
		eb.recv(rwr(uint64(i), b.mr.SGE(0, 16384)))
		wr := send(uint64(100+i), a.mr.SGE(0, n))
		op := verbs.WCRecv
		if i%2 == 1 {
			wr.Opcode, wr.Imm = verbs.WRSendWithImm, 0xC0DE0000+uint32(i)
		}
		ea.post(wr)
		Check(t, fmt.Sprintf("send %d B", n), Poll1(t, ea.scq), Want{WRID: uint64(100 + i), Op: verbs.WCSend, Len: AnyLen})
		w := Want{WRID: uint64(i), Op: op, Len: n, QPN: eb.qp.QPN()}
		if i%2 == 1 {
			w.Imm, w.WithImm = wr.Imm, true
		}
		Check(t, fmt.Sprintf("receive %d B", n), Poll1(t, eb.rcq), w)
		sameBytes(t, fmt.Sprintf("%d B sent", n), b.buf[:n], msg)
	}
	fill(a.buf[:9000], 7)
	ea.post(write(1, a.mr.SGE(0, 9000), b.mr.Addr+20000, b.mr.RKey))
	Check(t, "write", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	ucSync(t, ea, eb)
	sameBytes(t, "written", b.buf[20000:29000], a.buf[:9000])
	eb.recv(rwr(9, b.mr.SGE(0, 64)))
	ea.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 0xFEED,
		SG: []verbs.SGE{a.mr.SGE(0, 300)}, RemoteAddr: b.mr.Addr + 40000, RKey: b.mr.RKey})
	Check(t, "write with imm", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Check(t, "its receive", Poll1(t, eb.rcq), Want{WRID: 9, Op: verbs.WCRecvRDMAWithImm, Len: 300, Imm: 0xFEED, WithImm: true, QPN: eb.qp.QPN()})
	sameBytes(t, "written with imm", b.buf[40000:40300], a.buf[:300])
}

// ucNoReceive: a SEND that finds no receive WQE is dropped silently: the
// sender completes with success (UC has no RNR NAK), the receiver sees
// nothing and stays ready, and the next SEND lands in the WQE posted next.
func ucNoReceive(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := ucLink(t, a, b)
	fill(a.buf[:128], 1)
	ea.post(send(1, a.mr.SGE(0, 128)))
	Check(t, "send into no receive", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCSend, Len: AnyLen})
	Quiet(t, eb.rcq, quiet, "receive CQ after the dropped SEND")
	eb.recv(rwr(5, b.mr.SGE(0, 256)))
	fill(a.buf[:128], 2)
	ea.post(send(2, a.mr.SGE(0, 128)))
	Check(t, "next send", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "its receive", Poll1(t, eb.rcq), Want{WRID: 5, Op: verbs.WCRecv, Len: 128, QPN: eb.qp.QPN()})
	sameBytes(t, "the second SEND's data", b.buf[:128], a.buf[:128])
}

// ucBadRKey: a WRITE through a bad R_Key completes at the sender and
// writes nothing; the QPs stay usable.
func ucBadRKey(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := ucLink(t, a, b)
	fill(b.buf[:256], 0xEE)
	before := pattern(256, 0xEE)
	fill(a.buf[:256], 3)
	ea.post(write(1, a.mr.SGE(0, 256), b.mr.Addr, b.mr.RKey^0x80))
	Check(t, "write with a bad rkey", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	ucSync(t, ea, eb)
	sameBytes(t, "memory behind a bad rkey", b.buf[:256], before)
	ea.post(write(2, a.mr.SGE(0, 256), b.mr.Addr, b.mr.RKey))
	Check(t, "write with the rkey", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	ucSync(t, ea, eb)
	sameBytes(t, "written", b.buf[:256], a.buf[:256])
	Quiet(t, eb.rcq, quiet, "receive CQ")
}

// ucTooLong: a SEND longer than the receive WQE is dropped and the WQE
// kept: the next SEND that fits completes it.
func ucTooLong(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := ucLink(t, a, b)
	eb.recv(rwr(7, b.mr.SGE(0, 100)))
	ea.post(send(1, a.mr.SGE(0, 200)))
	Check(t, "send too long", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCSend, Len: AnyLen})
	Quiet(t, eb.rcq, quiet, "receive CQ after the SEND too long")
	fill(a.buf[:50], 9)
	ea.post(send(2, a.mr.SGE(0, 50)))
	Check(t, "send that fits", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "the kept receive", Poll1(t, eb.rcq), Want{WRID: 7, Op: verbs.WCRecv, Len: 50, QPN: eb.qp.QPN()})
}

// ucNoRead: UC has no RDMA READ: the WR completes with a local QP
// operation error and the QP goes to ERR, flushing what follows.
func ucNoRead(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := ucLink(t, a, b)
	ea.post(read(1, a.mr.SGE(0, 64), b.mr.Addr, b.mr.RKey), send(2, a.mr.SGE(0, 8)))
	wcs := Poll(t, ea.scq, 2)
	CheckErr(t, "read on UC", wcs[0], 1, verbs.WCLocQPOpErr, ea.qp.QPN())
	CheckErr(t, "send after it", wcs[1], 2, verbs.WCWRFlushErr, ea.qp.QPN())
}

// ucPeerGone: SENDs to a UC peer that was destroyed still complete (they
// went, and were lost), within the requester's bounded wait.
func ucPeerGone(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := ucLink(t, a, b)
	if err := eb.qp.Destroy(); err != nil {
		t.Fatalf("destroy the peer: %v", err)
	}
	for i := range 4 {
		ea.post(send(uint64(i), a.mr.SGE(0, 64)))
	}
	start := time.Now()
	for i, wc := range PollWithin(t, ea.scq, 4, 3*time.Second) {
		Check(t, fmt.Sprintf("send %d to no peer", i), wc, Want{WRID: uint64(i), Op: verbs.WCSend, Len: AnyLen})
	}
	t.Logf("4 sends to a destroyed peer completed in %v", time.Since(start).Round(time.Millisecond))
}
