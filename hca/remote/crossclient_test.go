package remote_test

import (
	"github.com/hcasim/hcasim/hca/ifc"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/psv"
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/umr"
)

// Isolation between functions, the rest of issue 14: a client naming
// another client's object numbers (CQNs, PSV indices, mkey indices) or
// memory in its own commands and WQEs. Object numbers other than QPNs are
// per function, so another client's number is, for the namer, a number
// it does not have (BAD_RESOURCE for a command, an error CQE for a WQE)
// or one of its own objects: never the other client's. Each test gives A
// more objects than B, so that A's highest numbers are not B's, tries
// them from B, and then checks that A's objects were not touched and
// still work.

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// crossPair is two clients of one daemon.
type crossPair struct {
	path string
	a, b *node
}

func newCrossPair(t *testing.T) *crossPair {
	t.Helper()
	dev := hca.New(hca.Options{TimeScale: 4})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	return &crossPair{path: path, a: newNode(t, dial(t, path), 1<<16, allAccess), b: newNode(t, dial(t, path), 1<<16, allAccess)}
}

// command runs a raw command mailbox on ctx's function.
func command(ctx *verbs.Context, in ifc.In) ifc.Out { return ifc.Out(ctx.Function().Command(in)) }

// loopback returns an endpoint of n whose QP is connected to itself.
func loopback(t testing.TB, n *node, integrity bool) *endpoint {
	t.Helper()
	e := &endpoint{}
	var err error
	e.scq, err = n.ctx.CreateCQ(64, nil)
	require.NoError(t, err)
	e.rcq, err = n.ctx.CreateCQ(64, nil)
	require.NoError(t, err)
	e.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, Integrity: integrity,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
	require.NoError(t, err)
	require.NoError(t, e.qp.Connect(e.qp.Info(), &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}))
	return e
}

// writeWorks checks that a WRITE through e into key at addr succeeds and lands.
func writeWorks(t testing.TB, what string, e *endpoint, src *node, addr uint64, key uint32, dst []byte) {
	t.Helper()
	copy(src.buf, what)
	post(t, e, write(77, src.mr.SGE(0, len(what)), addr, key))
	wc := hcatest.Poll1(t, e.scq)
	require.Equal(t, verbs.WCSuccess, wc.Status, "%s: %+v", what, wc)
	require.Equal(t, what, string(dst[:len(what)]), what)
}

