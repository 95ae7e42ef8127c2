package hcatest

import (
	"testing"
	"time"

	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
)

// The integrity scenario builder: the steps the Integrity and
// IntegrityErrors scenarios are written in. A scenario is a short
// sequence of them on two connected integrity endpoints:
//
//	h, g, he, ge := s.sigPair(t)       // two sides with integrity QPs
//	mr := he.sigMR(4, 4)               // an integrity MR owned by he
//	mr.reg(h.sg(0, n), nil, attrs)     // map, attributes, key, REG_MR_INTEGRITY
//	he.capsule(ge, 1)                  // "the key is usable"
//	ge.run("READ", read(2, g.mr.SGE(0, w), 0, mr.RKey), w) // post, expect its CQE
//	sameBytes(t, "wire", g.buf[:w], want) // expect memory
//	mr.status("after the READ", nil)   // expect CheckMRStatus (t10dif's verdict)
//
// Setup: sigPair, sigLink, ep.sigMR, sigMR.on (another endpoint's CQ).
// Registration: sigMR.reg (the ULPs' unsignaled recipe, with its checks),
// regWait (signaled, waits), postReg, mapPI, inv. Posts: ep.run (a send WR
// and its successful CQE), ep.recvOK, ep.capsule, localInv, node.sg,
// sigMR.wireSGE. Status: sigMR.status (no error, or t10dif's), wantErr
// (a SigErr, polled for). Every step fails the nodes' t as the
// hand-written sequence did.

// sigAccess is the access a host gives its integrity MR (as the NVMe
// host does).
const sigAccess = verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite

// rcpCmdOff is where each node keeps its command capsules (away from the
// data regions the scenarios use).
const rcpCmdOff = bufSize - 256

// sigLink creates a connected pair of integrity-enabled endpoints between
// nodes a and b.
func sigLink(t testing.TB, a, b *node) (*ep, *ep) {
	t.Helper()
	ea, eb := a.ep(&epOpts{integrity: true}), b.ep(&epOpts{integrity: true})
	connect(t, ea, eb, nil, nil)
	return ea, eb
}

// sigPair opens the two sides of a scenario (the host, local, and the
// peer or target, remote) with connected integrity-enabled endpoints.
func (s *suite) sigPair(t testing.TB) (h, g *node, he, ge *ep) {
	t.Helper()
	h, g = s.pair(t)
	he, ge = sigLink(t, h, g)
	return h, g, he, ge
}

// sg is one entry of size bytes at offset off of the node's main MR, as
// a list.
func (n *node) sg(off, size int) []verbs.SGE { return []verbs.SGE{n.mr.SGE(off, size)} }

// wcOp is the completion opcode of each send WR opcode the builder runs.
var wcOp = map[verbs.WROpcode]verbs.WCOpcode{
	verbs.WRRDMAWrite: verbs.WCRDMAWrite, verbs.WRRDMARead: verbs.WCRDMARead,
	verbs.WRSend: verbs.WCSend, verbs.WRSendWithInv: verbs.WCSend, verbs.WRLocalInv: verbs.WCLocalInv,
	verbs.WRRegMRIntegrity: verbs.WCRegMR, verbs.WRRegSigMR: verbs.WCRegMR,
}

// run posts wr on e and checks that the next completion of e's send CQ
// is wr's success: its id, the opcode that completes wr and n bytes
// (AnyLen: not checked).
func (e *ep) run(what string, wr verbs.SendWR, n int) {
	e.n.t.Helper()
	op, ok := wcOp[wr.Opcode]
	if !ok {
		e.n.t.Fatalf("%s: run does not know the completion of WR opcode %d", what, wr.Opcode)
	}
	e.post(wr)
	Check(e.n.t, what, Poll1(e.n.t, e.scq), Want{WRID: wr.WRID, Op: op, Len: n})
}

// recvOK checks that the next completion of e's receive CQ is the
// successful receive of wrid with n bytes.
func (e *ep) recvOK(what string, wrid uint64, n int) {
	e.n.t.Helper()
	Check(e.n.t, what, Poll1(e.n.t, e.rcq), Want{WRID: wrid, Op: verbs.WCRecv, Len: n})
}

// localInv returns a signaled LOCAL_INV of key.
func localInv(id uint64, key uint32) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: key}
}

