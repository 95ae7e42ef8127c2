package hcatest

import (
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
)

var fastRegScenarios = []scenario{
	{"Lifecycle", fastRegLifecycle},
	{"PageList", fastRegPageList},
	{"LocalKey", fastRegLocalKey},
}

// fastRegLifecycle registers, uses, invalidates and re-registers a
// fast-registration MR, with the key variant bumped each time.
func fastRegLifecycle(t *testing.T, s *suite) {
	a, b := s.pair(t)
	region := b.alloc(4 * 4096)
	lmr := b.reg(b.pd, region, verbs.AccessLocalWrite)
	fmr, err := b.pd.AllocMR(verbs.MRTypeMemReg, 4)
	if err != nil {
		t.Fatalf("alloc mr: %v", err)
	}
	ea, eb := link(t, a, b)

	// Before any registration the key is free: no access.
	{
		xa, xb := link(t, a, b)
		xa.post(write(1, a.mr.SGE(0, 8), 0, fmr.RKey))
		CheckErr(t, "write through an unregistered fast-reg key", Poll1(t, xa.scq), 1, verbs.WCRemAccessErr, xa.qp.QPN())
		brokenResponder(t, xb, b.mr.SGE(0, 8))
	}

	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	key1 := fastReg(t, eb, fmr, []verbs.SGE{lmr.SGE(0, len(region))}, acc, 10)
	if fmr.Addr != lmr.Addr || fmr.Len != uint64(len(region)) {
		t.Errorf("mapped MR at %#x+%d, want %#x+%d", fmr.Addr, fmr.Len, lmr.Addr, len(region))
	}
	fill(a.buf[:8192], 4)
	ea.post(write(11, a.mr.SGE(0, 8192), fmr.Addr+1000, key1))
	Check(t, "write through the new key", Poll1(t, ea.scq), Want{WRID: 11, Op: verbs.WCRDMAWrite, Len: AnyLen})
	sameBytes(t, "written through the fast-reg key", region[1000:9192], a.buf[:8192])
	clear(a.buf[:8192])
	ea.post(read(12, a.mr.SGE(0, 8192), fmr.Addr+1000, key1))
	Check(t, "read through the new key", Poll1(t, ea.scq), Want{WRID: 12, Op: verbs.WCRDMARead, Len: 8192})
	sameBytes(t, "read through the fast-reg key", a.buf[:8192], region[1000:9192])
	// Beyond the registered length: no access.
	{
		xa, xb := link(t, a, b)
		xa.post(write(13, a.mr.SGE(0, 16), fmr.Addr+uint64(len(region))-8, key1))
		CheckErr(t, "write past the registered length", Poll1(t, xa.scq), 13, verbs.WCRemAccessErr, xa.qp.QPN())
		brokenResponder(t, xb, b.mr.SGE(0, 8))
	}

	// LOCAL_INV: the key stops working.
	eb.post(verbs.SendWR{WRID: 14, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: key1})
	Check(t, "LOCAL_INV", Poll1(t, eb.scq), Want{WRID: 14, Op: verbs.WCLocalInv, Len: AnyLen})
	{
		xa, xb := link(t, a, b)
		xa.post(write(15, a.mr.SGE(0, 8), fmr.Addr, key1))
		CheckErr(t, "write through the invalidated key", Poll1(t, xa.scq), 15, verbs.WCRemAccessErr, xa.qp.QPN())
		brokenResponder(t, xb, b.mr.SGE(0, 8))
	}

	// Map again (the second half only), new key: it works; the old key
	// does not.
	key2 := fastReg(t, eb, fmr, []verbs.SGE{lmr.SGE(2*4096, 2*4096)}, acc, 16)
	if key2 == key1 || key2>>8 != key1>>8 {
		t.Errorf("re-registered key %#x; want the index of %#x with another variant", key2, key1)
	}
	fill(a.buf[:100], 8)
	ea.post(write(17, a.mr.SGE(0, 100), fmr.Addr, key2))
	Check(t, "write through the second key", Poll1(t, ea.scq), Want{WRID: 17, Op: verbs.WCRDMAWrite, Len: AnyLen})
	sameBytes(t, "written through the second mapping", region[8192:8292], a.buf[:100])
	for i, k := range []uint32{key1, variant(key2, 1)} {
		xa, xb := link(t, a, b)
		id := uint64(20 + i)
		xa.post(write(id, a.mr.SGE(0, 8), fmr.Addr, k))
		CheckErr(t, "write through a stale variant", Poll1(t, xa.scq), id, verbs.WCRemAccessErr, xa.qp.QPN())
		brokenResponder(t, xb, b.mr.SGE(0, 8))
	}
	// The registration gave no atomic right.
	{
		xa, xb := link(t, a, b)
		xa.post(verbs.SendWR{WRID: 30, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, 8)},
			RemoteAddr: fmr.Addr, RKey: key2, CompareAdd: 1})
		CheckErr(t, "atomic without the atomic right", Poll1(t, xa.scq), 30, verbs.WCRemAccessErr, xa.qp.QPN())
		brokenResponder(t, xb, b.mr.SGE(0, 8))
	}
	if err := fmr.Dereg(); err != nil {
		t.Errorf("dereg: %v", err)
	}
}

