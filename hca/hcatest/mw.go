package hcatest

import (
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/klm"
)

var mwScenarios = []scenario{
	{"Type1", mwType1},
	{"Type2", mwType2},
	{"Invalidate", mwInvalidate},
}

// mwNew allocates a window of type t in b's PD.
func mwNew(t *testing.T, b *node, typ verbs.MWType) *verbs.MW {
	t.Helper()
	mw, err := b.pd.AllocMW(typ)
	if err != nil {
		t.Fatalf("alloc mw type %d: %v", typ, err)
	}
	t.Cleanup(func() { mw.Dealloc() })
	return mw
}

// mwDenied checks that a WRITE of a's through key at addr fails with a
// remote access error, on a link of its own (the error breaks it).
func mwDenied(t *testing.T, what string, a, b *node, addr uint64, key uint32, id uint64) {
	t.Helper()
	xa, xb := link(t, a, b)
	xa.post(write(id, a.mr.SGE(0, 16), addr, key))
	CheckErr(t, what, Poll1(t, xa.scq), id, verbs.WCRemAccessErr, xa.qp.QPN())
	brokenResponder(t, xb, b.mr.SGE(0, 8))
}

// postBind2 posts a WRBindMW of type 2 window mw to a range of mr with
// the key's next variant, and returns that key.
func postBind2(e *ep, mw *verbs.MW, mr *verbs.MR, addr, n uint64, id uint64) uint32 {
	k := klm.Key(mw.RKey)
	key := uint32(klm.MakeKey(k.Index(), k.Variant()+1))
	e.post(verbs.SendWR{WRID: id, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, Bind: &verbs.MWBind{MW: mw, RKey: key,
		MR: mr, Addr: addr, Length: n, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead}})
	return key
}

// bind2 binds type 2 window mw on e to a range of mr with a new variant
// and returns the window's new key.
func bind2(t *testing.T, e *ep, mw *verbs.MW, mr *verbs.MR, addr, n uint64, id uint64) uint32 {
	t.Helper()
	key := postBind2(e, mw, mr, addr, n, id)
	Check(t, "bind of the type 2 window", Poll1(t, e.scq), Want{WRID: id, Op: verbs.WCBindMW, Len: AnyLen})
	mw.RKey = key
	return key
}

// mwType1: a type 1 window bound by BindMW serves any QP of its PD within
// its range, takes a new key on each bind, and a zero-length bind ends it.
func mwType1(t *testing.T, s *suite) {
	a, b := s.pair(t)
	region := b.alloc(8192)
	lmr := b.reg(b.pd, region, verbs.AccessLocalWrite)
	mw := mwNew(t, b, verbs.MWType1)
	ea, eb := link(t, a, b)
	old := mw.RKey
	win := lmr.Addr + 1024
	if err := eb.qp.BindMW(verbs.MWBind{MW: mw, MR: lmr, Addr: win, Length: 512, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}, 1, verbs.SendSignaled); err != nil {
		t.Fatalf("bind mw: %v", err)
	}
	Check(t, "type 1 bind", Poll1(t, eb.scq), Want{WRID: 1, Op: verbs.WCBindMW, Len: AnyLen})
	if klm.Key(mw.RKey).Variant() != klm.Key(old).Variant()+1 || klm.Key(mw.RKey).Index() != klm.Key(old).Index() {
		t.Errorf("rkey after the bind %#x, before %#x: want the next variant", mw.RKey, old)
	}
	fill(a.buf[:512], 7)
	ea.post(write(2, a.mr.SGE(0, 512), win, mw.RKey))
	Check(t, "write through the type 1 window", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	sameBytes(t, "written through the window", region[1024:1536], a.buf[:512])
	// Another QP of the same PD.
	fa, _ := link(t, a, b)
	fa.post(write(3, a.mr.SGE(0, 8), win, mw.RKey))
	Check(t, "write through the type 1 window from another QP", Poll1(t, fa.scq), Want{WRID: 3, Op: verbs.WCRDMAWrite, Len: AnyLen})
	mwDenied(t, "write one byte past the window", a, b, win+505, mw.RKey, 4)
	mwDenied(t, "write through the key before the bind", a, b, win, old, 5)
	if err := eb.qp.BindMW(verbs.MWBind{MW: mw, MR: lmr}, 6, verbs.SendSignaled); err != nil {
		t.Fatalf("unbind mw: %v", err)
	}
	Check(t, "zero-length bind", Poll1(t, eb.scq), Want{WRID: 6, Op: verbs.WCBindMW, Len: AnyLen})
	mwDenied(t, "write through the unbound window", a, b, win, mw.RKey, 7)
}

// mwType2: a type 2 window bound by a WRBindMW serves only the QP that
// bound it, and cannot be bound again while bound (MW_BIND_ERR).
func mwType2(t *testing.T, s *suite) {
	a, b := s.pair(t)
	region := b.alloc(8192)
	lmr := b.reg(b.pd, region, verbs.AccessLocalWrite)
	mw := mwNew(t, b, verbs.MWType2)
	ea, eb := link(t, a, b)
	win := lmr.Addr + 4096
	key := bind2(t, eb, mw, lmr, win, 256, 1)
	fill(region[4096:4352], 9)
	ea.post(read(2, a.mr.SGE(0, 256), win, key))
	Check(t, "read through the type 2 window on its QP", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMARead, Len: 256})
	sameBytes(t, "read through the window", a.buf[:256], region[4096:4352])
	mwDenied(t, "the type 2 window through another QP", a, b, win, key, 3)
	postBind2(eb, mw, lmr, win, 256, 4)
	CheckErr(t, "rebind of a bound type 2 window", Poll1(t, eb.scq), 4, verbs.WCMWBindErr, eb.qp.QPN())
}

// mwInvalidate: LOCAL_INV and SEND_WITH_INV end a type 2 window.
func mwInvalidate(t *testing.T, s *suite) {
	a, b := s.pair(t)
	region := b.alloc(8192)
	lmr := b.reg(b.pd, region, verbs.AccessLocalWrite)
	ea, eb := link(t, a, b)
	win := lmr.Addr
	mw := mwNew(t, b, verbs.MWType2)
	key := bind2(t, eb, mw, lmr, win, 256, 1)
	eb.run("LOCAL_INV of the window", verbs.SendWR{WRID: 2, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: key}, AnyLen)
	mwDenied(t, "write through the locally invalidated window", a, b, win, key, 3)

	key = bind2(t, eb, mw, lmr, win, 256, 4)
	eb.recv(rwr(5, b.mr.SGE(0, 64)))
	ea.run("SEND_WITH_INV", verbs.SendWR{WRID: 6, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, 16)}, InvalidateRKey: key}, AnyLen)
	Check(t, "receive of SEND_WITH_INV", Poll1(t, eb.rcq), Want{WRID: 5, Op: verbs.WCRecv, Len: 16, Imm: key, WithInv: true})
	mwDenied(t, "write through the remotely invalidated window", a, b, win, key, 7)
}
