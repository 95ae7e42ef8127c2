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
	{"FollowingWRs", rnrFollowingWRs},
}

var retryScenarios = []scenario{
	{"PeerDestroyed", retryPeerDestroyed},
	{"PeerNeverConnected", retryPeerNeverConnected},
	{"NoSuchQP", retryNoSuchQP},
	{"PeerConnectsLate", retryPeerConnectsLate},
	{"PeerContextClosed", retryPeerContextClosed},
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
	Quiet(t, ea.scq, quiet, "send CQ while no receive is posted")
	eb.recv(rwr(2, b.mr.SGE(0, 64)))
	Check(t, "send", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "receive", Poll1(t, eb.rcq), Want{WRID: 2, Op: verbs.WCRecv, Len: 8})
	sameBytes(t, "data", b.buf[:8], []byte("patience"))
	// The connection keeps working.
	eb.recv(rwr(3, b.mr.SGE(100, 64)))
	ea.post(send(4, a.mr.SGE(0, 3)))
	Check(t, "next send", Poll1(t, ea.scq), Want{WRID: 4, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "next receive", Poll1(t, eb.rcq), Want{WRID: 3, Op: verbs.WCRecv, Len: 3})
	Quiet(t, eb.rcq, quiet, "receive CQ (no duplicate)")
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
	Quiet(t, ea.scq, quiet, "send CQ while no receive is posted")
	eb.recv(rwr(2))
	Check(t, "write with imm", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Check(t, "receive", Poll1(t, eb.rcq), Want{WRID: 2, Op: verbs.WCRecvRDMAWithImm, Len: 300, Imm: 0x55, WithImm: true})
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
		CheckErr(t, "send without a receive", Poll1(t, ea.scq), 1, verbs.WCRNRRetryExcErr, ea.qp.QPN())
		CheckErr(t, "the send after it", Poll1(t, ea.scq), 2, verbs.WCWRFlushErr, ea.qp.QPN())
		// A retransmission the requester sent before it gave up may still
		// be on its way (as on a wire): the responder NAKs it while no
		// receive is posted, so the test waits for that before posting.
		Quiet(t, eb.rcq, quiet, "receiver CQ")
		// The receiver was not harmed: a receive posted now stays posted.
		eb.recv(rwr(3, b.mr.SGE(0, 64)))
		Quiet(t, eb.rcq, quiet, "receiver CQ after posting")
	}
}

// retryPeerDestroyed: the peer QP disappears; the requester's ACK timeout
// expires RetryCnt+1 times and the WR fails with RETRY_EXC_ERR.
func retryPeerDestroyed(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	connect(t, ea, eb, &verbs.ConnectOptions{Timeout: 12, RetryCnt: 2}, nil)
	ea.post(write(1, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey))
	Check(t, "write before", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	if err := eb.qp.Destroy(); err != nil {
		t.Fatalf("destroy peer: %v", err)
	}
	ea.post(write(2, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey), send(3, a.mr.SGE(0, 8)))
	CheckErr(t, "write to a destroyed peer", Poll1(t, ea.scq), 2, verbs.WCRetryExcErr, ea.qp.QPN())
	CheckErr(t, "the WR after it", Poll1(t, ea.scq), 3, verbs.WCWRFlushErr, ea.qp.QPN())
	ea.post(send(4, a.mr.SGE(0, 8)))
	CheckErr(t, "posted afterwards", Poll1(t, ea.scq), 4, verbs.WCWRFlushErr, ea.qp.QPN())
	Quiet(t, ea.scq, quiet, "send CQ")
}

// retryPeerNeverConnected: the peer QP exists but stays in RESET (it drops
// requests): RETRY_EXC_ERR.
func retryPeerNeverConnected(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	if err := ea.qp.Connect(eb.qp.Info(), &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}); err != nil {
		t.Fatal(err)
	}
	ea.post(send(1, a.mr.SGE(0, 8)))
	CheckErr(t, "send to a peer in RESET", Poll1(t, ea.scq), 1, verbs.WCRetryExcErr, ea.qp.QPN())
	Quiet(t, eb.rcq, 0, "peer receive CQ")
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
	CheckErr(t, "read from a QP that does not exist", Poll1(t, ea.scq), 1, verbs.WCRetryExcErr, ea.qp.QPN())
}

// rnrFollowingWRs: WRs posted behind a SEND that meets RNR wait for it and
// then all complete, in order, each executed once.
func rnrFollowingWRs(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	connect(t, ea, eb, nil, &verbs.ConnectOptions{MinRNRTimer: 8})
	putBE64(b.buf[4096:], 0)
	copy(a.buf, "first")
	fill(a.buf[1000:2000], 0x19)
	wrs := []verbs.SendWR{send(1, a.mr.SGE(0, 5))}
	for i := range 10 {
		wrs = append(wrs, verbs.SendWR{WRID: uint64(10 + i), Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{a.mr.SGE(8192+8*i, 8)}, RemoteAddr: b.mr.Addr + 4096, RKey: b.mr.RKey, CompareAdd: 1})
	}
	wrs = append(wrs, write(30, a.mr.SGE(1000, 1000), b.mr.Addr+10000, b.mr.RKey), send(31, a.mr.SGE(0, 2)))
	ea.post(wrs...)
	Quiet(t, ea.scq, quiet, "send CQ while the first SEND meets RNR")
	if got := be64(b.buf[4096:]); got != 0 {
		t.Errorf("an atomic behind the waiting SEND executed: word is %d", got)
	}
	eb.recv(rwr(2, b.mr.SGE(0, 64)), rwr(3, b.mr.SGE(64, 64)))
	got := Poll(t, ea.scq, len(wrs))
	Check(t, "the SEND", got[0], Want{WRID: 1, Op: verbs.WCSend, Len: AnyLen})
	for i := range 10 {
		Check(t, "atomic", got[1+i], Want{WRID: uint64(10 + i), Op: verbs.WCFetchAdd, Len: 8})
		if v := be64(a.buf[8192+8*i:]); v != uint64(i) {
			t.Errorf("atomic %d fetched %d (executed more than once?)", i, v)
		}
	}
	Check(t, "write", got[11], Want{WRID: 30, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Check(t, "second send", got[12], Want{WRID: 31, Op: verbs.WCSend, Len: AnyLen})
	if v := be64(b.buf[4096:]); v != 10 {
		t.Errorf("after 10 fetch-adds the word is %d", v)
	}
	sameBytes(t, "write", b.buf[10000:11000], a.buf[1000:2000])
	Check(t, "first receive", Poll1(t, eb.rcq), Want{WRID: 2, Op: verbs.WCRecv, Len: 5})
	Check(t, "second receive", Poll1(t, eb.rcq), Want{WRID: 3, Op: verbs.WCRecv, Len: 2})
	Quiet(t, eb.rcq, quiet, "receive CQ")
}

// retryPeerConnectsLate: requests to a peer that is not ready yet are
// retransmitted on the ACK timeout and succeed once it is.
//
// The outcome rests on a real-time margin: the requester's retry budget
// (RetryCnt+1 ACK timeouts, divided by the device's TimeScale, which the
// suite does not know) must outlast the peer's connect. A budget that ran
// out while the peer was still connecting, or soon after (the error came
// within 4× the connect's time), says nothing about the device: the
// scenario tries again on fresh QPs with a timeout code 3 larger (8× as
// long), up to a budget of about waitFor/2. An error after that, or one
// that came long after the peer was ready, fails.
func retryPeerConnectsLate(t *testing.T, s *suite) {
	a, b := s.pair(t)
	copy(a.buf, "late")
	for code := uint8(10); ; code += 3 {
		ea, eb := a.ep(nil), b.ep(nil)
		if err := ea.qp.Connect(eb.qp.Info(), &verbs.ConnectOptions{Timeout: code, RetryCnt: 7}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ea.post(write(1, a.mr.SGE(0, 4), b.mr.Addr+100, b.mr.RKey), send(2, a.mr.SGE(0, 4)))
		time.Sleep(time.Millisecond)
		if err := eb.qp.Connect(ea.qp.Info(), nil); err != nil {
			t.Fatal(err)
		}
		ready := time.Since(start)
		eb.recv(rwr(3, b.mr.SGE(200, 64)))
		first := Poll1(t, ea.scq)
		if took := time.Since(start); first.Status == verbs.WCRetryExcErr && took < 4*ready {
			CheckErr(t, "the send behind the write", Poll1(t, ea.scq), 2, verbs.WCWRFlushErr, ea.qp.QPN())
			if 8*took > waitFor/2 {
				t.Fatalf("timeout code %d: RETRY_EXC_ERR %v after the post, the peer ready after %v: a larger code would outlast the suite's wait", code, took, ready)
			}
			t.Logf("timeout code %d: retries exhausted %v after the post, the peer ready after %v (scaled timers): again with code %d", code, took, ready, code+3)
			continue
		}
		Check(t, "write", first, Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
		Check(t, "send", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCSend, Len: AnyLen})
		Check(t, "receive", Poll1(t, eb.rcq), Want{WRID: 3, Op: verbs.WCRecv, Len: 4})
		sameBytes(t, "written", b.buf[100:104], []byte("late"))
		sameBytes(t, "sent", b.buf[200:204], []byte("late"))
		return
	}
}

// retryPeerContextClosed: the peer's whole context closes; the requester
// times out.
func retryPeerContextClosed(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	connect(t, ea, eb, &verbs.ConnectOptions{Timeout: 10, RetryCnt: 2}, nil)
	raddr, rkey := b.mr.Addr, b.mr.RKey
	if err := b.ctx.Close(); err != nil {
		t.Fatalf("close peer context: %v", err)
	}
	ea.post(write(1, a.mr.SGE(0, 8), raddr, rkey))
	CheckErr(t, "write to a closed context", Poll1(t, ea.scq), 1, verbs.WCRetryExcErr, ea.qp.QPN())
}
