package hcatest

import (
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
)

var accessScenarios = []scenario{
	{"LocalKeys", localKeyErrors},
	{"RemoteKeys", remoteKeyErrors},
	{"QPAccess", qpAccessErrors},
	{"RecvTooSmall", recvTooSmall},
	{"RecvBadKey", recvBadKey},
	{"AtomicMisaligned", atomicMisaligned},
	{"DeregisteredKey", deregisteredKey},
	{"RegMRAccess", regMRAccess},
	{"RegMRWorkRequestAccess", regMRWorkRequestAccess},
}

// localKeyErrors: a bad lkey fails the WR on the requester with
// LOC_PROT_ERR, and the responder sees nothing.
func localKeyErrors(t *testing.T, s *suite) {
	a, b := s.pair(t)
	pd2 := a.newPD()
	other := a.reg(pd2, a.alloc(4096), allAccess)
	ro := a.reg(a.pd, a.alloc(4096), verbs.AccessRemoteRead) // no local write
	for _, c := range []struct {
		name string
		wr   func(b *node) verbs.SendWR
	}{
		{"WriteBadLKey", func(b *node) verbs.SendWR {
			return write(1, verbs.SGE{Addr: a.mr.Addr, Length: 8, LKey: 0x00FEDC00}, b.mr.Addr, b.mr.RKey)
		}},
		{"SendBadLKey", func(*node) verbs.SendWR { return send(2, verbs.SGE{Addr: a.mr.Addr, Length: 8, LKey: 0x00FEDC00}) }},
		{"LKeyOfAnotherPD", func(b *node) verbs.SendWR { return write(3, other.SGE(0, 8), b.mr.Addr, b.mr.RKey) }},
		{"LKeyStaleVariant", func(b *node) verbs.SendWR {
			return write(4, verbs.SGE{Addr: a.mr.Addr, Length: 8, LKey: variant(a.mr.LKey, 1)}, b.mr.Addr, b.mr.RKey)
		}},
		{"LKeyOutOfRange", func(b *node) verbs.SendWR { return write(5, a.mr.SGE(bufSize-4, 8), b.mr.Addr, b.mr.RKey) }},
		{"LKeyBeforeStart", func(b *node) verbs.SendWR {
			return write(6, verbs.SGE{Addr: a.mr.Addr - 8, Length: 16, LKey: a.mr.LKey}, b.mr.Addr, b.mr.RKey)
		}},
		{"ReadIntoKeyWithoutLocalWrite", func(b *node) verbs.SendWR { return read(7, ro.SGE(0, 8), b.mr.Addr, b.mr.RKey) }},
		{"AtomicIntoKeyWithoutLocalWrite", func(b *node) verbs.SendWR {
			return verbs.SendWR{WRID: 8, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SG: []verbs.SGE{ro.SGE(0, 8)},
				RemoteAddr: b.mr.Addr, RKey: b.mr.RKey, CompareAdd: 1}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := a.in(t), b.in(t)
			ea, eb := link(t, a, b)
			putBE64(b.buf, 0x1234)
			eb.recv(rwr(0xB0, b.mr.SGE(100, 64)))
			wr := c.wr(b)
			ea.post(wr)
			CheckErr(t, "requester", Poll1(t, ea.scq), wr.WRID, verbs.WCLocProtErr, ea.qp.QPN())
			// Nothing reached the responder: its receive is still posted,
			// its QP still works, memory is untouched.
			Quiet(t, eb.rcq, quiet, "responder receive CQ")
			Quiet(t, eb.scq, 0, "responder send CQ")
			if got := be64(b.buf); got != 0x1234 {
				t.Errorf("remote word changed to %#x", got)
			}
		})
	}
}