// TestCrossClientCQN: CREATE_QP with another client's CQ numbers fails
// with BAD_RESOURCE and takes no reference on them (the other client can
// still destroy them); DESTROY_CQ of another client's CQN fails the same
// way; and the events of A's CQs and QPs reach A's connection only.
func TestCrossClientCQN(t *testing.T) {
	p := newCrossPair(t)
	a, b := p.a, p.b
	ach := a.ctx.NewCompChannel(4)
	var acqs []*verbs.CQ
	for range 6 {
		c, err := a.ctx.CreateCQ(16, ach)
		require.NoError(t, err)
		acqs = append(acqs, c)
	}
	bcq, err := b.ctx.CreateCQ(16, nil)
	require.NoError(t, err)
	foreign := acqs[len(acqs)-1].Handle()
	require.Greater(t, foreign, bcq.Handle(), "A's last CQN is one B does not have")

	qpIn := func(scq, rcq uint32) ifc.In {
		in := ifc.NewIn(ifc.CmdCreateQP, ifc.QPInSize).Put32(ifc.QPInPD, b.pd.Handle()).Put32(ifc.QPInSendCQ, scq).Put32(ifc.QPInRecvCQ, rcq)
		in.Put8(ifc.QPInLogSQ, 4).Put8(ifc.QPInLogRQ, 4).Put8(ifc.QPInLogStride, 5)
		return in.Put64(ifc.QPInSQ, b.mr.Addr).Put64(ifc.QPInRQ, b.mr.Addr+0x4000).Put64(ifc.QPInDBRec, b.mr.Addr+0x8000)
	}
	for _, c := range []struct {
		name     string
		scq, rcq uint32
	}{{"send CQ", foreign, bcq.Handle()}, {"receive CQ", bcq.Handle(), foreign}, {"both CQs", foreign, foreign}} {
		out := command(b.ctx, qpIn(c.scq, c.rcq))
		assert.Equal(t, ifc.StatusBadResource, out.Status(), "B's CREATE_QP with A's CQN as its %s: %v", c.name, out.Err(ifc.CmdCreateQP))
	}
	out := command(b.ctx, ifc.NewIn(ifc.CmdDestroyCQ, ifc.CQNOff+4).Put32(ifc.CQNOff, foreign))
	assert.Equal(t, ifc.StatusBadResource, out.Status(), "B's DESTROY_CQ of A's CQN")
	// B's own CQ works for B's QP: the refusals were about the number.
	out = command(b.ctx, qpIn(bcq.Handle(), bcq.Handle()))
	require.Equal(t, ifc.StatusOK, out.Status(), "B's CREATE_QP with its own CQ: %v", out.Err(ifc.CmdCreateQP))
	require.Equal(t, ifc.StatusOK, command(b.ctx, ifc.NewIn(ifc.CmdDestroyQP, ifc.QPNOff+4).Put32(ifc.QPNOff, out.U32(ifc.QPNOff))).Status())

	// A's CQ holds no QP of B's: A destroys it at once.
	require.NoError(t, acqs[len(acqs)-1].Destroy(), "A's CQ B named")
	// A's other CQs still complete A's work, and their events are A's.
	bch := b.ctx.NewCompChannel(4)
	ebQuiet := b.ep(t, bch)
	ebQuiet.scq.ReqNotify(false)
	ea := a.ep(t, ach)
	require.NoError(t, ea.qp.Connect(ea.qp.Info(), nil))
	ea.scq.ReqNotify(false)
	writeWorks(t, "A's CQ", ea, a, a.mr.Addr+1024, a.mr.RKey, a.buf[1024:])
	select {
	case got := <-ach.C:
		assert.Equal(t, ea.scq.Handle(), got.Handle(), "A's event")
	case <-time.After(5 * time.Second):
		t.Fatal("A's armed CQ did not notify A")
	}
	select {
	case got := <-bch.C:
		t.Fatalf("B's channel got an event for CQ %d while only A's CQ completed", got.Handle())
	case <-time.After(30 * time.Millisecond):
	}
}

// psvCmd runs CREATE_PSV for n PSVs in pd on ctx and returns their indices.
func createPSVs(t testing.TB, ctx *verbs.Context, pd uint32, n int) []uint32 {
	t.Helper()
	out := command(ctx, ifc.NewIn(ifc.CmdCreatePSV, ifc.PSVInPDNum+4).Put32(ifc.PSVInPDNum, uint32(n)<<28|pd))
	require.Equal(t, ifc.StatusOK, out.Status(), "CREATE_PSV: %v", out.Err(ifc.CmdCreatePSV))
	var idx []uint32
	for i := range n {
		idx = append(idx, out.U32(ifc.PSVOutIdx+4*i))
	}
	return idx
}

// setPSV posts a SET_PSV WQE for index on e.
func setPSV(t testing.TB, e *endpoint, index uint32, wrid uint64) {
	t.Helper()
	w := make([]byte, sq.WQEBBSize)
	sq.CtrlSeg(w).Encode(&sq.CtrlFields{WQEIndex: e.qp.CurPost(), Opcode: sq.OpSetPSV, QPN: e.qp.QPN(), DS: 2, CE: sq.CECQUpdate})
	psv.SetPSVSeg(w[sq.CtrlSegSize:]).Encode(&psv.SetPSVFields{Index: index, Guard: 0x1234, AppTag: 0x5678, RefTag: 9})
	require.NoError(t, e.qp.PostRawWQE(w[:32], wrid))
}