// capsule sends a 64-byte command capsule from e to the other side's
// endpoint to (signaled SEND into a posted receive) and checks both
// completions and the bytes: after a host's REG_MR_INTEGRITY it tells the
// target that the key is usable, after a target's RDMA it is the
// response.
func (e *ep) capsule(to *ep, id uint64) {
	t := e.n.t
	t.Helper()
	fill(e.n.buf[rcpCmdOff:rcpCmdOff+64], byte(id))
	clear(to.n.buf[rcpCmdOff+64 : rcpCmdOff+128])
	to.recv(rwr(id, to.n.mr.SGE(rcpCmdOff+64, 64)))
	e.post(send(id, e.n.mr.SGE(rcpCmdOff, 64)))
	Check(t, "command capsule send", Poll1(t, e.scq), Want{WRID: id, Op: verbs.WCSend, Len: AnyLen, QPN: e.qp.QPN()})
	Check(t, "command capsule receive", Poll1(t, to.rcq), Want{WRID: id, Op: verbs.WCRecv, Len: 64, QPN: to.qp.QPN()})
	sameBytes(t, "command capsule", to.n.buf[rcpCmdOff+64:rcpCmdOff+128], e.n.buf[rcpCmdOff:rcpCmdOff+64])
}

// sigMR is an integrity (or signature) MR with its owner: the endpoint
// whose QP registers and invalidates it and whose send CQ carries the
// signature error CQEs of its accesses.
type sigMR struct {
	*verbs.MR
	e *ep
}

// sigMR allocates an integrity MR in the node's PD, owned by e.
func (e *ep) sigMR(maxData, maxMeta int) *sigMR {
	e.n.t.Helper()
	mr, err := e.n.pd.AllocMRIntegrity(maxData, maxMeta)
	if err != nil {
		e.n.t.Fatalf("alloc integrity mr %d+%d: %v", maxData, maxMeta, err)
	}
	return &sigMR{MR: mr, e: e}
}

// on returns the MR as seen by another endpoint: its signature errors
// are looked for on e's send CQ.
func (m *sigMR) on(e *ep) *sigMR { return &sigMR{MR: m.MR, e: e} }

// wireSGE is n bytes at wire offset off through the MR's key as an lkey.
func (m *sigMR) wireSGE(off, n int) verbs.SGE {
	return verbs.SGE{Addr: uint64(off), Length: uint32(n), LKey: m.LKey}
}

// mapPI maps data and meta into the MR and sets its attributes.
func (m *sigMR) mapPI(data, meta []verbs.SGE, a verbs.SigAttrs) {
	m.e.n.t.Helper()
	if err := m.MapSGPI(data, meta); err != nil {
		m.e.n.t.Fatalf("map sg pi (%d data, %d meta entries): %v", len(data), len(meta), err)
	}
	m.SetSigAttrs(a)
}

// reg is the ULP recipe: it maps data and meta, sets the attributes,
// bumps the key and posts an unsignaled REG_MR_INTEGRITY (the WR that
// follows on the owner is ordered after it), and returns the new key. It
// checks what MapSGPI promises: a zero-based MR of the memory-domain
// length, MetaLength the metadata bytes (kept by SetSigAttrs).
func (m *sigMR) reg(data, meta []verbs.SGE, a verbs.SigAttrs) uint32 {
	t := m.e.n.t
	t.Helper()
	if err := m.MapSGPI(data, meta); err != nil {
		t.Fatalf("map sg pi (%d data, %d meta entries): %v", len(data), len(meta), err)
	}
	dl, ml := sgeSum(data), sgeSum(meta)
	if m.Addr != 0 || m.Len != dl+ml {
		t.Errorf("mapped integrity MR at %#x+%d, want zero-based with %d+%d bytes", m.Addr, m.Len, dl, ml)
	}
	m.SetSigAttrs(a)
	got := m.SigAttrs()
	if got.MetaLength != uint32(ml) {
		t.Errorf("MetaLength %d after MapSGPI and SetSigAttrs, want %d", got.MetaLength, ml)
	}
	if got.CheckMask != a.CheckMask || got.Mem != a.Mem || got.Wire != a.Wire {
		t.Errorf("SigAttrs %+v, want %+v", got, a)
	}
	old := m.RKey
	m.IncKey()
	if m.RKey == old || m.RKey>>8 != old>>8 || m.LKey != m.RKey {
		t.Errorf("IncKey: %#x → lkey %#x rkey %#x; want the same index with another variant", old, m.LKey, m.RKey)
	}
	m.e.post(verbs.SendWR{WRID: 0xAE6, Opcode: verbs.WRRegMRIntegrity, MR: m.MR, Access: sigAccess})
	return m.RKey
}

// sgeSum is the byte count of a list of entries.
func sgeSum(l []verbs.SGE) uint64 {
	n := uint64(0)
	for _, s := range l {
		n += uint64(s.Length)
	}
	return n
}

// regWait maps data and meta, sets the attributes, bumps the key and
// registers it with a signaled REG_MR_INTEGRITY (one WQE signaled in PA
// mode), waiting for the completion. It returns the new key.
func (m *sigMR) regWait(data, meta []verbs.SGE, a verbs.SigAttrs, wrid uint64) uint32 {
	m.e.n.t.Helper()
	m.mapPI(data, meta, a)
	m.IncKey()
	m.postReg(wrid)
	return m.RKey
}

