package hcatest

import (
	"testing"
	"time"

	"github.com/hcasim/hcasim/hca/verbs"
)

var rnrScenarios = []scenario{
	{"RetryForever", rnrRetryForever},
	{"WriteImmRetryForever", rnrWriteImm},
	{"RetryExceeded", rnrRetryExceeded},
}

var retryScenarios = []scenario{
	{"PeerDestroyed", retryPeerDestroyed},
	{"PeerNeverConnected", retryPeerNeverConnected},
	{"NoSuchQP", retryNoSuchQP},
}

// rnrRetryForever: a SEND with no receive posted waits (RNR NAKs, retried
// forever with RNRRetry 7) and succeeds once a receive is posted.
func rnrRetryForever(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	connect(t, ea, eb, &verbs.ConnectOptions{RNRRetry: 7}, &verbs.ConnectOptions{MinRNRTimer: 8})
	copy(a.buf, "patience")
	ea.post(send(1, a.mr.SGE(0, 8)))
	time.Sleep(20 * time.Millisecond)
	quietCQ(t, ea.scq, quiet, "send CQ while no receive is posted")
	eb.recv(rwr(2, b.mr.SGE(0, 64)))
	check(t, "send", poll1(t, ea.scq), want{wrid: 1, op: verbs.WCSend, len: anyLen})
	check(t, "receive", poll1(t, eb.rcq), want{wrid: 2, op: verbs.WCRecv, len: 8})
	sameBytes(t, "data", b.buf[:8], []byte("patience"))
	// The connection keeps working.
	eb.recv(rwr(3, b.mr.SGE(100, 64)))
	ea.post(send(4, a.mr.SGE(0, 3)))
	check(t, "next send", poll1(t, ea.scq), want{wrid: 4, op: verbs.WCSend, len: anyLen})
	check(t, "next receive", poll1(t, eb.rcq), want{wrid: 3, op: verbs.WCRecv, len: 3})
	quietCQ(t, eb.rcq, quiet, "receive CQ (no duplicate)")
}

// rnrWriteImm: a WRITE with immediate needs a receive too; its data lands
// once one is posted.
func rnrWriteImm(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	connect(t, ea, eb, &verbs.ConnectOptions{RNRRetry: 7}, &verbs.ConnectOptions{MinRNRTimer: 8})
	fill(a.buf[:300], 0x71)
	ea.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 0x55,
		SG: []verbs.SGE{a.mr.SGE(0, 300)}, RemoteAddr: b.mr.Addr + 1000, RKey: b.mr.RKey})
	quietCQ(t, ea.scq, quiet, "send CQ while no receive is posted")
	eb.recv(rwr(2))
	check(t, "write with imm", poll1(t, ea.scq), want{wrid: 1, op: verbs.WCRDMAWrite, len: anyLen})
	check(t, "receive", poll1(t, eb.rcq), want{wrid: 2, op: verbs.WCRecvRDMAWithImm, len: 300, imm: 0x55, withImm: true})
	sameBytes(t, "data", b.buf[1000:1300], a.buf[:300])
}

// rnrRetryExceeded: with a small RNR retry count the SEND fails with
// RNR_RETRY_EXC_ERR; later WRs flush.
func rnrRetryExceeded(t *testing.T, s *suite) {
	a, b := s.pair(t)
	for _, retries := range []uint8{1, 3} {
		ea, eb := a.ep(nil), b.ep(nil)
		connect(t, ea, eb, &verbs.ConnectOptions{RNRRetry: retries}, &verbs.ConnectOptions{MinRNRTimer: 1})
		ea.post(send(1, a.mr.SGE(0, 8)), send(2, a.mr.SGE(0, 8)))
		checkErr(t, "send without a receive", poll1(t, ea.scq), 1, verbs.WCRNRRetryExcErr, ea.qp.QPN())
		checkErr(t, "the send after it", poll1(t, ea.scq), 2, verbs.WCWRFlushErr, ea.qp.QPN())
		quietCQ(t, eb.rcq, 0, "receiver CQ")
		// The receiver was not harmed: a receive posted now stays posted.
		eb.recv(rwr(3, b.mr.SGE(0, 64)))
		quietCQ(t, eb.rcq, quiet, "receiver CQ after posting")
	}
}

// retryPeerDestroyed: the peer QP disappears; the requester's ACK timeout
// expires RetryCnt+1 times and the WR fails with RETRY_EXC_ERR.
func retryPeerDestroyed(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	connect(t, ea, eb, &verbs.ConnectOptions{Timeout: 12, RetryCnt: 2}, nil)
	ea.post(write(1, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey))
	check(t, "write before", poll1(t, ea.scq), want{wrid: 1, op: verbs.WCRDMAWrite, len: anyLen})
	if err := eb.qp.Destroy(); err != nil {
		t.Fatalf("destroy peer: %v", err)
	}
	ea.post(write(2, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey), send(3, a.mr.SGE(0, 8)))
	checkErr(t, "write to a destroyed peer", poll1(t, ea.scq), 2, verbs.WCRetryExcErr, ea.qp.QPN())
	checkErr(t, "the WR after it", poll1(t, ea.scq), 3, verbs.WCWRFlushErr, ea.qp.QPN())
	ea.post(send(4, a.mr.SGE(0, 8)))
	checkErr(t, "posted afterwards", poll1(t, ea.scq), 4, verbs.WCWRFlushErr, ea.qp.QPN())
	quietCQ(t, ea.scq, quiet, "send CQ")
}

// retryPeerNeverConnected: the peer QP exists but stays in RESET (it drops
// requests): RETRY_EXC_ERR.
func retryPeerNeverConnected(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	if err := ea.qp.Connect(eb.qp.Info(), &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}); err != nil {
		t.Fatal(err)
	}
	eb.recv(rwr(9, b.mr.SGE(0, 8)))
	ea.post(send(1, a.mr.SGE(0, 8)))
	checkErr(t, "send to a peer in RESET", poll1(t, ea.scq), 1, verbs.WCRetryExcErr, ea.qp.QPN())
	quietCQ(t, eb.rcq, 0, "peer receive CQ")
}

// retryNoSuchQP: the destination QP number does not exist.
func retryNoSuchQP(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	info := eb.qp.Info()
	if err := eb.qp.Destroy(); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if err := ea.qp.Connect(info, &verbs.ConnectOptions{Timeout: 8, RetryCnt: 3}); err != nil {
		t.Fatal(err)
	}
	ea.post(read(1, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey))
	checkErr(t, "read from a QP that does not exist", poll1(t, ea.scq), 1, verbs.WCRetryExcErr, ea.qp.QPN())
}