// TestCrossClientPSV: SET_PSV on another client's PSV index fails the
// WQE with a local protection error, DESTROY_PSV of it fails with
// BAD_RESOURCE, and A's PSV is still A's: A sets and destroys it.
func TestCrossClientPSV(t *testing.T) {
	p := newCrossPair(t)
	a, b := p.a, p.b
	apsv := append(createPSVs(t, a.ctx, a.pd.Handle(), 4), createPSVs(t, a.ctx, a.pd.Handle(), 4)...)
	bpsv := createPSVs(t, b.ctx, b.pd.Handle(), 1)
	foreign := apsv[len(apsv)-1]
	require.Greater(t, foreign, bpsv[0])

	eb := loopback(t, b, true)
	setPSV(t, eb, foreign, 1)
	wc := hcatest.Poll1(t, eb.scq)
	assert.Equal(t, verbs.WCLocProtErr, wc.Status, "B's SET_PSV on A's PSV index: %+v", wc)
	out := command(b.ctx, ifc.NewIn(ifc.CmdDestroyPSV, ifc.PSVIdxOff+4).Put32(ifc.PSVIdxOff, foreign))
	assert.Equal(t, ifc.StatusBadResource, out.Status(), "B's DESTROY_PSV of A's PSV")
	// B's own PSV in B's PD: set; a PSV index that B has but in another of
	// its PDs is refused too (the PD rule that keeps A's out).
	eb = loopback(t, b, true)
	setPSV(t, eb, bpsv[0], 2)
	require.Equal(t, verbs.WCSuccess, hcatest.Poll1(t, eb.scq).Status, "B's SET_PSV on its own PSV")
	pd2, err := b.ctx.AllocPD()
	require.NoError(t, err)
	other := createPSVs(t, b.ctx, pd2.Handle(), 1)[0]
	setPSV(t, eb, other, 3)
	assert.Equal(t, verbs.WCLocProtErr, hcatest.Poll1(t, eb.scq).Status, "B's SET_PSV on a PSV of another PD")

	ea := loopback(t, a, true)
	setPSV(t, ea, foreign, 4)
	require.Equal(t, verbs.WCSuccess, hcatest.Poll1(t, ea.scq).Status, "A's SET_PSV on its PSV after B's attempts")
	for _, i := range apsv {
		out := command(a.ctx, ifc.NewIn(ifc.CmdDestroyPSV, ifc.PSVIdxOff+4).Put32(ifc.PSVIdxOff, i))
		require.Equal(t, ifc.StatusOK, out.Status(), "A destroys its PSV %d: %v", i, out.Err(ifc.CmdDestroyPSV))
	}
}

// klmOver builds a CREATE_MKEY input: a KLM key in pd whose one entry is
// {n bytes of key at va}, with local and remote read and write, variant
// 0x24.
func klmOver(pd uint32, key uint32, va uint64, n int) ifc.In {
	xlt := make([]byte, klm.KLMSize)
	klm.KLM(xlt).Encode(&klm.KLMFields{ByteCount: uint32(n), Key: klm.Key(key), VA: va})
	in := ifc.NewIn(ifc.CmdCreateMkey, ifc.MkeyInXLT+len(xlt))
	umr.MkeySeg(in[ifc.MkeyInCtx:ifc.MkeyInXLT]).Encode(&umr.MkeyFields{
		Mode: klm.ModeKLM, Access: klm.LocalRead | klm.LocalWrite | klm.RemoteRead | klm.RemoteWrite, QPN: 0xFFFFFF, Variant: 0x24,
		PD: pd, Len: uint64(n), XLTOctowords: 1,
	})
	copy(in[ifc.MkeyInXLT:], xlt)
	return in
}

// moreMRs registers k more MRs on n, filled with fill, and returns the last.
func moreMRs(t testing.TB, n *node, k int, fill byte) *verbs.MR {
	t.Helper()
	var mr *verbs.MR
	for range k {
		buf, err := n.ctx.Alloc(1 << 14)
		require.NoError(t, err)
		for i := range buf {
			buf[i] = fill
		}
		mr, err = n.pd.RegMR(buf, allAccess)
		require.NoError(t, err)
	}
	return mr
}