// remoteKeyErrors: a bad rkey fails the WR with REM_ACCESS_ERR; the
// responder QP goes to error without a completion of its own.
func remoteKeyErrors(t *testing.T, s *suite) {
	a, b := s.pair(t)
	bpd2 := b.newPD()
	other := b.reg(bpd2, b.alloc(4096), allAccess)
	noRW := b.reg(b.pd, b.alloc(4096), verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	noRR := b.reg(b.pd, b.alloc(4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic)
	noAt := b.reg(b.pd, b.alloc(4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	local := b.reg(b.pd, b.alloc(4096), verbs.AccessLocalWrite)
	fa := func(id uint64, raddr uint64, rkey uint32) verbs.SendWR {
		return verbs.SendWR{WRID: id, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, 8)},
			RemoteAddr: raddr, RKey: rkey, CompareAdd: 1}
	}
	for _, c := range []struct {
		name string
		wr   verbs.SendWR
	}{
		{"WriteRKeyOfAnotherPD", write(1, a.mr.SGE(0, 8), other.Addr, other.RKey)},
		{"ReadRKeyOfAnotherPD", read(2, a.mr.SGE(0, 8), other.Addr, other.RKey)},
		{"WriteInvalidRKey", write(3, a.mr.SGE(0, 8), b.mr.Addr, 0x00ABCD00)},
		{"WriteRKeyZero", write(4, a.mr.SGE(0, 8), b.mr.Addr, 0)},
		{"WriteStaleVariant", write(5, a.mr.SGE(0, 8), b.mr.Addr, variant(b.mr.RKey, 1))},
		{"ReadStaleVariant", read(6, a.mr.SGE(0, 8), b.mr.Addr, variant(b.mr.RKey, -1))},
		{"WritePastEnd", write(7, a.mr.SGE(0, 16), b.mr.Addr+bufSize-8, b.mr.RKey)},
		{"WriteBeforeStart", write(8, a.mr.SGE(0, 16), b.mr.Addr-8, b.mr.RKey)},
		{"ReadPastEnd", read(9, a.mr.SGE(0, 16), b.mr.Addr+bufSize, b.mr.RKey)},
		{"AtomicPastEnd", fa(10, b.mr.Addr+bufSize, b.mr.RKey)},
		{"WriteWithoutRemoteWrite", write(11, a.mr.SGE(0, 8), noRW.Addr, noRW.RKey)},
		{"ReadWithoutRemoteRead", read(12, a.mr.SGE(0, 8), noRR.Addr, noRR.RKey)},
		{"AtomicWithoutRemoteAtomic", fa(13, noAt.Addr, noAt.RKey)},
		{"WriteToLocalOnlyMR", write(14, a.mr.SGE(0, 8), local.Addr, local.RKey)},
		{"ReadFromLocalOnlyMR", read(15, a.mr.SGE(0, 8), local.Addr, local.RKey)},
		{"WriteImmBadRKey", verbs.SendWR{WRID: 16, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 5,
			SG: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr, RKey: variant(b.mr.RKey, 3)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := a.in(t), b.in(t)
			ea, eb := link(t, a, b)
			// An operation that consumes a receive gets one (without it,
			// the responder answers RNR before checking the key).
			recv := c.wr.Opcode == verbs.WRRDMAWriteWithImm
			if recv {
				eb.recv(rwr(0xAAAA, b.mr.SGE(0, 64)))
			}
			ea.post(c.wr)
			CheckErr(t, "requester", Poll1(t, ea.scq), c.wr.WRID, verbs.WCRemAccessErr, ea.qp.QPN())
			if recv {
				// Whether the receive completes in error or is flushed
				// is not specified; it must not succeed.
				if wc := Poll1(t, eb.rcq); wc.WRID != 0xAAAA || wc.Status == verbs.WCSuccess {
					t.Errorf("the receive the failed operation would have consumed: %s, want an error", FormatWC(wc))
				}
			}
			brokenResponder(t, eb, b.mr.SGE(0, 64))
		})
	}
}

// qpAccessErrors: remote access the responder QP does not enable
// (Connect's Access) fails with REM_ACCESS_ERR even through a key that
// allows it; what the QP enables works.
func qpAccessErrors(t *testing.T, s *suite) {
	a, b := s.pair(t)
	fill(b.buf[:64], 0x61)
	fa := verbs.SendWR{WRID: 3, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, 8)},
		RemoteAddr: b.mr.Addr + 64, RKey: b.mr.RKey, CompareAdd: 1}
	ok := map[verbs.WROpcode]verbs.SendWR{
		verbs.WRRDMAWrite:      write(1, a.mr.SGE(0, 8), b.mr.Addr+128, b.mr.RKey),
		verbs.WRRDMARead:       read(2, a.mr.SGE(0, 8), b.mr.Addr, b.mr.RKey),
		verbs.WRAtomicFetchAdd: fa,
	}
	wantOp := map[verbs.WROpcode]verbs.WCOpcode{verbs.WRRDMAWrite: verbs.WCRDMAWrite, verbs.WRRDMARead: verbs.WCRDMARead, verbs.WRAtomicFetchAdd: verbs.WCFetchAdd}
	wantLen := map[verbs.WROpcode]int{verbs.WRRDMAWrite: AnyLen, verbs.WRRDMARead: 8, verbs.WRAtomicFetchAdd: 8}
	for _, c := range []struct {
		name    string
		access  verbs.Access
		allowed []verbs.WROpcode
		denied  verbs.WROpcode
	}{
		{"NoRemoteWrite", verbs.AccessRemoteRead | verbs.AccessRemoteAtomic, []verbs.WROpcode{verbs.WRRDMARead, verbs.WRAtomicFetchAdd}, verbs.WRRDMAWrite},
		{"NoRemoteRead", verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic, []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRAtomicFetchAdd}, verbs.WRRDMARead},
		{"NoRemoteAtomic", verbs.AccessRemoteWrite | verbs.AccessRemoteRead, []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead}, verbs.WRAtomicFetchAdd},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := a.in(t), b.in(t)
			ea, eb := a.ep(nil), b.ep(nil)
			connect(t, ea, eb, nil, &verbs.ConnectOptions{Access: c.access})
			for _, op := range c.allowed {
				ea.post(ok[op])
				Check(t, "allowed operation", Poll1(t, ea.scq), Want{WRID: ok[op].WRID, Op: wantOp[op], Len: wantLen[op]})
			}
			wr := ok[c.denied]
			ea.post(wr)
			CheckErr(t, "denied operation", Poll1(t, ea.scq), wr.WRID, verbs.WCRemAccessErr, ea.qp.QPN())
			brokenResponder(t, eb, b.mr.SGE(0, 64))
		})
	}
	// SEND needs no remote access right.
	t.Run("SendWithoutRights", func(t *testing.T) {
		a, b := a.in(t), b.in(t)
		ea, eb := a.ep(nil), b.ep(nil)
		connect(t, ea, eb, nil, &verbs.ConnectOptions{Access: verbs.AccessRemoteRead})
		copy(a.buf, "ok")
		eb.recv(rwr(1, b.mr.SGE(1000, 8)))
		ea.post(send(2, a.mr.SGE(0, 2)))
		Check(t, "send", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCSend, Len: AnyLen})
		Check(t, "recv", Poll1(t, eb.rcq), Want{WRID: 1, Op: verbs.WCRecv, Len: 2})
	})
}

