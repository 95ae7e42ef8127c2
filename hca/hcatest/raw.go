package hcatest

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/hca/verbs"
)

// Raw packet QPs: frames go to the flow tables of the sender's device (and
// of its fabric), so every scenario keeps both QPs on one node: they run
// alike in process, over the socket and on either of two daemons.
var rawScenarios = []scenario{
	{"FlowSteering", rawFlowSteering},
	{"PriorityAndDefaults", rawPriorityAndDefaults},
	{"FlowLifecycle", rawFlowLifecycle},
	{"BlockSelfMulticastLoopback", rawBlockSelfLB},
}

var (
	rawGroupMAC = [6]byte{0x01, 0x50, 0x56, 0x19, 0x20, 0xa7} // multicast
	rawUniMAC   = [6]byte{0x24, 0x8a, 0x07, 0xa5, 0x28, 0xc8}
)

// rawEnd creates a raw packet QP on n in RTS.
func rawEnd(t testing.TB, n *node) *ep { return rawEndOpts(t, n, &epOpts{typ: verbs.QPTypeRaw}) }

// rawEndOpts creates a raw packet QP with options o on n in RTS.
func rawEndOpts(t testing.TB, n *node, o *epOpts) *ep {
	t.Helper()
	e := n.ep(o)
	for _, s := range []verbs.QPState{verbs.StateInit, verbs.StateRTR, verbs.StateRTS} {
		if err := e.qp.Modify(&verbs.QPAttr{State: s}); err != nil {
			t.Fatalf("modify raw qp to %v: %v", s, err)
		}
	}
	return e
}

// rawFrame writes an Ethernet/IPv4/UDP frame of n bytes (at least 42) to
// dst from port sport into b and returns it.
func rawFrame(b []byte, dst [6]byte, etherType uint16, sport uint16, n int, seed byte) []byte {
	f := b[:n]
	copy(f, pattern(n, seed))
	copy(f, dst[:])
	copy(f[6:], rawUniMAC[:])
	binary.BigEndian.PutUint16(f[12:], etherType)
	ip := f[14:]
	ip[0], ip[9] = 0x45, 17 // IPv4, 20 bytes; UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(n-14))
	copy(ip[12:], []byte{1, 1, 1, 1, 2, 2, 2, 2})
	binary.BigEndian.PutUint16(ip[20:], sport)
	binary.BigEndian.PutUint16(ip[22:], 5678)
	return f
}

// createFlow attaches a rule, failing the test if it cannot.
func createFlow(t testing.TB, e *ep, a *verbs.FlowAttr) *verbs.Flow {
	t.Helper()
	f, err := e.qp.CreateFlow(a)
	if err != nil {
		t.Fatalf("create flow %+v: %v", a, err)
	}
	return f
}

// rawSend sends frame bytes [off, off+n) of the sender's buffer and waits
// for the send completion.
func rawSend(t testing.TB, e *ep, id uint64, off, n int) {
	t.Helper()
	e.post(send(id, e.n.mr.SGE(off, n)))
	Check(t, "raw send", Poll1(t, e.scq), Want{WRID: id, Op: verbs.WCSend, Len: AnyLen})
}

// rawFlowSteering: a rule on the destination MAC, EtherType and UDP source
// port takes exactly the frames that match it; the receive gets the frame
// itself (no GRH) and its length.
func rawFlowSteering(t *testing.T, s *suite) {
	n := newNode(t, s.local)
	tx, rx := rawEnd(t, n), rawEnd(t, n)
	udp := verbs.FlowSpec{Type: verbs.FlowSpecUDP, Val: []byte{0, 0, 0x04, 0xd2}, Mask: []byte{0, 0, 0xff, 0xff}} // source port 1234
	createFlow(t, rx, &verbs.FlowAttr{Specs: []verbs.FlowSpec{verbs.EthSpec(rawGroupMAC, 0x0800), udp}})
	const rxOff = 32 << 10
	rx.recv(rwr(1, n.mr.SGE(rxOff, 2048)), rwr(2, n.mr.SGE(rxOff+4096, 2048)))
	rawFrame(n.buf[0:], rawUniMAC, 0x0800, 1234, 100, 1)      // another destination
	rawFrame(n.buf[2048:], rawGroupMAC, 0x86DD, 1234, 100, 2) // another EtherType
	rawFrame(n.buf[4096:], rawGroupMAC, 0x0800, 4321, 100, 3) // another port
	want := rawFrame(n.buf[6144:], rawGroupMAC, 0x0800, 1234, 1514, 4)
	for i := range 4 {
		rawSend(t, tx, uint64(10+i), 2048*i, []int{100, 100, 100, 1514}[i])
	}
	Check(t, "the matching frame", Poll1(t, rx.rcq), Want{WRID: 1, Op: verbs.WCRecv, Len: 1514, QPN: rx.qp.QPN()})
	sameBytes(t, "received frame", n.buf[rxOff:rxOff+1514], want)
	// A second matching frame takes the next receive: nothing else did.
	want = rawFrame(n.buf[0:], rawGroupMAC, 0x0800, 1234, 64, 5)
	rawSend(t, tx, 20, 0, 64)
	Check(t, "the next matching frame", Poll1(t, rx.rcq), Want{WRID: 2, Op: verbs.WCRecv, Len: 64, QPN: rx.qp.QPN()})
	sameBytes(t, "second frame", n.buf[rxOff+4096:rxOff+4096+64], want)
}