// TestCrossClientKLM: an indirect (KLM) key of B's whose entry names A's
// lkey resolves that key in B's table, where it does not exist: as an
// lkey it fails the WQE with a local protection error, as an rkey the
// request with a remote access error; A's memory is untouched and A's key
// keeps working for A.
func TestCrossClientKLM(t *testing.T) {
	p := newCrossPair(t)
	a, b := p.a, p.b
	amr := moreMRs(t, a, 6, 0xAA)
	require.Greater(t, klm.Key(amr.LKey).Index(), klm.Key(b.mr.LKey).Index(), "A's key index is not one of B's")

	out := command(b.ctx, klmOver(b.pd.Handle(), amr.LKey, amr.Addr, 4096))
	if out.Status() != ifc.StatusOK {
		// Refusing it at creation would do as well.
		t.Logf("CREATE_MKEY with A's key in a KLM entry refused: %v", out.Err(ifc.CmdCreateMkey))
	} else {
		key := uint32(klm.MakeKey(out.U32(ifc.MkeyOutIdx), 0x24))
		// As an lkey: a WRITE out of A's memory, a READ into it.
		eb := loopback(t, b, false)
		post(t, eb, write(1, verbs.SGE{Addr: 0, Length: 64, LKey: key}, b.mr.Addr, b.mr.RKey))
		assert.Equal(t, verbs.WCLocProtErr, hcatest.Poll1(t, eb.scq).Status, "B's WRITE from a KLM entry naming A's lkey")
		eb = loopback(t, b, false)
		post(t, eb, read(2, verbs.SGE{Addr: 0, Length: 64, LKey: key}, b.mr.Addr, b.mr.RKey))
		assert.Equal(t, verbs.WCLocProtErr, hcatest.Poll1(t, eb.scq).Status, "B's READ into a KLM entry naming A's lkey")
		// As an rkey, at B's own responder.
		eb, eb2 := b.ep(t, nil), b.ep(t, nil)
		connectEPs(t, eb, eb2, nil, nil)
		post(t, eb, write(3, b.mr.SGE(0, 64), 0, key))
		assert.Equal(t, verbs.WCRemAccessErr, hcatest.Poll1(t, eb.scq).Status, "B's WRITE to a KLM key naming A's key")
	}
	for i, x := range amr.Buf {
		require.Equal(t, byte(0xAA), x, "A's memory at %d", i)
	}
	// A's key, in a KLM key of A's, works for A.
	out = command(a.ctx, klmOver(a.pd.Handle(), amr.LKey, amr.Addr, 4096))
	require.Equal(t, ifc.StatusOK, out.Status(), "%v", out.Err(ifc.CmdCreateMkey))
	ea := loopback(t, a, false)
	writeWorks(t, "through A's own KLM key", ea, a, 0, uint32(klm.MakeKey(out.U32(ifc.MkeyOutIdx), 0x24)), amr.Buf)
}

// fastReg registers buf of n (in n's address space) in a fast-registration
// MR with REG_MR on e, and returns the MR.
func fastReg(t testing.TB, n *node, e *endpoint, sge verbs.SGE) *verbs.MR {
	t.Helper()
	mr, err := n.pd.AllocMR(verbs.MRTypeMemReg, 8)
	require.NoError(t, err)
	_, err = mr.MapSG([]verbs.SGE{sge})
	require.NoError(t, err)
	mr.IncKey()
	post(t, e, verbs.SendWR{WRID: 50, Opcode: verbs.WRRegMR, Flags: verbs.SendSignaled, MR: mr, Key: mr.RKey,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead})
	require.Equal(t, verbs.WCSuccess, hcatest.Poll1(t, e.scq).Status, "REG_MR")
	return mr
}

