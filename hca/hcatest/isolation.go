package hcatest

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
)

var isolationScenarios = []scenario{
	{"QPInjection", qpInjection},
}

// qpInjection: a third function that knows a connected QP's number, its
// peer's starting PSN and the victim's rkey and address points a QP of its
// own at the victim and posts READs, WRITEs, SENDs and atomics with PSNs
// around the one the victim expects (ReDMArk's QP injection). The victim
// serves none of them: each attacking WR times out with RETRY_EXC_ERR, the
// victim's memory, posted receive, state and traffic are untouched. With
// Options.RCSourceHardware the device behaves as hardware does instead:
// the READ at the expected PSN returns the victim's data.
func qpInjection(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b) // the victim ea, connected to its peer eb
	c := newNode(t, s.local)
	fill(a.buf, 0x5A)
	victim := bytes.Clone(a.buf)
	ea.recv(rwr(1, a.mr.SGE(4096, 256))) // a receive the attacker's SENDs must not take
	vi, expected := ea.qp.Info(), eb.qp.Info().PSN
	ops := []struct {
		name string
		wr   verbs.SendWR
	}{
		{"READ", read(0, c.mr.SGE(0, 64), a.mr.Addr, a.mr.RKey)},
		{"WRITE", write(0, c.mr.SGE(0, 64), a.mr.Addr, a.mr.RKey)},
		{"SEND", send(0, c.mr.SGE(0, 16))},
		{"FETCH_ADD", verbs.SendWR{Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SG: []verbs.SGE{c.mr.SGE(64, 8)},
			RemoteAddr: a.mr.Addr + 8192, RKey: a.mr.RKey, CompareAdd: 1}},
	}
	served := false
	for _, op := range ops {
		for d := -3; d <= 3; d++ {
			what := fmt.Sprintf("%s at expected PSN %+d", op.name, d)
			fill(c.buf, 0xC3)
			ec := c.ep(nil)
			for _, attr := range []verbs.QPAttr{
				{State: verbs.StateInit, Access: allAccess},
				{State: verbs.StateRTR, DestLID: vi.LID, DestGID: vi.GID, DestQPN: vi.QPN, RQPSN: 0, MinRNRTimer: 1, MaxDestRDAtomic: 16},
				{State: verbs.StateRTS, SQPSN: (expected + uint32(d)) & 0xFFFFFF, Timeout: 8, RetryCnt: 1, RNRRetry: 1, MaxRDAtomic: 16},
			} {
				if err := ec.qp.Modify(&attr); err != nil {
					t.Fatalf("%s: attacker to %v: %v", what, attr.State, err)
				}
			}
			wr := op.wr
			wr.WRID = 100
			ec.post(wr)
			wc := Poll1(t, ec.scq)
			if s.hardware && wc.Status == verbs.WCSuccess {
				served = true
				if op.name == "READ" && !bytes.Equal(c.buf[:64], victim[:64]) {
					t.Errorf("%s: served, but the attacker's buffer does not hold the victim's data", what)
				}
				break // the victim's PSN moved on: the rest of the window is another test
			}
			if s.hardware {
				continue
			}
			CheckErr(t, what, wc, 100, verbs.WCRetryExcErr, ec.qp.QPN())
			if op.name == "READ" {
				sameBytes(t, what+": attacker's buffer", c.buf[:64], pattern(64, 0xC3))
			}
			sameBytes(t, what+": victim's memory", a.buf, victim)
			if st := ea.qp.State(); st != verbs.StateRTS {
				t.Fatalf("%s: the victim's QP is in %v", what, st)
			}
		}
	}
	if s.hardware {
		if !served {
			t.Error("hardware behaviour: no injected request was served")
		}
		return
	}
	Quiet(t, ea.rcq, 0, "victim's receive CQ (its receive is still posted)")
	Quiet(t, ea.scq, 0, "victim's send CQ")
	// The victim's own traffic: its peer writes, reads and sends; its
	// receive, posted before the attack, takes the SEND.
	fill(b.buf[:256], 0x11)
	eb.post(write(2, b.mr.SGE(0, 256), a.mr.Addr, a.mr.RKey))
	Check(t, "peer's write after the attack", Poll1(t, eb.scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	eb.post(read(3, b.mr.SGE(1024, 256), a.mr.Addr, a.mr.RKey))
	Check(t, "peer's read after the attack", Poll1(t, eb.scq), Want{WRID: 3, Op: verbs.WCRDMARead, Len: 256})
	sameBytes(t, "peer's read", b.buf[1024:1280], b.buf[:256])
	eb.post(send(4, b.mr.SGE(0, 32)))
	Check(t, "peer's send", Poll1(t, eb.scq), Want{WRID: 4, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "the victim's receive, posted before the attack", Poll1(t, ea.rcq), Want{WRID: 1, Op: verbs.WCRecv, Len: 32})
	ea.post(write(5, a.mr.SGE(0, 64), b.mr.Addr+2048, b.mr.RKey))
	Check(t, "victim's own write", Poll1(t, ea.scq), Want{WRID: 5, Op: verbs.WCRDMAWrite, Len: AnyLen})
}
