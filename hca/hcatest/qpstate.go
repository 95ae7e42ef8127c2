package hcatest

import (
	"errors"
	"github.com/hcasim/hcasim/hca/ifc"
	"strings"
	"testing"
	"time"

	"github.com/hcasim/hcasim/hca/verbs"
)

var qpStateScenarios = []scenario{
	{"PostBeforeRTS", postBeforeRTS},
	{"TooManySGE", tooManySGE},
	{"RingFull", ringFull},
	{"BadOpcode", badOpcode},
	{"SQD", sqdDrain},
	{"SQDWithOutstandingWork", sqdOutstanding},
	{"ModifyRTSKeepsAccess", rtsToRTSKeepsAccess},
	{"ResetAndReuse", resetAndReuse},
	{"BadTransitions", badTransitions},
	{"ObjectLifetimes", objectLifetimes},
}

// postBeforeRTS: PostSend in RESET, INIT and RTR fails at once with
// ErrQPState; PostRecv fails in RESET only. A QP in RTR already receives.
func postBeforeRTS(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	wr := []verbs.SendWR{write(1, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey)}
	postErr(t, "PostSend in RESET", ea.qp, wr, 0, verbs.ErrQPState)
	if n, err := ea.qp.PostRecv([]verbs.RecvWR{rwr(2, a.mr.SGE(0, 64))}); n != 0 || !errors.Is(err, verbs.ErrQPState) {
		t.Errorf("PostRecv in RESET: %d, %v; want 0, ErrQPState", n, err)
	}
	if err := ea.qp.Modify(&verbs.QPAttr{State: verbs.StateInit, Access: allAccess}); err != nil {
		t.Fatalf("to INIT: %v", err)
	}
	postErr(t, "PostSend in INIT", ea.qp, wr, 0, verbs.ErrQPState)
	ea.recv(rwr(3, a.mr.SGE(0, 64))) // receives may be posted in INIT
	bi := eb.qp.Info()
	if err := ea.qp.Modify(&verbs.QPAttr{State: verbs.StateRTR, DestLID: bi.LID, DestGID: bi.GID, DestQPN: bi.QPN, RQPSN: bi.PSN, MinRNRTimer: 12, MaxDestRDAtomic: 16}); err != nil {
		t.Fatalf("to RTR: %v", err)
	}
	postErr(t, "PostSend in RTR", ea.qp, wr, 0, verbs.ErrQPState)
	// In RTR the QP receives.
	if err := eb.qp.Connect(ea.qp.Info(), nil); err != nil {
		t.Fatal(err)
	}
	copy(b.buf, "to RTR")
	eb.post(send(4, b.mr.SGE(0, 6)))
	Check(t, "send to a QP in RTR", Poll1(t, eb.scq), Want{WRID: 4, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "receive posted in INIT, consumed in RTR", Poll1(t, ea.rcq), Want{WRID: 3, Op: verbs.WCRecv, Len: 6})
	sameBytes(t, "received in RTR", a.buf[:6], []byte("to RTR"))
	if err := ea.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: ea.qp.Info().PSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 16}); err != nil {
		t.Fatalf("to RTS: %v", err)
	}
	ea.post(wr...)
	Check(t, "write in RTS", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Quiet(t, ea.scq, quiet, "send CQ (the refused WRs never ran)")
}