// rawPriorityAndDefaults: the best priority that matches takes a frame; a
// DONT_TRAP rule passes it on; a multicast frame no normal rule took goes
// to the multicast-default rule, and a sniffer sees every frame.
func rawPriorityAndDefaults(t *testing.T, s *suite) {
	n := newNode(t, s.local)
	tx, hi, lo, mc, snif := rawEnd(t, n), rawEnd(t, n), rawEnd(t, n), rawEnd(t, n), rawEnd(t, n)
	ipv4 := verbs.EthSpec(rawGroupMAC, 0x0800)
	createFlow(t, lo, &verbs.FlowAttr{Priority: 2, Specs: []verbs.FlowSpec{ipv4}})
	createFlow(t, hi, &verbs.FlowAttr{Priority: 1, Specs: []verbs.FlowSpec{ipv4}, DontTrap: true})
	createFlow(t, mc, &verbs.FlowAttr{Kind: verbs.FlowMCDefault})
	createFlow(t, snif, &verbs.FlowAttr{Kind: verbs.FlowSniffer})
	for i, e := range []*ep{hi, lo, mc, snif} {
		off := 16<<10 + i*4096
		e.recv(rwr(uint64(i), n.mr.SGE(off, 2048)), rwr(uint64(10+i), n.mr.SGE(off+2048, 2048)))
	}
	rawFrame(n.buf[0:], rawGroupMAC, 0x0800, 1, 80, 1)   // hi (DONT_TRAP), then lo; the sniffer
	rawFrame(n.buf[128:], rawGroupMAC, 0x86DD, 1, 90, 2) // no normal rule: the multicast default; the sniffer
	rawSend(t, tx, 1, 0, 80)
	rawSend(t, tx, 2, 128, 90)
	Check(t, "priority 1, DONT_TRAP", Poll1(t, hi.rcq), Want{WRID: 0, Op: verbs.WCRecv, Len: 80, QPN: hi.qp.QPN()})
	Check(t, "priority 2 after DONT_TRAP", Poll1(t, lo.rcq), Want{WRID: 1, Op: verbs.WCRecv, Len: 80, QPN: lo.qp.QPN()})
	Check(t, "multicast default", Poll1(t, mc.rcq), Want{WRID: 2, Op: verbs.WCRecv, Len: 90, QPN: mc.qp.QPN()})
	Check(t, "sniffer, first", Poll1(t, snif.rcq), Want{WRID: 3, Op: verbs.WCRecv, Len: 80, QPN: snif.qp.QPN()})
	Check(t, "sniffer, second", Poll1(t, snif.rcq), Want{WRID: 13, Op: verbs.WCRecv, Len: 90, QPN: snif.qp.QPN()})
	// The IPv6 frame reached neither IPv4 rule: hi's and lo's next
	// receives take the next IPv4 frame.
	rawFrame(n.buf[256:], rawGroupMAC, 0x0800, 1, 70, 3)
	rawSend(t, tx, 3, 256, 70)
	Check(t, "hi, next", Poll1(t, hi.rcq), Want{WRID: 10, Op: verbs.WCRecv, Len: 70, QPN: hi.qp.QPN()})
	Check(t, "lo, next", Poll1(t, lo.rcq), Want{WRID: 11, Op: verbs.WCRecv, Len: 70, QPN: lo.qp.QPN()})
}