// TestCrossClientInvalidate: LOCAL_INV of another client's rkey fails
// the WQE with a local protection error (the key is not in the poster's
// table); SEND_WITH_INV of it, to one's own QP, fails at that responder
// (REM_OP_ERR for the sender, LOC_PROT_ERR for the receive), and to a QP
// of A's that is connected elsewhere is dropped (RETRY_EXC_ERR). A's key
// stays valid: A's peer writes through it after each.
func TestCrossClientInvalidate(t *testing.T) {
	p := newCrossPair(t)
	a, b := p.a, p.b
	moreMRs(t, a, 6, 0)
	ea, ea2 := a.ep(t, nil), a.ep(t, nil)
	connectEPs(t, ea, ea2, nil, nil)
	amr := fastReg(t, a, ea, a.mr.SGE(0, 4096))
	require.Greater(t, klm.Key(amr.RKey).Index(), klm.Key(b.mr.LKey).Index())
	aStill := func(what string) {
		t.Helper()
		writeWorks(t, "A's key after "+what, ea2, a, amr.Addr+2048, amr.RKey, a.buf[2048:])
	}

	eb := loopback(t, b, false)
	post(t, eb, verbs.SendWR{WRID: 1, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: amr.RKey})
	assert.Equal(t, verbs.WCLocProtErr, hcatest.Poll1(t, eb.scq).Status, "B's LOCAL_INV of A's rkey")
	aStill("B's LOCAL_INV")

	eb, eb2 := b.ep(t, nil), b.ep(t, nil)
	connectEPs(t, eb, eb2, nil, nil)
	postRecv(t, eb2, verbs.RecvWR{WRID: 10, SG: []verbs.SGE{b.mr.SGE(4096, 64)}})
	post(t, eb, verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, SG: []verbs.SGE{b.mr.SGE(0, 8)}, InvalidateRKey: amr.RKey})
	assert.Equal(t, verbs.WCRemOpErr, hcatest.Poll1(t, eb.scq).Status, "B's SEND_WITH_INV of A's rkey to its own QP")
	assert.Equal(t, verbs.WCLocProtErr, hcatest.Poll1(t, eb2.rcq).Status, "the receive of B's SEND_WITH_INV of A's rkey")
	aStill("B's SEND_WITH_INV to its own QP")

	// Aimed at A's QP, which is connected to A's other QP: dropped.
	postRecv(t, ea, verbs.RecvWR{WRID: 11, SG: []verbs.SGE{a.mr.SGE(8192, 64)}})
	eb = b.ep(t, nil)
	require.NoError(t, eb.qp.Connect(ea.qp.Info(), &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}))
	post(t, eb, verbs.SendWR{WRID: 3, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, SG: []verbs.SGE{b.mr.SGE(0, 8)}, InvalidateRKey: amr.RKey})
	assert.Equal(t, verbs.WCRetryExcErr, hcatest.PollWithin(t, eb.scq, 1, 20*time.Second)[0].Status, "B's SEND_WITH_INV aimed at A's connected QP")
	hcatest.Quiet(t, ea.rcq, 10*time.Millisecond, "A's receive queue")
	aStill("B's SEND_WITH_INV to A's QP")
	require.Equal(t, verbs.StateRTS, ea.qp.State(), "A's QP")
}

// TestCrossClientDoorbellRecords: CREATE_CQ and CREATE_QP with a doorbell
// record (or ring) at an address only A mapped fail with BAD_PARAM, and
// A's memory there is untouched.
func TestCrossClientDoorbellRecords(t *testing.T) {
	p := newCrossPair(t)
	a, b := p.a, p.b
	big, err := a.ctx.Alloc(4 << 20)
	require.NoError(t, err)
	for i := range big {
		big[i] = 0xA5
	}
	abig, err := a.pd.RegMR(big, allAccess)
	require.NoError(t, err)
	foreign := abig.Addr + 3<<20 // beyond anything B maps here
	bcq, err := b.ctx.CreateCQ(16, nil)
	require.NoError(t, err)

	out := command(b.ctx, ifc.NewIn(ifc.CmdCreateCQ, ifc.CQInSize).Put8(ifc.CQInLogSize, 4).Put64(ifc.CQInRing, b.mr.Addr).Put64(ifc.CQInDBRec, foreign))
	assert.Equal(t, ifc.StatusBadParam, out.Status(), "B's CREATE_CQ with its doorbell record in A's memory")
	out = command(b.ctx, ifc.NewIn(ifc.CmdCreateCQ, ifc.CQInSize).Put8(ifc.CQInLogSize, 4).Put64(ifc.CQInRing, foreign).Put64(ifc.CQInDBRec, b.mr.Addr))
	assert.Equal(t, ifc.StatusBadParam, out.Status(), "B's CREATE_CQ with its ring in A's memory")
	for _, db := range []uint64{foreign, foreign + 4} {
		in := ifc.NewIn(ifc.CmdCreateQP, ifc.QPInSize).Put32(ifc.QPInPD, b.pd.Handle()).Put32(ifc.QPInSendCQ, bcq.Handle()).Put32(ifc.QPInRecvCQ, bcq.Handle())
		in.Put8(ifc.QPInLogSQ, 4).Put8(ifc.QPInLogRQ, 4).Put8(ifc.QPInLogStride, 5).Put32(ifc.QPInFlags, ifc.QPFlagDBHint)
		in.Put64(ifc.QPInSQ, b.mr.Addr).Put64(ifc.QPInRQ, b.mr.Addr+0x4000).Put64(ifc.QPInDBRec, db)
		out := command(b.ctx, in)
		assert.Equal(t, ifc.StatusBadParam, out.Status(), "B's CREATE_QP with its doorbell record at %#x, in A's memory", db)
	}
	for i, x := range big {
		require.Equal(t, byte(0xA5), x, "A's memory at %d", i)
	}
	ea := loopback(t, a, false)
	writeWorks(t, "A after B's attempts", ea, a, foreign, abig.RKey, big[3<<20:])
}

