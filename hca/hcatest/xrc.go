package hcatest

import (
	"fmt"
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
)

var xrcScenarios = []scenario{
	{"SendIntoNamedSRQ", xrcSendIntoSRQ},
	{"ManyInitiatorsOneSRQ", xrcManyInitiators},
	{"RDMAInSRQPD", xrcRDMA},
	{"SRQOfAnotherPD", xrcOtherPD},
	{"SRQOfAnotherDomain", xrcOtherDomain},
}

// xrcSide is the receiving node's XRC domain, its CQ and an XRC SRQ.
type xrcSide struct {
	x   *verbs.XRCD
	cq  *verbs.CQ
	srq *verbs.SRQ
}

// newXRC allocates a domain on n with one XRC SRQ in pd completing on a
// new CQ.
func (n *node) newXRC(pd *verbs.PD) *xrcSide {
	n.t.Helper()
	x, err := n.ctx.AllocXRCD()
	if err != nil {
		n.t.Fatalf("alloc xrcd: %v", err)
	}
	s := &xrcSide{x: x, cq: n.cq(256, nil)}
	s.srq = s.newSRQ(n, pd)
	return s
}

// newSRQ creates another XRC SRQ of the domain, in pd, on the side's CQ.
func (s *xrcSide) newSRQ(n *node, pd *verbs.PD) *verbs.SRQ {
	n.t.Helper()
	srq, err := pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 32, MaxSGE: 1, XRCD: s.x, CQ: s.cq})
	if err != nil {
		n.t.Fatalf("create xrc srq: %v", err)
	}
	return srq
}

// xrcLink connects an XRC initiator on a to a new target of side x on b
// and returns the initiator and the target.
func xrcLink(t testing.TB, a, b *node, x *xrcSide) (*ep, *verbs.QP) {
	t.Helper()
	ini := a.ep(&epOpts{typ: verbs.QPTypeXRCSend})
	tgt, err := x.x.CreateTarget()
	if err != nil {
		t.Fatalf("create xrc target: %v", err)
	}
	if err := ini.qp.Connect(tgt.Info(), nil); err != nil {
		t.Fatalf("connect the initiator: %v", err)
	}
	if err := tgt.Connect(ini.qp.Info(), nil); err != nil {
		t.Fatalf("connect the target: %v", err)
	}
	return ini, tgt
}

// xsend is a SEND of an XRC initiator to XRC SRQ srqn.
func xsend(id uint64, srqn uint32, sg ...verbs.SGE) verbs.SendWR {
	wr := send(id, sg...)
	wr.XRCSRQN = srqn
	return wr
}

// xrcSendIntoSRQ: one target serves messages into the two SRQs of its
// domain they name; each completes on the domain's CQ naming the target,
// in the SRQ's WR, with the message's bytes.
func xrcSendIntoSRQ(t *testing.T, s *suite) {
	a, b := s.pair(t)
	x := b.newXRC(b.pd)
	other := x.newSRQ(b, b.pd)
	ini, tgt := xrcLink(t, a, b, x)
	srqRecv(t, x.srq, rwr(10, b.mr.SGE(0, 4096)))
	srqRecv(t, other, rwr(20, b.mr.SGE(8192, 4096)))
	for i, srq := range []*verbs.SRQ{x.srq, other} {
		msg := pattern(1000+i*2000, byte(i+3))
		copy(a.buf, msg)
		ini.post(xsend(uint64(i+1), srq.SRQN(), a.mr.SGE(0, len(msg))))
		Check(t, fmt.Sprintf("send %d", i), Poll1(t, ini.scq), Want{WRID: uint64(i + 1), Op: verbs.WCSend, Len: AnyLen})
		Check(t, fmt.Sprintf("receive %d in SRQ %#x", i, srq.SRQN()), Poll1(t, x.cq),
			Want{WRID: uint64(10 * (i + 1)), Op: verbs.WCRecv, Len: len(msg), QPN: tgt.QPN()})
		sameBytes(t, "received", b.buf[i*8192:i*8192+len(msg)], msg)
	}
}