// fastRegPageList maps pages of two separate buffers into one contiguous
// region: an access crossing the page boundary is split between them.
func fastRegPageList(t *testing.T, s *suite) {
	a, b := s.pair(t)
	p1, p2 := b.alloc(4096), b.alloc(2*4096)
	m1 := b.reg(b.pd, p1, verbs.AccessLocalWrite)
	m2 := b.reg(b.pd, p2, verbs.AccessLocalWrite)
	fmr, err := b.pd.AllocMR(verbs.MRTypeMemReg, 8)
	if err != nil {
		t.Fatalf("alloc mr: %v", err)
	}
	ea, eb := link(t, a, b)
	// The first entry may start inside a page: 4000 bytes from offset 96.
	key := fastReg(t, eb, fmr, []verbs.SGE{m1.SGE(96, 4000), m2.SGE(0, 2*4096)}, allAccess, 1)
	if fmr.Addr != m1.Addr+96 || fmr.Len != 4000+2*4096 {
		t.Errorf("mapped MR at %#x+%d, want %#x+%d", fmr.Addr, fmr.Len, m1.Addr+96, 4000+2*4096)
	}
	fill(a.buf[:64], 0x31)
	// 32 bytes before the boundary, 32 after.
	ea.post(write(2, a.mr.SGE(0, 64), fmr.Addr+4000-32, key))
	Check(t, "write across the page boundary", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	sameBytes(t, "end of the first page", p1[4096-32:], a.buf[:32])
	sameBytes(t, "start of the second buffer", p2[:32], a.buf[32:64])
	// An atomic on the second buffer through the fast-registered key.
	putBE64(p2[4096:], 1000)
	ea.post(verbs.SendWR{WRID: 3, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(128, 8)},
		RemoteAddr: fmr.Addr + 4000 + 4096, RKey: key, CompareAdd: 24})
	Check(t, "atomic through the page list", Poll1(t, ea.scq), Want{WRID: 3, Op: verbs.WCFetchAdd, Len: 8})
	if be64(a.buf[128:]) != 1000 || be64(p2[4096:]) != 1024 {
		t.Errorf("atomic: fetched %d, now %d; want 1000, 1024", be64(a.buf[128:]), be64(p2[4096:]))
	}
}

// fastRegLocalKey uses a fast-registered key as an lkey: a SEND gathers
// from it and a receive scatters into it.
func fastRegLocalKey(t *testing.T, s *suite) {
	a, b := s.pair(t)
	ea, eb := link(t, a, b)
	reg := func(n *node, e *ep) (*verbs.MR, []byte) {
		region := n.alloc(8192)
		lmr := n.reg(n.pd, region, verbs.AccessLocalWrite)
		fmr, err := n.pd.AllocMR(verbs.MRTypeMemReg, 2)
		if err != nil {
			t.Fatalf("alloc mr: %v", err)
		}
		fastReg(t, e, fmr, []verbs.SGE{lmr.SGE(0, 8192)}, verbs.AccessLocalWrite, 1)
		return fmr, region
	}
	fa, ra := reg(a, ea)
	fb, rb := reg(b, eb)
	fill(ra[4000:4200], 0x51)
	eb.recv(rwr(2, verbs.SGE{Addr: fb.Addr + 4090, Length: 300, LKey: fb.LKey}))
	ea.post(send(3, verbs.SGE{Addr: fa.Addr + 4000, Length: 200, LKey: fa.LKey}))
	Check(t, "send from a fast-reg lkey", Poll1(t, ea.scq), Want{WRID: 3, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "receive into a fast-reg lkey", Poll1(t, eb.rcq), Want{WRID: 2, Op: verbs.WCRecv, Len: 200})
	sameBytes(t, "received", rb[4090:4290], ra[4000:4200])
}