// sigUMR registers an integrity MR of n on e (T10-DIF inserted on the
// wire) and returns the MR and a copy of the signature UMR WQE the driver
// posted for it (the one with a BSF), after invalidating the key again.
func sigUMR(t testing.TB, n *node, e *endpoint) (*verbs.MR, []byte) {
	t.Helper()
	mr, err := n.pd.AllocMRIntegrity(4096, 64)
	require.NoError(t, err)
	require.NoError(t, mr.MapSGPI([]verbs.SGE{n.mr.SGE(0, 4096)}, nil))
	require.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xFF, Wire: verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC,
		PIInterval: 512, RefTag: 1, RefRemap: true, ApptagCheckMask: 0xFFFF}}))
	mr.IncKey()
	from := e.qp.CurPost()
	post(t, e, verbs.SendWR{WRID: 60, Opcode: verbs.WRRegMRIntegrity, Flags: verbs.SendSignaled, MR: mr,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead})
	var umrWQE []byte
	for _, w := range e.qp.PostedWQEs(from) {
		if w.Ctrl.Opcode == sq.OpUMR && w.Ctrl.Imm == mr.RKey && len(w.Bytes) == 4*sq.WQEBBSize {
			umrWQE = w.Bytes
		}
	}
	require.NotNil(t, umrWQE, "the signature UMR among the WQEs posted")
	// One completion per signaled UMR: the signature UMR's, and the PI-MR
	// UMR's when the data needs a translation.
	require.Equal(t, verbs.WCSuccess, hcatest.Poll1(t, e.scq).Status, "REG_MR_INTEGRITY")
	time.Sleep(10 * time.Millisecond)
	wcs := make([]verbs.WC, 4)
	k, err := e.scq.Poll(wcs)
	require.NoError(t, err)
	for _, wc := range wcs[:k] {
		require.Equal(t, verbs.WCSuccess, wc.Status, "REG_MR_INTEGRITY")
	}
	post(t, e, verbs.SendWR{WRID: 61, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: mr.RKey})
	require.Equal(t, verbs.WCSuccess, hcatest.Poll1(t, e.scq).Status, "LOCAL_INV of the signature key")
	return mr, umrWQE
}

// repostUMR posts the signature UMR wqe again on e, signaled, with the
// BSF's wire PSV index replaced by psvIdx.
func repostUMR(t testing.TB, e *endpoint, wqe []byte, psvIdx uint32, wrid uint64) {
	t.Helper()
	w := append([]byte(nil), wqe...)
	c := sq.CtrlSeg(w).Fields()
	c.WQEIndex, c.QPN, c.CE = e.qp.CurPost(), e.qp.QPN(), sq.CECQUpdate
	sq.CtrlSeg(w).Encode(&c)
	bsf := psv.BSF(w[sq.CtrlSegSize+umr.CtrlSegSize+umr.MkeySegSize+64:][:psv.BSFSize])
	f := bsf.Fields()
	require.NotZero(t, f.WirePSV, "the driver's BSF names a wire PSV")
	f.WirePSV = psvIdx
	bsf.Encode(&f)
	require.NoError(t, e.qp.PostRawWQE(w, wrid))
}