// recvTooSmall: a SEND larger than the receive fails on both sides:
// REM_INV_REQ_ERR at the requester, LOC_LEN_ERR for the receive.
func recvTooSmall(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	// Exactly the receive's size fits.
	fill(a.buf[:17], 0x21)
	eb.recv(rwr(3, b.mr.SGE(0, 8), b.mr.SGE(100, 8)))
	ea.post(send(4, a.mr.SGE(0, 16)))
	Check(t, "send of exactly the receive's size", Poll1(t, ea.scq), Want{WRID: 4, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "its receive", Poll1(t, eb.rcq), Want{WRID: 3, Op: verbs.WCRecv, Len: 16})
	sameBytes(t, "first piece", b.buf[:8], a.buf[:8])
	sameBytes(t, "second piece", b.buf[100:108], a.buf[8:16])
	// One byte more does not.
	eb.recv(rwr(1, b.mr.SGE(0, 8), b.mr.SGE(100, 8)))
	ea.post(send(2, a.mr.SGE(0, 17)))
	CheckErr(t, "requester", Poll1(t, ea.scq), 2, verbs.WCRemInvReqErr, ea.qp.QPN())
	CheckErr(t, "receive", Poll1(t, eb.rcq), 1, verbs.WCLocLenErr, eb.qp.QPN())
	brokenResponder(t, eb, b.mr.SGE(0, 64))
}

// recvBadKey: a receive whose buffer the responder cannot write fails
// with LOC_PROT_ERR; the requester gets REM_OP_ERR.
func recvBadKey(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ro := b.reg(b.pd, b.alloc(4096), verbs.AccessRemoteRead)
	for _, c := range []struct {
		name string
		sge  verbs.SGE
	}{
		{"BadLKey", verbs.SGE{Addr: b.mr.Addr, Length: 64, LKey: 0x00FEDC00}},
		{"NoLocalWrite", ro.SGE(0, 64)},
		{"OutOfRange", b.mr.SGE(bufSize-8, 64)},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := a.in(t), b.in(t)
			ea, eb := link(t, a, b)
			eb.recv(rwr(1, c.sge))
			ea.post(send(2, a.mr.SGE(0, 32)))
			CheckErr(t, "requester", Poll1(t, ea.scq), 2, verbs.WCRemOpErr, ea.qp.QPN())
			CheckErr(t, "receive", Poll1(t, eb.rcq), 1, verbs.WCLocProtErr, eb.qp.QPN())
			brokenResponder(t, eb, b.mr.SGE(0, 64))
		})
	}
}