// rawFlowLifecycle: a QP with a flow cannot be destroyed (RESOURCE_BUSY,
// the kernel's EBUSY); specs the device does not match are refused; a
// frame shorter than an Ethernet header, or a SEND on anything but a raw
// WR, completes in error.
func rawFlowLifecycle(t *testing.T, s *suite) {
	n := newNode(t, s.local)
	rx := rawEnd(t, n)
	f := createFlow(t, rx, &verbs.FlowAttr{Specs: []verbs.FlowSpec{verbs.EthSpec(rawGroupMAC, 0x0800)}})
	var ce *ifc.CmdError
	if err := rx.qp.Destroy(); !errors.As(err, &ce) || ce.Status != ifc.StatusResBusy {
		t.Fatalf("destroy a QP with a flow: %v, want RESOURCE_BUSY", err)
	}
	for _, bad := range []verbs.FlowSpec{
		{Type: 0x60, Val: make([]byte, 4), Mask: make([]byte, 4)},                 // MPLS: not matched
		{Type: verbs.FlowSpecEth, Val: make([]byte, 8), Mask: make([]byte, 8)},    // short filter
		{Type: verbs.FlowSpecIPv4, Val: make([]byte, 12), Mask: make([]byte, 12)}, // long filter
	} {
		if _, err := rx.qp.CreateFlow(&verbs.FlowAttr{Specs: []verbs.FlowSpec{bad}}); !errors.As(err, &ce) || ce.Status != ifc.StatusBadParam {
			t.Errorf("flow with spec %#x of %d bytes: %v, want BAD_PARAM", bad.Type, len(bad.Val), err)
		}
	}
	if _, err := rx.qp.CreateFlow(&verbs.FlowAttr{Kind: verbs.FlowSniffer, Specs: []verbs.FlowSpec{verbs.EthSpec(rawGroupMAC, 0)}}); !errors.As(err, &ce) || ce.Status != ifc.StatusBadParam {
		t.Errorf("sniffer with a spec: %v, want BAD_PARAM", err)
	}
	rc := n.ep(nil)
	if _, err := rc.qp.CreateFlow(&verbs.FlowAttr{}); err == nil {
		t.Errorf("flow on an RC QP: no error")
	}
	tx := rawEnd(t, n)
	tx.post(send(1, n.mr.SGE(0, 13)))
	if wc := Poll1(t, tx.scq); wc.WRID != 1 || wc.Status != verbs.WCLocLenErr {
		t.Errorf("a 13-byte frame: %+v, want LOC_LEN_ERR", wc)
	}
	if err := f.Destroy(); err != nil {
		t.Fatalf("destroy flow: %v", err)
	}
	if err := f.Destroy(); !errors.As(err, &ce) || ce.Status != ifc.StatusBadResource {
		t.Errorf("destroy a flow twice: %v, want BAD_RESOURCE", err)
	}
	if err := rx.qp.Destroy(); err != nil {
		t.Fatalf("destroy the QP once its flow is gone: %v", err)
	}
}

// rawBlockSelfLB: a QP created with BlockSelfMcastLB does not get the
// multicast frames its own context sends, and does get another context's.
func rawBlockSelfLB(t *testing.T, s *suite) {
	n, other := newNode(t, s.local), newNode(t, s.local) // two functions of one device
	rx := rawEndOpts(t, n, &epOpts{typ: verbs.QPTypeRaw, blockLB: true})
	createFlow(t, rx, &verbs.FlowAttr{Kind: verbs.FlowSniffer})
	rx.recv(rwr(1, n.mr.SGE(16<<10, 2048)))
	own, theirs := rawEnd(t, n), rawEnd(t, other)
	rawFrame(n.buf, rawGroupMAC, 0x0800, 1, 60, 1)
	rawSend(t, own, 1, 0, 60) // blocked
	want := rawFrame(other.buf, rawGroupMAC, 0x0800, 2, 61, 2)
	rawSend(t, theirs, 2, 0, 61)
	Check(t, "another context's frame", Poll1(t, rx.rcq), Want{WRID: 1, Op: verbs.WCRecv, Len: 61, QPN: rx.qp.QPN()})
	sameBytes(t, "received frame", n.buf[16<<10:16<<10+61], want)
}