// TestCrossClientBSF: a signature UMR whose BSF names another client's
// PSV index (one the poster does not have) fails with a local protection
// error and leaves the key as it was (free); with the poster's own PSV
// the same UMR succeeds. A's PSVs stay A's: A destroys them.
func TestCrossClientBSF(t *testing.T) {
	p := newCrossPair(t)
	a, b := p.a, p.b
	apsv := append(createPSVs(t, a.ctx, a.pd.Handle(), 4), createPSVs(t, a.ctx, a.pd.Handle(), 4)...)
	foreign := apsv[len(apsv)-1]
	eb := loopback(t, b, true)
	mr, wqe := sigUMR(t, b, eb)
	require.Less(t, psv.BSF(wqe[sq.CtrlSegSize+umr.CtrlSegSize+umr.MkeySegSize+64:]).Fields().WirePSV, foreign, "A's PSV index is not one of B's")

	repostUMR(t, eb, wqe, foreign, 1)
	wc := hcatest.Poll1(t, eb.scq)
	assert.Equal(t, verbs.WCLocProtErr, wc.Status, "B's signature UMR naming A's PSV index: %+v", wc)
	// A PSV of B's in another PD is refused the same way.
	pd2, err := b.ctx.AllocPD()
	require.NoError(t, err)
	other := createPSVs(t, b.ctx, pd2.Handle(), 1)[0]
	eb = loopback(t, b, true)
	repostUMR(t, eb, wqe, other, 2)
	assert.Equal(t, verbs.WCLocProtErr, hcatest.Poll1(t, eb.scq).Status, "B's signature UMR naming a PSV of another PD")
	// The key is still free: an access through it fails.
	eb2 := loopback(t, b, false)
	post(t, eb2, write(3, b.mr.SGE(0, 512), 0, mr.RKey))
	assert.NotEqual(t, verbs.WCSuccess, hcatest.Poll1(t, eb2.scq).Status, "a WRITE through the key the refused UMRs named")
	// B's own PSV: the UMR goes through.
	own := psv.BSF(wqe[sq.CtrlSegSize+umr.CtrlSegSize+umr.MkeySegSize+64:]).Fields().WirePSV
	eb = loopback(t, b, true)
	repostUMR(t, eb, wqe, own, 4)
	assert.Equal(t, verbs.WCSuccess, hcatest.Poll1(t, eb.scq).Status, "B's signature UMR with its own PSV")

	for _, i := range apsv {
		out := command(a.ctx, ifc.NewIn(ifc.CmdDestroyPSV, ifc.PSVIdxOff+4).Put32(ifc.PSVIdxOff, i))
		require.Equal(t, ifc.StatusOK, out.Status(), "A destroys its PSV %d: %v", i, out.Err(ifc.CmdDestroyPSV))
	}
}

// TestCrossClientQPN: QP numbers are device-wide, so B can name A's QP
// exactly: QUERY_QP, every modify command, DESTROY_QP, RING_SQ and
// RING_RQ of it, and PD, mkey and PSV numbers A has in B's commands, all
// fail with BAD_RESOURCE (or, for doorbells, do nothing); A's QP keeps
// its state and works.
func TestCrossClientQPN(t *testing.T) {
	p := newCrossPair(t)
	a, b := p.a, p.b
	ea, ea2 := a.ep(t, nil), a.ep(t, nil)
	connectEPs(t, ea, ea2, nil, nil)
	qpn := ea.qp.QPN()
	in := func(op uint16, n int) ifc.In { return ifc.NewIn(op, n).Put32(ifc.QPNOff, qpn) }
	for _, op := range []uint16{ifc.CmdQueryQP, ifc.CmdDestroyQP} {
		out := command(b.ctx, in(op, ifc.QPNOff+4))
		assert.Equal(t, ifc.StatusBadResource, out.Status(), "B's command %#x on A's QP %#x", op, qpn)
	}
	for _, op := range []uint16{ifc.CmdRST2INIT, ifc.CmdINIT2INIT, ifc.CmdINIT2RTR, ifc.CmdRTR2RTS, ifc.CmdRTS2RTS, ifc.CmdSQERR2RTS,
		ifc.Cmd2ERR, ifc.Cmd2RST, ifc.CmdSQD2RTS, ifc.CmdRTS2SQD} {
		out := command(b.ctx, in(op, ifc.QPModifyGIDSize))
		assert.Equal(t, ifc.StatusBadResource, out.Status(), "B's modify %#x of A's QP %#x", op, qpn)
	}
	bfn := b.ctx.Function()
	bfn.RingSQ(qpn)
	bfn.RingRQ(qpn)
	// A's PD, mkey and PSV numbers that B does not have.
	for range 4 {
		_, err := a.ctx.AllocPD()
		require.NoError(t, err)
	}
	apd, err := a.ctx.AllocPD()
	require.NoError(t, err)
	amr := moreMRs(t, a, 6, 0)
	apsv := createPSVs(t, a.ctx, a.pd.Handle(), 4)
	idx := klm.Key(amr.LKey).Index()
	for _, c := range []struct {
		name string
		in   ifc.In
	}{
		{"DEALLOC_PD", ifc.NewIn(ifc.CmdDeallocPD, ifc.PDOff+4).Put32(ifc.PDOff, apd.Handle())},
		{"DESTROY_MKEY", ifc.NewIn(ifc.CmdDestroyMkey, ifc.MkeyIdxOff+4).Put32(ifc.MkeyIdxOff, idx)},
		{"QUERY_MKEY", ifc.NewIn(ifc.CmdQueryMkey, ifc.MkeyIdxOff+4).Put32(ifc.MkeyIdxOff, idx)},
		{"CREATE_MKEY in A's PD", mkeyOver(apd.Handle(), b.mr.Addr, 4096)},
		{"CREATE_PSV in A's PD", ifc.NewIn(ifc.CmdCreatePSV, ifc.PSVInPDNum+4).Put32(ifc.PSVInPDNum, 1<<28|apd.Handle())},
		{"DESTROY_PSV", ifc.NewIn(ifc.CmdDestroyPSV, ifc.PSVIdxOff+4).Put32(ifc.PSVIdxOff, apsv[3])},
	} {
		out := command(b.ctx, c.in)
		assert.Equal(t, ifc.StatusBadResource, out.Status(), "B's %s with A's number: %v", c.name, out.Err(ifc.CmdCreateMkey))
	}
	out := command(a.ctx, in(ifc.CmdQueryQP, ifc.QPNOff+4))
	require.Equal(t, ifc.StatusOK, out.Status())
	require.Equal(t, uint8(ifc.StateRTS), out[ifc.QPOutState], "A's QP, as the device has it, after B's commands")
	writeWorks(t, "A's QP after B named it", ea, a, amr.Addr, amr.RKey, amr.Buf)
	require.NoError(t, apd.Dealloc(), "A's PD B named")
}

