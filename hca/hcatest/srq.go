package hcatest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/hca/verbs"
)

var srqScenarios = []scenario{
	{"Shared", srqShared},
	{"WriteWithImm", srqWriteWithImm},
	{"Limit", srqLimit},
	{"LastWQEReached", srqLastWQE},
	{"RNRUntilPosted", srqRNR},
	{"BadUse", srqBadUse},
}

// newSRQ creates an SRQ in n's PD.
func (n *node) newSRQ(a verbs.SRQInitAttr) *verbs.SRQ {
	n.t.Helper()
	s, err := n.pd.CreateSRQ(&a)
	if err != nil {
		n.t.Fatalf("create srq %+v: %v", a, err)
	}
	return s
}

// srqRecv posts receive WRs to an SRQ and fails the test unless all are
// posted.
func srqRecv(t testing.TB, s *verbs.SRQ, wrs ...verbs.RecvWR) {
	t.Helper()
	if n, err := s.PostRecv(wrs); err != nil || n != len(wrs) {
		t.Fatalf("post srq recv: %d of %d posted: %v", n, len(wrs), err)
	}
}

// srqEndpoints creates n QPs on b that share srq and one receive CQ, each
// connected to a QP of its own on a.
func srqEndpoints(t testing.TB, a, b *node, srq *verbs.SRQ, n int) (as, bs []*ep) {
	t.Helper()
	rcq := b.cq(256, nil)
	for range n {
		ea := a.ep(nil)
		eb := b.ep(&epOpts{srq: srq, rcq: rcq})
		connect(t, ea, eb, nil, nil)
		as, bs = append(as, ea), append(bs, eb)
	}
	return as, bs
}

// srqShared: four QPs take their receives from one SRQ. Each message lands
// in a WR of its own, every WR completes exactly once on the QP that took
// it, and WRs reposted as they complete are used again (more messages than
// the SRQ holds).
func srqShared(t *testing.T, s *suite) {
	a, b := s.pair(t)
	srq := b.newSRQ(verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 2})
	as, bs := srqEndpoints(t, a, b, srq, 4)
	const slot = 1024
	for i := range 8 {
		srqRecv(t, srq, rwr(uint64(i), b.mr.SGE(i*slot, slot)))
	}
	inUse := map[uint64]bool{}
	for i := range 8 {
		inUse[uint64(i)] = true
	}
	const rounds = 40
	for r := range rounds {
		k := r % len(as)
		msg := pattern(100+r, byte(r))
		copy(a.buf[:len(msg)], msg)
		as[k].post(send(uint64(1000+r), a.mr.SGE(0, len(msg))))
		Check(t, fmt.Sprintf("round %d send", r), Poll1(t, as[k].scq), Want{WRID: uint64(1000 + r), Op: verbs.WCSend, Len: AnyLen})
		wc := Poll1(t, bs[0].rcq)
		Check(t, fmt.Sprintf("round %d recv", r), wc, Want{WRID: wc.WRID, Op: verbs.WCRecv, Len: len(msg), QPN: bs[k].qp.QPN()})
		if !inUse[wc.WRID] {
			t.Fatalf("round %d: WR %d completed but is not posted", r, wc.WRID)
		}
		off := int(wc.WRID) * slot
		sameBytes(t, fmt.Sprintf("round %d data", r), b.buf[off:off+len(msg)], msg)
		srqRecv(t, srq, rwr(wc.WRID, b.mr.SGE(off, slot)))
	}
	Quiet(t, bs[0].rcq, quiet, "the shared receive CQ")
}

