package hcatest

import (
	"fmt"
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
)

var unsignaledScenarios = []scenario{
	{"Batches", unsignaledBatches},
	{"SigAll", sigAll},
	{"LargeBatch", largeBatch},
	{"RingWrap", ringWrap},
	{"CounterWrap", counterWrap},
}

// unsignaledBatches: many unsignaled WRITEs then one signaled: exactly one
// completion, and the send queue keeps accepting (the completion retired
// the unsignaled WRs' slots).
func unsignaledBatches(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	const batch, rounds = 64, 40 // 2560 WRs through a queue for 64
	for r := range rounds {
		var wrs []verbs.SendWR
		for i := range batch {
			off := 8 * i
			putBE64(a.buf[off:], uint64(r*batch+i))
			w := write(uint64(r*batch+i), a.mr.SGE(off, 8), b.mr.Addr+uint64(off), b.mr.RKey)
			if i != batch-1 {
				w.Flags = 0
			}
			wrs = append(wrs, w)
		}
		ea.post(wrs...)
		Check(t, "the signaled WR", Poll1(t, ea.scq), Want{WRID: uint64(r*batch + batch - 1), Op: verbs.WCRDMAWrite, Len: AnyLen})
		for i := range batch {
			if got := be64(b.buf[8*i:]); got != uint64(r*batch+i) {
				t.Fatalf("round %d: word %d is %d", r, i, got)
			}
		}
	}
	Quiet(t, ea.scq, quiet, "send CQ (one completion per batch)")
}

// sigAll: a QP created with SigAll completes every WR, whatever its flags.
func sigAll(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := a.ep(&epOpts{sigAll: true}), b.ep(nil)
	connect(t, ea, eb, nil, nil)
	for i := range 10 {
		w := write(uint64(i), a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey)
		w.Flags = 0
		ea.post(w)
	}
	for i, wc := range Poll(t, ea.scq, 10) {
		Check(t, "sig-all completion", wc, Want{WRID: uint64(i), Op: verbs.WCRDMAWrite, Len: AnyLen})
	}
}

// ringWrap: thousands of WRs through a small QP (MaxSendWR 8, MaxRecvWR
// 8) and small CQs: every ring wraps many times.
func ringWrap(t *testing.T, s *suite) {
	a, b := s.pair(t)
	small := verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}
	ea, eb := a.ep(&epOpts{cap: small, cqDepth: 16}), b.ep(&epOpts{cap: small, cqDepth: 16})
	connect(t, ea, eb, nil, nil)
	const rounds = 1000
	for r := range rounds {
		base := uint64(r) * 4
		putBE64(a.buf[0:], base)
		putBE64(a.buf[8:], base+1)
		putBE64(a.buf[16:], base+2)
		eb.recv(rwr(base+3, b.mr.SGE(1000, 8)))
		w1 := write(base, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey)
		w1.Flags = 0
		w2 := write(base+1, a.mr.SGE(8, 8), b.mr.Addr+8, b.mr.RKey)
		w2.Flags = 0
		ea.post(w1, w2, send(base+2, a.mr.SGE(16, 8)))
		Check(t, "send", Poll1(t, ea.scq), Want{WRID: base + 2, Op: verbs.WCSend, Len: AnyLen})
		Check(t, "recv", Poll1(t, eb.rcq), Want{WRID: base + 3, Op: verbs.WCRecv, Len: 8})
		if be64(b.buf) != base || be64(b.buf[8:]) != base+1 || be64(b.buf[1000:]) != base+2 {
			t.Fatalf("round %d: data %d %d %d", r, be64(b.buf), be64(b.buf[8:]), be64(b.buf[1000:]))
		}
		if t.Failed() {
			return
		}
	}
}

// counterWrap: more than 2^16 WQEs and receives through one QP, so that
// the 16-bit WQE counters wrap.
func counterWrap(t *testing.T, s *suite) {
	a, b := s.pair(t)
	capa := verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}
	ea, eb := a.ep(&epOpts{cap: capa, cqDepth: 128}), b.ep(&epOpts{cap: capa, cqDepth: 128})
	connect(t, ea, eb, nil, nil)
	const batch = 64
	const total = 1<<16 + 3*batch
	recvs := make([]verbs.RecvWR, batch)
	sends := make([]verbs.SendWR, batch)
	for done := 0; done < total; done += batch {
		for i := range batch {
			id := uint64(done + i)
			recvs[i] = rwr(id, b.mr.SGE(8*i, 8))
			sends[i] = verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SG: []verbs.SGE{a.mr.SGE(8*i, 8)}}
			putBE64(a.buf[8*i:], id)
		}
		sends[batch-1].Flags = verbs.SendSignaled
		eb.recv(recvs...)
		ea.post(sends...)
		Check(t, "send", Poll1(t, ea.scq), Want{WRID: uint64(done + batch - 1), Op: verbs.WCSend, Len: AnyLen})
		for i, wc := range Poll(t, eb.rcq, batch) {
			Check(t, fmt.Sprintf("recv %d", done+i), wc, Want{WRID: uint64(done + i), Op: verbs.WCRecv, Len: 8})
			if got := be64(b.buf[8*i:]); got != uint64(done+i) {
				t.Fatalf("recv %d carried %d", done+i, got)
			}
		}
		if t.Failed() {
			return
		}
	}
}

// largeBatch: one PostSend of more WRs than the device keeps in flight
// (1000 unsignaled WRITEs and a signaled one).
func largeBatch(t *testing.T, s *suite) {
	a, b := s.pair(t)
	c := verbs.QPCap{MaxSendWR: 1024, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	ea, eb := a.ep(&epOpts{cap: c}), b.ep(nil)
	connect(t, ea, eb, nil, nil)
	const n = 1001
	var wrs []verbs.SendWR
	for i := range n {
		putBE64(a.buf[8*i:], uint64(i)^0xABCDEF)
		w := write(uint64(i), a.mr.SGE(8*i, 8), b.mr.Addr+uint64(8*i), b.mr.RKey)
		if i != n-1 {
			w.Flags = 0
		}
		wrs = append(wrs, w)
	}
	ea.post(wrs...)
	Check(t, "the signaled WR", Poll1(t, ea.scq), Want{WRID: n - 1, Op: verbs.WCRDMAWrite, Len: AnyLen})
	for i := range n {
		if got := be64(b.buf[8*i:]); got != uint64(i)^0xABCDEF {
			t.Fatalf("word %d is %#x", i, got)
		}
	}
	Quiet(t, ea.scq, quiet, "send CQ")
}