// tooManySGE: a WR with more SGEs than the QP allows is refused with
// ErrTooManySGE and its index; the WRs before it are posted.
func tooManySGE(t *testing.T, s *suite) {
	a, b := s.pair(t)
	c := verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}
	ea, eb := a.ep(&epOpts{cap: c}), b.ep(&epOpts{cap: c})
	connect(t, ea, eb, nil, nil)
	w3 := write(3, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey)
	w3.SG = []verbs.SGE{a.mr.SGE(0, 8), a.mr.SGE(8, 8), a.mr.SGE(16, 8)}
	w2 := write(2, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey)
	w2.SG = []verbs.SGE{a.mr.SGE(0, 8), a.mr.SGE(8, 8)}
	wrs := []verbs.SendWR{write(1, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey), w2, w3, write(4, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey)}
	n, err := ea.qp.PostSend(wrs)
	if n != 2 || !errors.Is(err, verbs.ErrTooManySGE) {
		t.Errorf("PostSend: %d, %v; want 2, ErrTooManySGE", n, err)
	} else if !strings.Contains(err.Error(), "WR 2") {
		t.Errorf("error %q does not name WR 2", err)
	}
	for i, wc := range Poll(t, ea.scq, 2) {
		Check(t, "posted WR", wc, Want{WRID: uint64(1 + i), Op: verbs.WCRDMAWrite, Len: AnyLen})
	}
	Quiet(t, ea.scq, quiet, "send CQ")
	n, err = eb.qp.PostRecv([]verbs.RecvWR{rwr(5, b.mr.SGE(0, 8), b.mr.SGE(8, 8)), rwr(6, b.mr.SGE(0, 8), b.mr.SGE(8, 8), b.mr.SGE(16, 8))})
	if n != 1 || !errors.Is(err, verbs.ErrTooManySGE) {
		t.Errorf("PostRecv: %d, %v; want 1, ErrTooManySGE", n, err)
	}
}