// TestCrossClientSRQN: an SRQ is its client's: CREATE_QP naming another
// client's SRQN, and DESTROY_SRQ, QUERY_SRQ and ARM_RQ of it, fail with
// BAD_RESOURCE and leave it to its owner.
func TestCrossClientSRQN(t *testing.T) {
	p := newCrossPair(t)
	a, b := p.a, p.b
	var asrqs []*verbs.SRQ
	for range 3 {
		s, err := a.pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
		require.NoError(t, err)
		asrqs = append(asrqs, s)
	}
	foreign := asrqs[len(asrqs)-1].SRQN()
	bsrq, err := b.pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	require.NoError(t, err)
	require.Greater(t, foreign, bsrq.SRQN(), "A's last SRQN is one B does not have")
	bcq, err := b.ctx.CreateCQ(16, nil)
	require.NoError(t, err)
	in := ifc.NewIn(ifc.CmdCreateQP, ifc.QPInSize).Put32(ifc.QPInPD, b.pd.Handle()).Put32(ifc.QPInSendCQ, bcq.Handle()).Put32(ifc.QPInRecvCQ, bcq.Handle())
	in.Put8(ifc.QPInLogSQ, 4).Put8(ifc.QPInLogRQ, 4).Put8(ifc.QPInLogStride, 5).Put32(ifc.QPInSRQN, foreign)
	in.Put64(ifc.QPInSQ, b.mr.Addr).Put64(ifc.QPInRQ, b.mr.Addr+0x4000).Put64(ifc.QPInDBRec, b.mr.Addr+0x8000)
	assert.Equal(t, ifc.StatusBadResource, command(b.ctx, in).Status(), "B's CREATE_QP on A's SRQ")
	for _, op := range []uint16{ifc.CmdDestroySRQ, ifc.CmdQuerySRQ, ifc.CmdArmRQ} {
		out := command(b.ctx, ifc.NewIn(op, ifc.SRQArmSize).Put32(ifc.SRQNOff, foreign))
		assert.Equal(t, ifc.StatusBadResource, out.Status(), "B's command %#x on A's SRQN", op)
	}
	for _, s := range asrqs {
		require.NoError(t, s.Destroy(), "A's SRQs are A's to destroy")
	}
	require.NoError(t, bsrq.Destroy())
}
