package hcatest

import (
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"testing"
	"time"

	"github.com/hcasim/hcasim/hca/verbs"
)

var cqScenarios = []scenario{
	{"Overflow", cqOverflow},
	{"OverflowEventsOnce", cqOverflowEventsOnce},
	{"ArmOncePerArming", cqArmOnce},
	{"ArmSolicitedOnly", cqArmSolicited},
	{"SharedCQ", cqShared},
	{"Resize", cqResize},
}

// cqResize: a CQ grown and shrunk keeps the completions it holds, in
// order, and takes more than its old size after growing; a size that
// cannot hold what is unpolled is refused and the CQ keeps working.
func cqResize(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea := a.ep(&epOpts{cqDepth: 8})
	eb := b.ep(nil)
	connect(t, ea, eb, nil, nil)
	sendN := func(from, n int) {
		t.Helper()
		for i := range n {
			ea.post(write(uint64(from+i), a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey))
		}
	}
	want := func(what string, from, n int) {
		t.Helper()
		for i, wc := range Poll(t, ea.scq, n) {
			Check(t, fmt.Sprintf("%s %d", what, i), wc, Want{WRID: uint64(from + i), Op: verbs.WCRDMAWrite, Len: AnyLen})
		}
	}
	sendN(0, 5)
	waitOutstanding := func(n int) {
		t.Helper()
		// The writes complete on their own; wait until all are in the CQ
		// by polling nothing and checking after a bounded wait.
		deadline := time.Now().Add(waitFor)
		for ea.scq.Pending() < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	waitOutstanding(5)
	if err := ea.scq.Resize(64); err != nil {
		t.Fatalf("grow the CQ: %v", err)
	}
	if d := ea.scq.Depth(); d < 64 {
		t.Errorf("depth %d after growing to 64", d)
	}
	want("kept across growing", 0, 5)
	sendN(100, 40) // more than the old 8
	want("after growing", 100, 40)
	sendN(200, 3)
	waitOutstanding(3)
	if err := ea.scq.Resize(2); err == nil {
		t.Errorf("shrinking to 2 with 3 completions unpolled succeeded")
	}
	if err := ea.scq.Resize(16); err != nil {
		t.Fatalf("shrink the CQ to 16: %v", err)
	}
	want("kept across shrinking", 200, 3)
	sendN(300, 12)
	want("after shrinking", 300, 12)
	Quiet(t, ea.scq, quiet, "the resized CQ")
}

// cqOverflow: a CQ that is not polled overflows: the CQ error event, the
// QP can no longer complete and is fatal; what was written stays
// readable.
func cqOverflow(t *testing.T, s *suite) {
	a, b := s.pair(t)
	scq := a.cq(2, nil)
	ea, eb := a.ep(&epOpts{scq: scq}), b.ep(nil)
	connect(t, ea, eb, nil, nil)
	for i := range 4 {
		ea.post(write(uint64(i+1), a.mr.SGE(8*i, 8), b.mr.Addr+uint64(8*i), b.mr.RKey))
	}
	waitEvents(t, a.ctx, ifc.Event{Type: ifc.EventCQError, Obj: scq.Handle()}, ifc.Event{Type: ifc.EventQPFatal, Obj: ea.qp.QPN()})
	for i, wc := range Poll(t, scq, 2) {
		Check(t, "completion written before the overflow", wc, Want{WRID: uint64(i + 1), Op: verbs.WCRDMAWrite, Len: AnyLen})
	}
	Quiet(t, scq, quiet, "overflowed CQ")
	// The QP is in error: the peer sees it as gone (nothing more arrives).
	Quiet(t, eb.rcq, 0, "peer receive CQ")
}

// cqOverflowEventsOnce: an overflow raises one CQ error event for the CQ
// and one QP fatal event for the QP, however many completions are lost
// afterwards (the QP's flush included).
func cqOverflowEventsOnce(t *testing.T, s *suite) {
	a, b := s.pair(t)
	scq := a.cq(2, nil)
	ea, eb := a.ep(&epOpts{scq: scq}), b.ep(nil)
	connect(t, ea, eb, nil, nil)
	for i := range 10 {
		ea.post(write(uint64(i+1), a.mr.SGE(8*i, 8), b.mr.Addr+uint64(8*i), b.mr.RKey))
	}
	cqErr := ifc.Event{Type: ifc.EventCQError, Obj: scq.Handle()}
	fatal := ifc.Event{Type: ifc.EventQPFatal, Obj: ea.qp.QPN()}
	waitEvents(t, a.ctx, cqErr, fatal)
	// More work on the QP in error: flushed, and lost with the CQ.
	ea.post(write(20, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey))
	count := map[ifc.Event]int{}
	timer := time.NewTimer(3 * quiet)
	defer timer.Stop()
	for done := false; !done; {
		select {
		case e := <-a.ctx.AsyncEvents():
			count[e]++
		case <-timer.C:
			done = true
		}
	}
	for e, n := range count {
		t.Errorf("%d more %v events for %#x after the first", n, e.Type, e.Obj)
	}
}

// waitEvents waits until every event in want has arrived on ctx's async
// event channel, in any order.
func waitEvents(t testing.TB, ctx *verbs.Context, want ...ifc.Event) {
	t.Helper()
	missing := map[ifc.Event]bool{}
	for _, e := range want {
		missing[e] = true
	}
	var seen []ifc.Event
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	for len(missing) > 0 {
		select {
		case e := <-ctx.AsyncEvents():
			seen = append(seen, e)
			delete(missing, e)
		case <-timer.C:
			t.Fatalf("events missing after %v: %v (seen %v)", waitFor, missing, seen)
		}
	}
}

// notified waits for c on ch.
func notified(t testing.TB, ch *verbs.CompChannel, c *verbs.CQ, what string) {
	t.Helper()
	select {
	case got := <-ch.C:
		if got != c {
			t.Errorf("%s: channel delivered CQ %d, want %d", what, got.Handle(), c.Handle())
		}
	case <-time.After(waitFor):
		t.Fatalf("%s: no notification in %v", what, waitFor)
	}
}

// notNotified fails if ch delivers within d.
func notNotified(t testing.TB, ch *verbs.CompChannel, d time.Duration, what string) {
	t.Helper()
	select {
	case got := <-ch.C:
		t.Errorf("%s: unexpected notification for CQ %d", what, got.Handle())
	case <-time.After(d):
	}
}

// cqArmOnce: an armed CQ is delivered on its channel once, at the next
// completion; unarmed it is not delivered.
func cqArmOnce(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ch := a.ctx.NewCompChannel(8)
	scq := a.cq(64, ch)
	ea, eb := a.ep(&epOpts{scq: scq}), b.ep(nil)
	connect(t, ea, eb, nil, nil)
	wr := func(id uint64) verbs.SendWR { return write(id, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey) }

	ea.post(wr(1))
	Check(t, "unarmed completion", Poll1(t, scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	notNotified(t, ch, quiet, "completion before arming")

	scq.ReqNotify(false)
	notNotified(t, ch, quiet, "armed, no completion yet")
	ea.post(wr(2))
	notified(t, ch, scq, "armed CQ")
	Check(t, "armed completion", Poll1(t, scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})

	// Not re-armed: no notification.
	ea.post(wr(3))
	Check(t, "completion after the notification", Poll1(t, scq), Want{WRID: 3, Op: verbs.WCRDMAWrite, Len: AnyLen})
	notNotified(t, ch, quiet, "completion without re-arming")

	// Re-armed: one notification for several completions.
	scq.ReqNotify(false)
	ea.post(wr(4), wr(5), wr(6))
	notified(t, ch, scq, "re-armed CQ")
	for i, wc := range Poll(t, scq, 3) {
		Check(t, "batch completion", wc, Want{WRID: uint64(4 + i), Op: verbs.WCRDMAWrite, Len: AnyLen})
	}
	notNotified(t, ch, quiet, "second notification for one arming")

	// Many arm/complete cycles.
	for i := range 50 {
		scq.ReqNotify(false)
		id := uint64(100 + i)
		ea.post(wr(id))
		notified(t, ch, scq, "cycle")
		Check(t, "cycle completion", Poll1(t, scq), Want{WRID: id, Op: verbs.WCRDMAWrite, Len: AnyLen})
	}
	notNotified(t, ch, quiet, "after the cycles")
}

// cqArmSolicited: a solicited-only arming fires for a solicited
// completion, or an error, and not for others.
func cqArmSolicited(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ch := b.ctx.NewCompChannel(8)
	rcq := b.cq(64, ch)
	ea, eb := a.ep(nil), b.ep(&epOpts{rcq: rcq})
	connect(t, ea, eb, nil, nil)
	for i := range 4 {
		eb.recv(rwr(uint64(10+i), b.mr.SGE(64*i, 64)))
	}
	rcq.ReqNotify(true)
	ea.post(send(1, a.mr.SGE(0, 8)))
	Check(t, "send", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "unsolicited receive", Poll1(t, rcq), Want{WRID: 10, Op: verbs.WCRecv, Len: 8})
	notNotified(t, ch, quiet, "unsolicited receive with a solicited-only arming")

	ea.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendSolicited, SG: []verbs.SGE{a.mr.SGE(0, 4)}})
	notified(t, ch, rcq, "solicited receive")
	Check(t, "solicited receive", Poll1(t, rcq), Want{WRID: 11, Op: verbs.WCRecv, Len: 4})
	Check(t, "solicited send", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCSend, Len: AnyLen})

	// A solicited WRITE with immediate.
	rcq.ReqNotify(true)
	ea.post(verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled | verbs.SendSolicited, Imm: 3,
		SG: []verbs.SGE{a.mr.SGE(0, 4)}, RemoteAddr: b.mr.Addr + 4096, RKey: b.mr.RKey})
	notified(t, ch, rcq, "solicited write with imm")
	Check(t, "solicited write with imm", Poll1(t, rcq), Want{WRID: 12, Op: verbs.WCRecvRDMAWithImm, Len: 4, Imm: 3, WithImm: true})
	Check(t, "its requester", Poll1(t, ea.scq), Want{WRID: 3, Op: verbs.WCRDMAWrite, Len: AnyLen})

	// An error completion fires a solicited-only arming too.
	rcq.ReqNotify(true)
	ea.post(send(4, a.mr.SGE(0, 100))) // the receive holds 64
	notified(t, ch, rcq, "error completion")
	CheckErr(t, "receive too small", Poll1(t, rcq), 13, verbs.WCLocLenErr, eb.qp.QPN())
	CheckErr(t, "its send", Poll1(t, ea.scq), 4, verbs.WCRemInvReqErr, ea.qp.QPN())
}