// ringFull: with nothing polled, the send queue fills and PostSend
// returns ErrRingFull with the index of the first WR not posted; polling
// makes room.
func ringFull(t *testing.T, s *suite) {
	a, b := s.pair(t)
	c := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	ea, eb := a.ep(&epOpts{cap: c}), b.ep(&epOpts{cap: c})
	connect(t, ea, eb, nil, nil)
	wr := func(id int) verbs.SendWR { return write(uint64(id), a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey) }
	capacity := 0
	var err error
	for ; capacity < 1<<16; capacity++ {
		var n int
		if n, err = ea.qp.PostSend([]verbs.SendWR{wr(capacity)}); err != nil {
			if n != 0 {
				t.Errorf("failed PostSend of one WR posted %d", n)
			}
			break
		}
	}
	if !errors.Is(err, verbs.ErrRingFull) || capacity < c.MaxSendWR {
		t.Fatalf("after %d WRs: %v; want ErrRingFull after at least %d", capacity, err, c.MaxSendWR)
	}
	postErr(t, "PostSend on a full ring", ea.qp, []verbs.SendWR{wr(1000)}, 0, verbs.ErrRingFull)
	for i, wc := range Poll(t, ea.scq, capacity) {
		Check(t, "completion", wc, Want{WRID: uint64(i), Op: verbs.WCRDMAWrite, Len: AnyLen})
	}
	// A batch larger than the ring: the ones that fit are posted.
	var wrs []verbs.SendWR
	for i := range capacity + 3 {
		wrs = append(wrs, wr(2000+i))
	}
	postErr(t, "oversized batch", ea.qp, wrs, capacity, verbs.ErrRingFull)
	for i, wc := range Poll(t, ea.scq, capacity) {
		Check(t, "batch completion", wc, Want{WRID: uint64(2000 + i), Op: verbs.WCRDMAWrite, Len: AnyLen})
	}
	Quiet(t, ea.scq, quiet, "send CQ")

	// The receive queue likewise.
	rcapacity := 0
	for ; rcapacity < 1<<16; rcapacity++ {
		var n int
		if n, err = eb.qp.PostRecv([]verbs.RecvWR{rwr(uint64(rcapacity), b.mr.SGE(8*rcapacity, 8))}); err != nil {
			if n != 0 {
				t.Errorf("failed PostRecv of one WR posted %d", n)
			}
			break
		}
	}
	if !errors.Is(err, verbs.ErrRingFull) || rcapacity < c.MaxRecvWR {
		t.Fatalf("after %d receives: %v; want ErrRingFull after at least %d", rcapacity, err, c.MaxRecvWR)
	}
	ea.post(send(3000, a.mr.SGE(0, 8)))
	Check(t, "send", Poll1(t, ea.scq), Want{WRID: 3000, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "recv", Poll1(t, eb.rcq), Want{WRID: 0, Op: verbs.WCRecv, Len: 8})
	eb.recv(rwr(4000, b.mr.SGE(0, 8)))
	if n, err := eb.qp.PostRecv([]verbs.RecvWR{rwr(4001, b.mr.SGE(0, 8))}); n != 0 || !errors.Is(err, verbs.ErrRingFull) {
		t.Errorf("PostRecv on a full receive queue: %d, %v; want 0, ErrRingFull", n, err)
	}
}

// badOpcode: an unknown opcode is refused with ErrBadOpcode and its index.
func badOpcode(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	postErr(t, "bad opcode", ea.qp, []verbs.SendWR{{WRID: 1, Opcode: verbs.WROpcode(99), Flags: verbs.SendSignaled}}, 0, verbs.ErrBadOpcode)
	postErr(t, "bad opcode second", ea.qp, []verbs.SendWR{write(2, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey), {WRID: 3, Opcode: verbs.WROpcode(250)}}, 1, verbs.ErrBadOpcode)
	Check(t, "the WR before the bad one", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Quiet(t, ea.scq, quiet, "send CQ")
}

// sqdDrain: RTS→SQD reports SQ_DRAINED; WRs posted in SQD wait until
// SQD→RTS, which keeps the QP's attributes.
func sqdDrain(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	ea.post(write(1, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey))
	Check(t, "write in RTS", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	if err := ea.qp.Modify(&verbs.QPAttr{State: verbs.StateSQD}); err != nil {
		t.Fatalf("to SQD: %v", err)
	}
	waitEvent(t, a.ctx, ifc.EventSQDrained, ea.qp.QPN())
	clear(b.buf[:4096])
	fill(a.buf[:4096], 0x5D)
	ea.post(write(2, a.mr.SGE(0, 4096), b.mr.Addr, b.mr.RKey))
	// The responder of a QP in SQD still serves its peer.
	copy(b.buf[8192:], "into SQD")
	ea.recv(rwr(5, a.mr.SGE(12288, 64)))
	eb.post(write(6, b.mr.SGE(8192, 8), a.mr.Addr+16384, a.mr.RKey), send(7, b.mr.SGE(8192, 8)))
	Check(t, "peer write into a QP in SQD", Poll1(t, eb.scq), Want{WRID: 6, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Check(t, "peer send into a QP in SQD", Poll1(t, eb.scq), Want{WRID: 7, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "receive in SQD", Poll1(t, ea.rcq), Want{WRID: 5, Op: verbs.WCRecv, Len: 8})
	sameBytes(t, "written into SQD", a.buf[16384:16392], []byte("into SQD"))
	Quiet(t, ea.scq, 3*quiet, "send CQ in SQD")
	sameBytes(t, "remote memory while the WR waits in SQD", b.buf[:4096], make([]byte, 4096))
	if err := ea.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS}); err != nil {
		t.Fatalf("SQD to RTS: %v", err)
	}
	Check(t, "write posted in SQD", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	sameBytes(t, "written after SQD→RTS", b.buf[:4096], a.buf[:4096])
	quietEvents(t, a.ctx, ifc.EventSQDrained, quiet)
	// The QP still serves its peer: SQD→RTS keeps the remote access
	// rights it was connected with.
	fill(b.buf[:64], 0x6E)
	eb.post(write(3, b.mr.SGE(0, 64), a.mr.Addr+8192, a.mr.RKey))
	Check(t, "peer write into the QP after SQD→RTS", Poll1(t, eb.scq), Want{WRID: 3, Op: verbs.WCRDMAWrite, Len: AnyLen})
	sameBytes(t, "peer write", a.buf[8192:8256], b.buf[:64])
}

// sqdOutstanding: SQ_DRAINED comes once the outstanding WR has completed
// — here a SEND held back by RNR until a receive is posted — and not
// before. The requester has no ACK timeout (Timeout 0), so no timer wakes
// it after the completion: the event must come from the completion itself.
func sqdOutstanding(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	bi := eb.qp.Info()
	for _, attr := range []verbs.QPAttr{
		{State: verbs.StateInit, Access: allAccess},
		{State: verbs.StateRTR, DestLID: bi.LID, DestGID: bi.GID, DestQPN: bi.QPN, RQPSN: bi.PSN, MinRNRTimer: 12, MaxDestRDAtomic: 16},
		{State: verbs.StateRTS, SQPSN: ea.qp.Info().PSN, Timeout: 0, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 16},
	} {
		if err := ea.qp.Modify(&attr); err != nil {
			t.Fatalf("modify to %v: %v", attr.State, err)
		}
	}
	if err := eb.qp.Connect(ea.qp.Info(), &verbs.ConnectOptions{MinRNRTimer: 8}); err != nil {
		t.Fatal(err)
	}
	ea.post(send(1, a.mr.SGE(0, 8)))
	time.Sleep(5 * time.Millisecond)
	if err := ea.qp.Modify(&verbs.QPAttr{State: verbs.StateSQD}); err != nil {
		t.Fatalf("to SQD: %v", err)
	}
	quietEvents(t, a.ctx, ifc.EventSQDrained, quiet)
	eb.recv(rwr(2, b.mr.SGE(0, 64)))
	Check(t, "outstanding send", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "its receive", Poll1(t, eb.rcq), Want{WRID: 2, Op: verbs.WCRecv, Len: 8})
	waitEvent(t, a.ctx, ifc.EventSQDrained, ea.qp.QPN())
}

// rtsToRTSKeepsAccess: an RTS→RTS modify that does not name the access
// rights leaves them as they were.
func rtsToRTSKeepsAccess(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	if err := ea.qp.Modify(&verbs.QPAttr{State: verbs.StateRTS}); err != nil {
		t.Fatalf("RTS to RTS: %v", err)
	}
	eb.post(write(1, b.mr.SGE(0, 8), a.mr.Addr, a.mr.RKey))
	Check(t, "peer write after RTS→RTS", Poll1(t, eb.scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
}

// resetAndReuse: QPs moved to RESET (from ERR, or with work posted)
// reconnect and work again, without stale completions.
func resetAndReuse(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	exchange := func(round int) {
		t.Helper()
		base := uint64(round) * 100
		copy(a.buf, "hello")
		eb.recv(rwr(base+1, b.mr.SGE(1000, 64)))
		ea.post(send(base+2, a.mr.SGE(0, 5)))
		Check(t, "send", Poll1(t, ea.scq), Want{WRID: base + 2, Op: verbs.WCSend, Len: AnyLen})
		Check(t, "recv", Poll1(t, eb.rcq), Want{WRID: base + 1, Op: verbs.WCRecv, Len: 5})
		ea.recv(rwr(base+3, a.mr.SGE(2000, 64)))
		eb.post(send(base+4, b.mr.SGE(1000, 5)))
		Check(t, "reply", Poll1(t, eb.scq), Want{WRID: base + 4, Op: verbs.WCSend, Len: AnyLen})
		Check(t, "reply recv", Poll1(t, ea.rcq), Want{WRID: base + 3, Op: verbs.WCRecv, Len: 5})
		sameBytes(t, "reply data", a.buf[2000:2005], []byte("hello"))
		fill(b.buf[4096:8192], byte(round))
		ea.post(read(base+5, a.mr.SGE(4096, 4096), b.mr.Addr+4096, b.mr.RKey))
		Check(t, "read", Poll1(t, ea.scq), Want{WRID: base + 5, Op: verbs.WCRDMARead, Len: 4096})
		sameBytes(t, "read data", a.buf[4096:8192], b.buf[4096:8192])
	}
	reset := func() {
		t.Helper()
		for _, e := range []*ep{ea, eb} {
			if err := e.qp.Modify(&verbs.QPAttr{State: verbs.StateReset}); err != nil {
				t.Fatalf("to RESET: %v", err)
			}
			if st := e.qp.State(); st != verbs.StateReset {
				t.Errorf("state after reset: %v", st)
			}
		}
		postErr(t, "PostSend in RESET", ea.qp, []verbs.SendWR{send(99, a.mr.SGE(0, 1))}, 0, verbs.ErrQPState)
		connect(t, ea, eb, nil, nil)
	}
	exchange(1)
	// From ERR (a remote access error on both sides).
	ea.post(write(150, a.mr.SGE(0, 8), b.mr.Addr, 0x00BAD000))
	CheckErr(t, "failing write", Poll1(t, ea.scq), 150, verbs.WCRemAccessErr, ea.qp.QPN())
	reset()
	exchange(2)
	// With receives posted and not consumed: dropped without completions.
	ea.recv(rwr(250, a.mr.SGE(0, 64)), rwr(251, a.mr.SGE(0, 64)))
	eb.recv(rwr(252, b.mr.SGE(0, 64)))
	reset()
	exchange(3)
	Quiet(t, ea.rcq, quiet, "a receive CQ")
	Quiet(t, eb.rcq, 0, "b receive CQ")
	Quiet(t, ea.scq, 0, "a send CQ")
	Quiet(t, eb.scq, 0, "b send CQ")
	// Many cycles.
	for r := 4; r < 30; r++ {
		reset()
		exchange(r)
	}
}

// badTransitions: modifies the state machine does not allow fail and
// change nothing.
func badTransitions(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(nil), b.ep(nil)
	for _, st := range []verbs.QPState{verbs.StateRTR, verbs.StateRTS, verbs.StateSQD} {
		if err := ea.qp.Modify(&verbs.QPAttr{State: st}); err == nil {
			t.Errorf("RESET to %v: no error", st)
		}
	}
	if st := ea.qp.State(); st != verbs.StateReset {
		t.Errorf("state %v after refused modifies, want RESET", st)
	}
	connect(t, ea, eb, nil, nil)
	if err := ea.qp.Modify(&verbs.QPAttr{State: verbs.StateInit}); err == nil {
		t.Errorf("RTS to INIT: no error")
	}
	ea.post(write(1, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey))
	Check(t, "write after refused modifies", Poll1(t, ea.scq), Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
}

// objectLifetimes: a PD, CQ or MR in use cannot go away; once its users
// are gone it can.
func objectLifetimes(t *testing.T, s *suite) {
	a, b := s.pair(t)
	pd := a.newPD()
	buf := a.alloc(8192)
	mr := a.reg(pd, buf, allAccess)
	fmr, err := pd.AllocMR(verbs.MRTypeMemReg, 2)
	if err != nil {
		t.Fatalf("alloc mr: %v", err)
	}
	ea, eb := a.ep(&epOpts{pd: pd}), b.ep(nil)
	connect(t, ea, eb, nil, nil)
	fastReg(t, ea, fmr, []verbs.SGE{mr.SGE(0, 8192)}, allAccess, 1)
	ea.post(write(2, mr.SGE(0, 8), b.mr.Addr, b.mr.RKey))
	Check(t, "write", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	if err := pd.Dealloc(); err == nil {
		t.Fatalf("dealloc of a PD with a QP and MRs: no error")
	}
	if err := ea.scq.Destroy(); err == nil {
		t.Fatalf("destroy of a CQ a QP uses: no error")
	}
	if err := ea.qp.Destroy(); err != nil {
		t.Fatalf("destroy qp: %v", err)
	}
	if err := pd.Dealloc(); err == nil {
		t.Fatalf("dealloc of a PD with MRs: no error")
	}
	for _, m := range []*verbs.MR{mr, fmr} {
		if err := m.Dereg(); err != nil {
			t.Fatalf("dereg: %v", err)
		}
	}
	if err := pd.Dealloc(); err != nil {
		t.Errorf("dealloc of an unused PD: %v", err)
	}
	for _, c := range []*verbs.CQ{ea.scq, ea.rcq} {
		if err := c.Destroy(); err != nil {
			t.Errorf("destroy of an unused CQ: %v", err)
		}
	}
	if err := a.ctx.Free(buf); err != nil {
		t.Errorf("free: %v", err)
	}
	// The peer's QP sees a vanished peer.
	eb.post(write(3, b.mr.SGE(0, 8), mr.Addr, mr.RKey))
	if wc := Poll1(t, eb.scq); wc.Status == verbs.WCSuccess {
		t.Errorf("write to a destroyed QP succeeded: %s", FormatWC(wc))
	}
}
