package hcatest

import (
	"fmt"
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
)

var flushScenarios = []scenario{
	{"LocalErrorMidBatch", func(t *testing.T, s *suite) { flushAfterError(t, s, false) }},
	{"RemoteErrorMidBatch", func(t *testing.T, s *suite) { flushAfterError(t, s, true) }},
	{"ReceivesOfQPInError", flushReceives},
	{"ModifyToError", flushModifyToError},
}

// flushAfterError posts n WRs of which WR k fails (a bad lkey, or a bad
// rkey): the signaled WRs before k complete successfully, WR k with its
// error (although unsignaled), every later WR, signaled or not, with
// WR_FLUSH_ERR, in order; WRs posted afterwards are flushed too. No
// completion is missing or duplicated.
func flushAfterError(t *testing.T, s *suite, remote bool) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	const n, k = 24, 9 // k is odd: unsignaled
	var wrs []verbs.SendWR
	for i := range n {
		wr := write(uint64(1000+i), a.mr.SGE(8*i, 8), b.mr.Addr+uint64(8*i), b.mr.RKey)
		if i%2 == 1 {
			wr.Flags = 0
		}
		if i%3 == 2 {
			wr.Opcode = verbs.WRRDMARead
		}
		wrs = append(wrs, wr)
	}
	st := verbs.WCLocProtErr
	if remote {
		wrs[k].RKey = variant(b.mr.RKey, 1)
		st = verbs.WCRemAccessErr
	} else {
		wrs[k].SG[0].LKey = variant(a.mr.LKey, 1)
	}
	ea.post(wrs...)
	var exp []uint64
	for i := range k {
		if i%2 == 0 {
			exp = append(exp, uint64(1000+i))
		}
	}
	got := Poll(t, ea.scq, len(exp)+n-k)
	for i, id := range exp {
		op, l := verbs.WCRDMAWrite, AnyLen
		if (id-1000)%3 == 2 {
			op, l = verbs.WCRDMARead, 8
		}
		Check(t, fmt.Sprintf("completion %d", i), got[i], Want{WRID: id, Op: op, Len: l, QPN: ea.qp.QPN()})
	}
	got = got[len(exp):]
	CheckErr(t, "the failing WR", got[0], uint64(1000+k), st, ea.qp.QPN())
	for i := k + 1; i < n; i++ {
		CheckErr(t, fmt.Sprintf("WR %d after the error", i), got[i-k], uint64(1000+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	// Posted after the error: flushed, in order, signaled or not.
	ea.post(write(2000, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey),
		verbs.SendWR{WRID: 2001, Opcode: verbs.WRSend, SG: []verbs.SGE{a.mr.SGE(0, 8)}},
		read(2002, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey))
	for i, wc := range Poll(t, ea.scq, 3) {
		CheckErr(t, "posted after the error", wc, uint64(2000+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	Quiet(t, ea.scq, quiet, "requester send CQ")
	if remote {
		brokenResponder(t, eb, b.mr.SGE(0, 8))
	} else {
		Quiet(t, eb.rcq, 0, "responder receive CQ")
	}
}

// flushReceives: receives posted before and after a QP enters the error
// state are flushed in order.
func flushReceives(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	// One receive consumed normally first.
	ea.recv(rwr(1, a.mr.SGE(0, 64)))
	eb.post(send(2, b.mr.SGE(0, 10)))
	Check(t, "receive before the error", Poll1(t, ea.rcq), Want{WRID: 1, Op: verbs.WCRecv, Len: 10})
	Check(t, "its send", Poll1(t, eb.scq), Want{WRID: 2, Op: verbs.WCSend, Len: AnyLen})
	for i := range 10 {
		ea.recv(rwr(uint64(100+i), a.mr.SGE(64*i, 64)))
	}
	// A remote access error puts a's QP in error.
	ea.post(write(3, a.mr.SGE(0, 8), b.mr.Addr, 0x00DEAD00))
	CheckErr(t, "failing write", Poll1(t, ea.scq), 3, verbs.WCRemAccessErr, ea.qp.QPN())
	for i, wc := range Poll(t, ea.rcq, 10) {
		CheckErr(t, "receive posted before the error", wc, uint64(100+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	for i := range 5 {
		ea.recv(rwr(uint64(200+i), a.mr.SGE(64*i, 64)))
	}
	for i, wc := range Poll(t, ea.rcq, 5) {
		CheckErr(t, "receive posted after the error", wc, uint64(200+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	Quiet(t, ea.rcq, quiet, "receive CQ")
}

// flushModifyToError: moving a QP to ERR flushes its posted receives and
// later work.
func flushModifyToError(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	ea.recv(rwr(1, a.mr.SGE(0, 64)), rwr(2, a.mr.SGE(64, 64)))
	if err := ea.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}); err != nil {
		t.Fatalf("modify to ERR: %v", err)
	}
	for i, wc := range Poll(t, ea.rcq, 2) {
		CheckErr(t, "receive", wc, uint64(1+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	ea.post(send(3, a.mr.SGE(0, 8)), verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWrite, SG: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
	for i, wc := range Poll(t, ea.scq, 2) {
		CheckErr(t, "send WR", wc, uint64(3+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	Quiet(t, ea.scq, quiet, "send CQ")
	Quiet(t, ea.rcq, 0, "receive CQ")
}