// cqShared: several QPs complete to one CQ; every completion names its QP.
func cqShared(t *testing.T, s *suite) {
	a, b := s.pair(t)
	scq := a.cq(256, nil)
	const nqp, per = 4, 20
	var eps []*ep
	for range nqp {
		ea, eb := a.ep(&epOpts{scq: scq}), b.ep(nil)
		connect(t, ea, eb, nil, nil)
		eps = append(eps, ea)
	}
	for i := range per {
		for q, e := range eps {
			// Each QP writes its own bytes: concurrent DMA to the same
			// bytes is legal RDMA but a data race in an in-process model.
			e.post(write(uint64(q<<16|i), a.mr.SGE(0, 8), b.mr.Addr+uint64(8*q), b.mr.RKey))
		}
	}
	next := make([]int, nqp)
	for _, wc := range Poll(t, scq, nqp*per) {
		q := int(wc.WRID >> 16)
		if q >= nqp || wc.QPN != eps[q].qp.QPN() {
			t.Errorf("completion %s on QP %#x", FormatWC(wc), wc.QPN)
			continue
		}
		Check(t, "shared CQ completion", wc, Want{WRID: uint64(q<<16 | next[q]), Op: verbs.WCRDMAWrite, Len: AnyLen, QPN: eps[q].qp.QPN()})
		next[q]++
	}
	Quiet(t, scq, quiet, "shared CQ")
}
