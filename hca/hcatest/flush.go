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
	got := poll(t, ea.scq, len(exp)+n-k)
	for i, id := range exp {
		op, l := verbs.WCRDMAWrite, anyLen
		if (id-1000)%3 == 2 {
			op, l = verbs.WCRDMARead, 8
		}
		check(t, fmt.Sprintf("completion %d", i), got[i], want{wrid: id, op: op, len: l, qpn: ea.qp.QPN()})
	}
	got = got[len(exp):]
	checkErr(t, "the failing WR", got[0], uint64(1000+k), st, ea.qp.QPN())
	for i := k + 1; i < n; i++ {
		checkErr(t, fmt.Sprintf("WR %d after the error", i), got[i-k], uint64(1000+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	// Posted after the error: flushed, in order, signaled or not.
	ea.post(write(2000, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey),
		verbs.SendWR{WRID: 2001, Opcode: verbs.WRSend, SG: []verbs.SGE{a.mr.SGE(0, 8)}},
		read(2002, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey))
	for i, wc := range poll(t, ea.scq, 3) {
		checkErr(t, "posted after the error", wc, uint64(2000+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	quietCQ(t, ea.scq, quiet, "requester send CQ")
	if remote {
		brokenResponder(t, eb, b.mr.SGE(0, 8))
	} else {
		quietCQ(t, eb.rcq, 0, "responder receive CQ")
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
	check(t, "receive before the error", poll1(t, ea.rcq), want{wrid: 1, op: verbs.WCRecv, len: 10})
	check(t, "its send", poll1(t, eb.scq), want{wrid: 2, op: verbs.WCSend, len: anyLen})
	for i := range 10 {
		ea.recv(rwr(uint64(100+i), a.mr.SGE(64*i, 64)))
	}
	// A remote access error puts a's QP in error.
	ea.post(write(3, a.mr.SGE(0, 8), b.mr.Addr, 0x00DEAD00))
	checkErr(t, "failing write", poll1(t, ea.scq), 3, verbs.WCRemAccessErr, ea.qp.QPN())
	for i, wc := range poll(t, ea.rcq, 10) {
		checkErr(t, "receive posted before the error", wc, uint64(100+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	for i := range 5 {
		ea.recv(rwr(uint64(200+i), a.mr.SGE(64*i, 64)))
	}
	for i, wc := range poll(t, ea.rcq, 5) {
		checkErr(t, "receive posted after the error", wc, uint64(200+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	quietCQ(t, ea.rcq, quiet, "receive CQ")
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
	for i, wc := range poll(t, ea.rcq, 2) {
		checkErr(t, "receive", wc, uint64(1+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	ea.post(send(3, a.mr.SGE(0, 8)), verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWrite, SG: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
	for i, wc := range poll(t, ea.scq, 2) {
		checkErr(t, "send WR", wc, uint64(3+i), verbs.WCWRFlushErr, ea.qp.QPN())
	}
	quietCQ(t, ea.scq, quiet, "send CQ")
	quietCQ(t, ea.rcq, 0, "receive CQ")
}