// xrcManyInitiators: initiators on two targets of one domain share its
// SRQ; every WR completes once, on the target its message came through.
func xrcManyInitiators(t *testing.T, s *suite) {
	a, b := s.pair(t)
	x := b.newXRC(b.pd)
	i1, t1 := xrcLink(t, a, b, x)
	i2, t2 := xrcLink(t, a, b, x)
	for k := range 8 {
		srqRecv(t, x.srq, rwr(uint64(100+k), b.mr.SGE(k*512, 512)))
	}
	seen := map[uint64]bool{}
	for k := range 8 {
		e, tq := i1, t1
		if k%2 == 1 {
			e, tq = i2, t2
		}
		e.post(xsend(uint64(k), x.srq.SRQN(), a.mr.SGE(0, 64)))
		Check(t, fmt.Sprintf("send %d", k), Poll1(t, e.scq), Want{WRID: uint64(k), Op: verbs.WCSend, Len: AnyLen})
		wc := Poll1(t, x.cq)
		Check(t, fmt.Sprintf("receive %d", k), wc, Want{WRID: wc.WRID, Op: verbs.WCRecv, Len: 64, QPN: tq.QPN()})
		if seen[wc.WRID] || wc.WRID < 100 || wc.WRID >= 108 {
			t.Fatalf("receive %d: WR %d completed twice or was never posted", k, wc.WRID)
		}
		seen[wc.WRID] = true
	}
}

// xrcRDMA: WRITE and READ through a target are checked against the PD of
// the SRQ they name.
func xrcRDMA(t *testing.T, s *suite) {
	a, b := s.pair(t)
	x := b.newXRC(b.pd)
	ini, _ := xrcLink(t, a, b, x)
	fill(a.buf[:512], 5)
	w := write(1, a.mr.SGE(0, 512), b.mr.Addr+4096, b.mr.RKey)
	w.XRCSRQN = x.srq.SRQN()
	ini.post(w)
	Check(t, "write through the target", Poll1(t, ini.scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	sameBytes(t, "written", b.buf[4096:4608], a.buf[:512])
	fill(b.buf[16384:16640], 9)
	r := read(2, a.mr.SGE(1024, 256), b.mr.Addr+16384, b.mr.RKey)
	r.XRCSRQN = x.srq.SRQN()
	ini.post(r)
	Check(t, "read through the target", Poll1(t, ini.scq), Want{WRID: 2, Op: verbs.WCRDMARead, Len: 256})
	sameBytes(t, "read", a.buf[1024:1280], b.buf[16384:16640])
}

// xrcOtherPD: a WRITE naming an SRQ of another PD than the key's is a
// remote access error.
func xrcOtherPD(t *testing.T, s *suite) {
	a, b := s.pair(t)
	x := b.newXRC(b.newPD())
	ini, _ := xrcLink(t, a, b, x)
	w := write(1, a.mr.SGE(0, 64), b.mr.Addr, b.mr.RKey)
	w.XRCSRQN = x.srq.SRQN()
	ini.post(w)
	CheckErr(t, "write to a key outside the named SRQ's PD", Poll1(t, ini.scq), 1, verbs.WCRemAccessErr, ini.qp.QPN())
}

// xrcOtherDomain: a SEND naming an SRQ of another domain than the
// target's is an invalid request.
func xrcOtherDomain(t *testing.T, s *suite) {
	a, b := s.pair(t)
	x, y := b.newXRC(b.pd), b.newXRC(b.pd)
	srqRecv(t, y.srq, rwr(1, b.mr.SGE(0, 64)))
	ini, _ := xrcLink(t, a, b, x)
	ini.post(xsend(2, y.srq.SRQN(), a.mr.SGE(0, 16)))
	CheckErr(t, "send into another domain's SRQ", Poll1(t, ini.scq), 2, verbs.WCRemInvReqErr, ini.qp.QPN())
	Quiet(t, y.cq, quiet, "the other domain's CQ")
}