// srqWriteWithImm: a WRITE with immediate takes an SRQ WR, as a SEND does;
// a plain WRITE takes none.
func srqWriteWithImm(t *testing.T, s *suite) {
	a, b := s.pair(t)
	srq := b.newSRQ(verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	as, bs := srqEndpoints(t, a, b, srq, 1)
	srqRecv(t, srq, rwr(7, b.mr.SGE(0, 64)))
	fill(a.buf[:128], 5)
	as[0].post(write(1, a.mr.SGE(0, 128), b.mr.Addr+4096, b.mr.RKey))
	Check(t, "write", Poll1(t, as[0].scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Quiet(t, bs[0].rcq, quiet, "receive CQ after a plain WRITE")
	as[0].post(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 0xABCD,
		SG: []verbs.SGE{a.mr.SGE(0, 128)}, RemoteAddr: b.mr.Addr + 8192, RKey: b.mr.RKey})
	Check(t, "write with imm", Poll1(t, as[0].scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Check(t, "its receive", Poll1(t, bs[0].rcq), Want{WRID: 7, Op: verbs.WCRecvRDMAWithImm, Len: 128, Imm: 0xABCD, WithImm: true, QPN: bs[0].qp.QPN()})
	sameBytes(t, "written", b.buf[8192:8192+128], a.buf[:128])
}

// srqLimit: an armed limit raises one SRQ limit event when fewer WRs than
// it are left, and is disarmed then.
func srqLimit(t *testing.T, s *suite) {
	a, b := s.pair(t)
	srq := b.newSRQ(verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	as, bs := srqEndpoints(t, a, b, srq, 1)
	for i := range 8 {
		srqRecv(t, srq, rwr(uint64(i), b.mr.SGE(i*64, 64)))
	}
	if err := srq.Modify(4); err != nil {
		t.Fatalf("arm the limit: %v", err)
	}
	if l, err := srq.Limit(); err != nil || l != 4 {
		t.Fatalf("query: limit %d, %v; want 4", l, err)
	}
	sendOne := func(i int) {
		as[0].post(send(uint64(100+i), a.mr.SGE(0, 8)))
		Poll1(t, as[0].scq)
		Poll1(t, bs[0].rcq)
	}
	for i := range 4 { // 4 left: not below the limit
		sendOne(i)
	}
	quietEvents(t, b.ctx, ifc.EventSRQLimit, quiet)
	sendOne(4) // 3 left
	waitEvent(t, b.ctx, ifc.EventSRQLimit, srq.SRQN())
	if l, err := srq.Limit(); err != nil || l != 0 {
		t.Errorf("query after the event: limit %d, %v; want 0 (disarmed)", l, err)
	}
	sendOne(5)
	quietEvents(t, b.ctx, ifc.EventSRQLimit, quiet)
	if err := srq.Modify(srq.MaxWR() + 1); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a limit above the SRQ's size: %v, want ErrInvalid", err)
	}
}

// srqLastWQE: a QP on an SRQ that goes to ERR raises the last-WQE-reached
// event; the SRQ's WRs are not flushed: another QP still uses them.
func srqLastWQE(t *testing.T, s *suite) {
	a, b := s.pair(t)
	srq := b.newSRQ(verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	as, bs := srqEndpoints(t, a, b, srq, 2)
	srqRecv(t, srq, rwr(1, b.mr.SGE(0, 64)), rwr(2, b.mr.SGE(64, 64)))
	if err := bs[0].qp.Modify(&verbs.QPAttr{State: verbs.StateErr}); err != nil {
		t.Fatalf("modify to ERR: %v", err)
	}
	waitEvent(t, b.ctx, ifc.EventLastWQE, bs[0].qp.QPN())
	Quiet(t, bs[0].rcq, quiet, "the shared receive CQ (nothing flushed)")
	as[1].post(send(3, a.mr.SGE(0, 8)))
	Check(t, "send to the other QP", Poll1(t, as[1].scq), Want{WRID: 3, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "its receive, from the SRQ", Poll1(t, bs[1].rcq), Want{WRID: 1, Op: verbs.WCRecv, Len: 8, QPN: bs[1].qp.QPN()})
}

// srqRNR: a SEND to a QP whose SRQ is empty is answered RNR and retried
// until a WR is posted.
func srqRNR(t *testing.T, s *suite) {
	a, b := s.pair(t)
	srq := b.newSRQ(verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	as, bs := srqEndpoints(t, a, b, srq, 1)
	copy(a.buf, "late")
	as[0].post(send(1, a.mr.SGE(0, 4)))
	Quiet(t, as[0].scq, quiet, "the sender while the SRQ is empty")
	srqRecv(t, srq, rwr(2, b.mr.SGE(0, 64)))
	Check(t, "send", Poll1(t, as[0].scq), Want{WRID: 1, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "recv", Poll1(t, bs[0].rcq), Want{WRID: 2, Op: verbs.WCRecv, Len: 4})
	sameBytes(t, "data", b.buf[:4], []byte("late"))
}

// srqBadUse: a QP on an SRQ has no receive queue of its own; an SRQ holds
// what it was created for and no more; it cannot be destroyed while a QP
// uses it.
func srqBadUse(t *testing.T, s *suite) {
	a, b := s.pair(t)
	srq := b.newSRQ(verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	_, bs := srqEndpoints(t, a, b, srq, 1)
	if n, err := bs[0].qp.PostRecv([]verbs.RecvWR{rwr(1, b.mr.SGE(0, 8))}); n != 0 || !errors.Is(err, verbs.ErrRingFull) {
		t.Errorf("post recv to a QP on an SRQ: %d posted, %v; want 0, ErrRingFull", n, err)
	}
	wrs := make([]verbs.RecvWR, srq.MaxWR()+1)
	for i := range wrs {
		wrs[i] = rwr(uint64(i), b.mr.SGE(0, 8))
	}
	if n, err := srq.PostRecv(wrs); n != srq.MaxWR() || !errors.Is(err, verbs.ErrRingFull) {
		t.Errorf("post %d WRs to an SRQ of %d: %d posted, %v; want ErrRingFull", len(wrs), srq.MaxWR(), n, err)
	}
	if n, err := srq.PostRecv([]verbs.RecvWR{rwr(9, b.mr.SGE(0, 8), b.mr.SGE(8, 8), b.mr.SGE(16, 8))}); n != 0 || !errors.Is(err, verbs.ErrTooManySGE) {
		t.Errorf("post a WR of 3 SGEs to an SRQ of 1: %d, %v", n, err)
	}
	var ce *ifc.CmdError
	if err := srq.Destroy(); !errors.As(err, &ce) || ce.Status != ifc.StatusResBusy {
		t.Errorf("destroy an SRQ a QP uses: %v, want RESOURCE_BUSY", err)
	}
	if err := bs[0].qp.Destroy(); err != nil {
		t.Fatalf("destroy qp: %v", err)
	}
	if err := srq.Destroy(); err != nil {
		t.Errorf("destroy the SRQ once unused: %v", err)
	}
}