// atomicMisaligned: an atomic on an address that is not 8-byte aligned is
// an invalid request.
func atomicMisaligned(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	putBE64(b.buf[8:], 5)
	ea.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicCmpSwp, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, 8)},
		RemoteAddr: b.mr.Addr + 12, RKey: b.mr.RKey, CompareAdd: 0, Swap: 1})
	CheckErr(t, "requester", Poll1(t, ea.scq), 1, verbs.WCRemInvReqErr, ea.qp.QPN())
	brokenResponder(t, eb, b.mr.SGE(0, 64))
	if be64(b.buf[8:]) != 5 || be64(b.buf[16:]) != 0 {
		t.Errorf("memory changed by a misaligned atomic")
	}
}

// deregisteredKey: after Dereg, the MR's keys give no access, even once a
// new MR is registered over the same memory.
func deregisteredKey(t *testing.T, s *suite) {
	a, b := s.pair(t)
	buf := b.alloc(4096)
	old := b.reg(b.pd, buf, allAccess)
	lkey, rkey, addr := old.LKey, old.RKey, old.Addr
	if err := old.Dereg(); err != nil {
		t.Fatalf("dereg: %v", err)
	}
	for i := range 3 {
		b.reg(b.pd, buf, allAccess)
		xa, xb := link(t, a, b)
		id := uint64(10 + i)
		xa.post(write(id, a.mr.SGE(0, 8), addr, rkey))
		CheckErr(t, "write through a deregistered rkey", Poll1(t, xa.scq), id, verbs.WCRemAccessErr, xa.qp.QPN())
		brokenResponder(t, xb, b.mr.SGE(0, 8))
	}
	xa, xb := link(t, b, a)
	xa.post(write(20, verbs.SGE{Addr: addr, Length: 8, LKey: lkey}, a.mr.Addr, a.mr.RKey))
	CheckErr(t, "write from a deregistered lkey", Poll1(t, xa.scq), 20, verbs.WCLocProtErr, xa.qp.QPN())
	Quiet(t, xb.rcq, quiet, "peer receive CQ")
}

// regMRAccess: remote write or atomic without local write is refused.
func regMRAccess(t *testing.T, s *suite) {
	n := newNode(t, s.local)
	buf := n.alloc(4096)
	for _, acc := range []verbs.Access{
		verbs.AccessRemoteWrite,
		verbs.AccessRemoteAtomic,
		verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
		verbs.AccessRemoteAtomic | verbs.AccessRemoteRead,
	} {
		if mr, err := n.pd.RegMR(buf, acc); err == nil {
			t.Errorf("RegMR with access %#x: key %#x, want an error", acc, mr.LKey)
		}
	}
	for _, acc := range []verbs.Access{0, verbs.AccessRemoteRead, verbs.AccessLocalWrite, allAccess} {
		if _, err := n.pd.RegMR(buf, acc); err != nil {
			t.Errorf("RegMR with access %#x: %v", acc, err)
		}
	}
}

// regMRWorkRequestAccess: a REG_MR work request asking for remote write
// without local write is refused when posted.
func regMRWorkRequestAccess(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, _ := link(t, a, b)
	fmr, err := a.pd.AllocMR(verbs.MRTypeMemReg, 1)
	if err != nil {
		t.Fatalf("alloc mr: %v", err)
	}
	if _, err := fmr.MapSG([]verbs.SGE{a.mr.SGE(0, 4096)}); err != nil {
		t.Fatalf("map sg: %v", err)
	}
	fmr.IncKey()
	postErr(t, "REG_MR with remote write only", ea.qp,
		[]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMR, Flags: verbs.SendSignaled, MR: fmr, Key: fmr.RKey, Access: verbs.AccessRemoteWrite}}, 0, verbs.ErrInvalid)
	Quiet(t, ea.scq, quiet, "send CQ")
}
