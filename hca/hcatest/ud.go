package hcatest

import (
	"fmt"
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
)

var udScenarios = []scenario{
	{"SendAndImm", udSendAndImm},
	{"QKeyMismatchDropped", udQKeyMismatch},
}

const udQKey = 0x11111111

// udEnd creates a UD endpoint on n in RTS with Q_Key udQKey.
func udEnd(t testing.TB, n *node) *ep {
	t.Helper()
	e := n.ep(&epOpts{typ: verbs.QPTypeUD})
	for _, a := range []verbs.QPAttr{{State: verbs.StateInit, QKey: udQKey}, {State: verbs.StateRTR},
		{State: verbs.StateRTS, SQPSN: 0}} {
		if err := e.qp.Modify(&a); err != nil {
			t.Fatalf("modify ud qp to %v: %v", a.State, err)
		}
	}
	return e
}

// udTo addresses a datagram to e with Q_Key qkey.
func udTo(e *ep, qkey uint32) *verbs.UDDest {
	in := e.qp.Info()
	return &verbs.UDDest{QPN: in.QPN, QKey: qkey, LID: in.LID, GID: in.GID, SGIDIndex: 3}
}

// udSendAndImm: SEND and SEND with immediate between UD QPs land after the
// 40-byte GRH, with the source QP and the GRH flag in the completion.
func udSendAndImm(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := udEnd(t, a), udEnd(t, b)
	if eb.qp.Type() != verbs.QPTypeUD {
		t.Fatalf("QP type %v, want UD", eb.qp.Type())
	}
	for i, n := range []int{1, 256, 4096} {
		msg := pattern(n, byte(i+3))
		copy(a.buf, msg)
		eb.recv(rwr(uint64(i), b.mr.SGE(0, 40+n)))
		wr := send(uint64(100+i), a.mr.SGE(0, n))
		wr.UD = udTo(eb, udQKey)
		if i == 1 {
			wr.Opcode, wr.Imm = verbs.WRSendWithImm, 0xD00D
		}
		ea.post(wr)
		Check(t, fmt.Sprintf("ud send %d B", n), Poll1(t, ea.scq), Want{WRID: uint64(100 + i), Op: verbs.WCSend, Len: AnyLen})
		w := Want{WRID: uint64(i), Op: verbs.WCRecv, Len: 40 + n, QPN: eb.qp.QPN()}
		if i == 1 {
			w.Imm, w.WithImm = 0xD00D, true
		}
		got := Poll1(t, eb.rcq)
		Check(t, fmt.Sprintf("ud receive %d B", n), got, w)
		if got.SrcQP != ea.qp.QPN() || !got.GRH {
			t.Errorf("ud receive %d B: src_qp %#x grh %v, want %#x and a GRH", n, got.SrcQP, got.GRH, ea.qp.QPN())
		}
		sameBytes(t, "datagram payload after the GRH", b.buf[40:40+n], msg)
	}
}

// udQKeyMismatch: a datagram with another Q_Key is dropped; the next one
// takes the receive it would have taken.
func udQKeyMismatch(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := udEnd(t, a), udEnd(t, b)
	eb.recv(rwr(1, b.mr.SGE(0, 40+64)))
	wr := send(10, a.mr.SGE(0, 64))
	wr.UD = udTo(eb, udQKey+1)
	ea.post(wr)
	Check(t, "send with the wrong Q_Key", Poll1(t, ea.scq), Want{WRID: 10, Op: verbs.WCSend, Len: AnyLen})
	wr.WRID, wr.UD = 11, udTo(eb, udQKey)
	ea.post(wr)
	Check(t, "send with the right Q_Key", Poll1(t, ea.scq), Want{WRID: 11, Op: verbs.WCSend, Len: AnyLen})
	got := Poll1(t, eb.rcq)
	Check(t, "the receive takes the second datagram", got, Want{WRID: 1, Op: verbs.WCRecv, Len: 40 + 64, QPN: eb.qp.QPN()})
	if got.SrcQP != ea.qp.QPN() {
		t.Errorf("src_qp %#x, want %#x", got.SrcQP, ea.qp.QPN())
	}
}