// postReg posts a signaled REG_MR_INTEGRITY of the MR as it is and waits
// for its successful completion.
func (m *sigMR) postReg(wrid uint64) {
	m.e.n.t.Helper()
	m.e.run("REG_MR_INTEGRITY", verbs.SendWR{WRID: wrid, Opcode: verbs.WRRegMRIntegrity, Flags: verbs.SendSignaled, MR: m.MR, Access: sigAccess}, AnyLen)
}

// inv posts a signaled LOCAL_INV of the MR's key on its owner and checks
// its completion.
func (m *sigMR) inv(id uint64) {
	t := m.e.n.t
	t.Helper()
	m.e.post(localInv(id, m.RKey))
	Check(t, "LOCAL_INV of the signature key", Poll1(t, m.e.scq), Want{WRID: id, Op: verbs.WCLocalInv, Len: AnyLen, QPN: m.e.qp.QPN()})
}

// status polls the owner's send CQ (where the SIG_ERR CQE of an access by
// its QP, or served by it, goes; it yields no work completion) and checks
// the MR status against want (nil: no error), a mismatch as t10dif
// reports it for the same stream. A reported error must be cleared by
// reading it.
func (m *sigMR) status(what string, want *t10dif.Error) {
	t := m.e.n.t
	t.Helper()
	Quiet(t, m.e.scq, quiet, what+": send CQ of the MR owner")
	got, err := m.CheckMRStatus()
	if err != nil {
		t.Fatalf("%s: check mr status: %v", what, err)
	}
	switch {
	case want == nil && got != nil:
		t.Errorf("%s: signature error %v at offset %d (expected %#x, actual %#x, key %#x); want none",
			what, got.Type, got.Offset, got.Expected, got.Actual, got.Key)
	case want != nil && got == nil:
		t.Errorf("%s: no signature error; want %v at block %d (offset %d)", what, want.Type, want.Block, want.ProtectedOffset)
	case want != nil:
		typ := map[t10dif.ErrorType]verbs.SigErrType{t10dif.ErrorGuard: verbs.SigBadGuard,
			t10dif.ErrorRefTag: verbs.SigBadRefTag, t10dif.ErrorAppTag: verbs.SigBadAppTag}[want.Type]
		sameSigErr(t, what, *got, verbs.SigErr{Type: typ, Expected: uint32(want.Expected), Actual: uint32(want.Actual), Offset: want.ProtectedOffset, Key: m.RKey})
		if again, _ := m.CheckMRStatus(); again != nil {
			t.Errorf("%s: the signature error was reported twice: %+v", what, again)
		}
	}
}

// sameSigErr fails the test unless CheckMRStatus reported w. w is in
// t10dif's words (Expected: the value computed or configured, Actual: the
// tuple's); the device reports the mlx5dv_mkey_check man page's, which
// are the other way round (expected: the signature field's, actual:
// calculated from the data).
func sameSigErr(t testing.TB, what string, got, w verbs.SigErr) {
	t.Helper()
	w.Expected, w.Actual = w.Actual, w.Expected
	if got != w {
		t.Errorf("%s: CheckMRStatus = {%v expected %#x actual %#x offset %d key %#x}, want {%v expected %#x actual %#x offset %d key %#x}",
			what, got.Type, got.Expected, got.Actual, got.Offset, got.Key, w.Type, w.Expected, w.Actual, w.Offset, w.Key)
	}
}

// wantErr polls the owner's send CQ, which carries the signature error
// CQE (and must yield no work completion), until CheckMRStatus reports an
// error, compares it with w, and checks that it is reported only once.
func (m *sigMR) wantErr(what string, w verbs.SigErr) {
	t := m.e.n.t
	t.Helper()
	wcs := make([]verbs.WC, 8)
	deadline := time.Now().Add(waitFor)
	for {
		k, err := m.e.scq.Poll(wcs)
		if err != nil {
			t.Fatalf("%s: poll: %v", what, err)
		}
		if k > 0 {
			t.Errorf("%s: the signature error CQ yielded work completions %s", what, FormatWCs(wcs[:k]))
		}
		got, err := m.CheckMRStatus()
		if err != nil {
			t.Fatalf("%s: check mr status: %v", what, err)
		}
		if got != nil {
			sameSigErr(t, what, *got, w)
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: no signature error reported in %v; want %v at offset %d", what, waitFor, w.Type, w.Offset)
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
	if got, err := m.CheckMRStatus(); got != nil || err != nil {
		t.Errorf("%s: a second CheckMRStatus = %+v, %v; want the error cleared", what, got, err)
	}
}
