package hcatest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
)

// integrityErrorScenarios are signature errors, their reporting, and
// misuse of the integrity API.
var integrityErrorScenarios = []scenario{
	{"Detected", ieDetected},
	{"InsertDoesNotCheckMemory", ieInsertUnchecked},
	{"Rearm", ieRearm},
	{"ChainedRegistration", ieChained},
	{"ErrorCQ", ieErrorCQ},
	{"ReRegisterWithoutInvalidate", ieReRegNoInv},
	{"ReRegisterWithoutStatusCheck", ieReRegNoCheck},
	{"StaleKey", ieStaleKey},
	{"PostRefused", iePostRefused},
	{"MapSGPILimits", ieMapLimits},
	{"OldAPI", ieOldAPI},
	{"SendWithInvalidate", ieSendWithInv},
}

// The geometry of every transfer of the group: ieBlocks blocks of ieIV
// data bytes, each followed on the wire by an 8-byte T10 tuple.
const (
	ieIV      = 512
	ieBlocks  = 8
	ieWB      = ieIV + 8        // a wire block
	ieWLen    = ieBlocks * ieWB // the wire stream
	ieDataLen = ieBlocks * ieIV // the data in memory
	ieMetaLen = ieBlocks * 8    // the PI in memory (DIX)
	ieRef     = 0x1000          // ref tag of block 0, incremented per block
	ieApp     = 0x1234          // app tag
	ieHData   = 0               // host buffer: data
	ieHMeta   = 8192            // host buffer: PI (DIX)
	iePStream = 0               // peer buffer: the wire stream
	iePData   = 16384           // peer buffer: data behind the peer's own signature key
	ieSpare   = 32768           // either buffer: scratch
)

// ieWire is the T10-DIF domain of the group (the NVMe host's recipe: CRC
// guard, incrementing ref tag, app escape, full app tag check).
var ieWire = verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: ieIV, AppTag: ieApp, RefTag: ieRef,
	RefRemap: true, AppEscape: true, ApptagCheckMask: 0xFFFF}

// ieDom is ieWire as t10dif describes it.
var ieDom = t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: ieIV, RefTag: ieRef, Ref: t10dif.RefIncrement,
	AppTag: ieApp, AppTagMask: 0xFFFF, Escape: t10dif.EscapeApp}

// The attribute sets: memory without PI (INSERT on a gather, STRIP on a
// scatter) and PI in both domains (PASS). Every tuple byte is checked.
var (
	ieInsertStrip = verbs.SigAttrs{CheckMask: 0xFF, Wire: ieWire}
	iePass        = verbs.SigAttrs{CheckMask: 0xFF, Mem: ieWire, Wire: ieWire}
)

// ieStream returns data with PI inserted, as the wire carries it.
func ieStream(t testing.TB, data []byte) []byte {
	t.Helper()
	return rcpGen(t, ieDom, data)
}

// ieSplit separates a wire stream into its data and its tuples.
func ieSplit(w []byte) (data, meta []byte) { return rcpSplit(w, ieIV) }

// ieCorrupt damages block k of the wire stream w so that the check of
// typ fails there: a data byte flipped (guard), or a wrong app or ref tag.
// It returns the error's expected and actual values.
func ieCorrupt(typ verbs.SigErrType, w []byte, k int) (exp, act uint32) {
	blk, tuple := w[k*ieWB:k*ieWB+ieIV], w[k*ieWB+ieIV:(k+1)*ieWB]
	switch typ {
	case verbs.SigBadGuard:
		blk[100] ^= 0x40
		return uint32(t10dif.CRC16(0, blk)), uint32(binary.BigEndian.Uint16(tuple))
	case verbs.SigBadAppTag:
		binary.BigEndian.PutUint16(tuple[2:], 0x0BAD)
		return ieApp, 0x0BAD
	default:
		bad := 0xBAD00000 | uint32(k)
		binary.BigEndian.PutUint32(tuple[4:], bad)
		return ieRef + uint32(k), bad
	}
}

// ieAddr is a QP's fabric address.
type ieAddr struct {
	lid uint16
	qpn uint32
}

func ieAddrOf(e *ep) ieAddr { i := e.qp.Info(); return ieAddr{i.LID, i.QPN} }

// ieHook installs, for the rest of the (sub)test, a wire hook that hands
// fn the wire bytes of every message between x and y; it skips the test
// on a device without one. The returned function counts the messages fn
// reported as handled.
func ieHook(t testing.TB, s *suite, x, y *ep, fn func(w []byte) bool) func() int {
	t.Helper()
	if s.wireHook == nil {
		t.Skip("needs Options.WireHook: the device under test offers no wire hook (a hook is a function in the device's process: a daemon such as hcasim serve cannot offer one over its socket)")
	}
	ax, ay := ieAddrOf(x), ieAddrOf(y)
	var mu sync.Mutex
	n := 0
	s.wireHook(func(m *hca.WireMsg) {
		req, resp := ieAddr{m.ReqLID, m.ReqQPN}, ieAddr{m.RespLID, m.RespQPN}
		if !(req == ax && resp == ay) && !(req == ay && resp == ax) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if fn(m.Wire) {
			n++
		}
	})
	t.Cleanup(func() { s.wireHook(nil) })
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// ieUntil polls c one completion at a time until the one of wrid.
func ieUntil(t testing.TB, c *verbs.CQ, wrid uint64) []verbs.WC {
	t.Helper()
	var out []verbs.WC
	for len(out) < 16 {
		wc := Poll1(t, c)
		out = append(out, wc)
		if wc.WRID == wrid {
			return out
		}
	}
	t.Fatalf("no completion of wr_id %#x among %s", wrid, FormatWCs(out))
	return nil
}

// ieCase is one detected signature error.
type ieCase struct {
	gather bool // data leaves the host's memory through its signature key (else enters it)
	remote bool // the peer uses the host's key as an rkey (else the host's QP uses it as an lkey)
	send   bool // local use by a SEND's gather or a receive's scatter (else RDMA WRITE or READ)
	wire   bool // corrupted on the wire (else in memory)
	pass   bool // PI in memory as well (PASS; else INSERT/STRIP)
	typ    verbs.SigErrType
}

func (c ieCase) name() string {
	pick := func(b bool, y, n string) string {
		if b {
			return y
		}
		return n
	}
	typ := map[verbs.SigErrType]string{verbs.SigBadGuard: "Guard", verbs.SigBadAppTag: "AppTag", verbs.SigBadRefTag: "RefTag"}[c.typ]
	use := pick(c.remote, "Remote", pick(c.send, pick(c.gather, "LocalSend", "LocalRecv"), "Local"))
	return pick(c.gather, "Gather", "Scatter") + "/" + use + "/" + pick(c.wire, "Wire", "Memory") + "/" +
		pick(c.pass, "Pass", pick(c.gather, "Insert", "Strip")) + "/" + typ
}

// block is the block the case corrupts.
func (c ieCase) block() int {
	k := map[verbs.SigErrType]int{verbs.SigBadGuard: 3, verbs.SigBadAppTag: 5, verbs.SigBadRefTag: 6}[c.typ]
	if c.remote {
		k-- // vary the block between uses
	}
	if c.wire {
		k++
	}
	if c.send {
		k += 2
	}
	return k % ieBlocks
}

// ieCases lists every error type in both directions, for both uses of the
// key (local: RDMA and SEND/receive), corrupted in memory and on the wire. Data leaving the host's memory
// is checked against its memory PI, so a memory corruption needs PASS; a
// corruption on its way out is past the host's check and is caught by the
// peer's own signature key (STRIP) that receives it.
func ieCases() []ieCase {
	var out []ieCase
	for _, gather := range []bool{true, false} {
		for _, use := range []struct{ remote, send bool }{{false, false}, {false, true}, {true, false}} {
			for _, wire := range []bool{false, true} {
				for _, pass := range []bool{false, true} {
					if gather && !wire && !pass {
						continue // no PI in memory to check: InsertDoesNotCheckMemory
					}
					for _, typ := range []verbs.SigErrType{verbs.SigBadGuard, verbs.SigBadAppTag, verbs.SigBadRefTag} {
						out = append(out, ieCase{gather: gather, remote: use.remote, send: use.send, wire: wire, pass: pass, typ: typ})
					}
				}
			}
		}
	}
	return out
}

// ieDetected: every error type is reported at its exact block by
// CheckMRStatus (type, expected, actual, offset, key), once; the transfer
// itself succeeds and moves the data as it was.
func ieDetected(t *testing.T, s *suite) {
	a, b := s.pair(t)
	for i, c := range ieCases() {
		t.Run(c.name(), func(t *testing.T) { ieRunCase(t, s, a.in(t), b.in(t), c, byte(i)) })
	}
}

func ieRunCase(t *testing.T, s *suite, a, b *node, c ieCase, seed byte) {
	data := pattern(ieDataLen, seed)
	good := ieStream(t, data)
	k := c.block()
	bad := append([]byte(nil), good...)
	exp, act := ieCorrupt(c.typ, bad, k)
	badData, badMeta := ieSplit(bad)
	_, goodMeta := ieSplit(good)

	ea, eb := sigLink(t, a, b)
	hm := ea.sigMR(2, 2)
	hdata, hmeta := a.buf[ieHData:ieHData+ieDataLen], a.buf[ieHMeta:ieHMeta+ieMetaLen]
	pstream, pdata := b.buf[iePStream:iePStream+ieWLen], b.buf[iePData:iePData+ieDataLen]
	attrs, meta := ieInsertStrip, []verbs.SGE(nil)
	if c.pass {
		attrs, meta = iePass, a.sg(ieHMeta, ieMetaLen)
	}
	clear(pstream)
	clear(pdata)
	clear(hdata)
	clear(hmeta)

	switch {
	case c.gather && c.wire:
		copy(hdata, data)
		copy(hmeta, goodMeta)
	case c.gather:
		copy(hdata, badData)
		copy(hmeta, badMeta)
	case c.wire:
		copy(pstream, good)
	default:
		copy(pstream, bad)
	}
	hm.regWait(a.sg(ieHData, ieDataLen), meta, attrs, 1)
	// Who detects: the host's key, except for data corrupted after it
	// left the host: the peer's key that receives it.
	detMR := hm
	var pm *sigMR
	if c.gather && c.wire {
		pm = eb.sigMR(1, 1)
		pm.regWait(b.sg(iePData, ieDataLen), nil, ieInsertStrip, 2)
		detMR = pm
	}
	var hooked func() int
	if c.wire {
		hooked = ieHook(t, s, ea, eb, func(w []byte) bool {
			if len(w) != ieWLen {
				return false
			}
			ieCorrupt(c.typ, w, k)
			return true
		})
	}

	lsge := hm.wireSGE(0, ieWLen) // the host's key as an lkey: wire offsets
	switch {
	case c.gather && c.send:
		dst := b.mr.SGE(iePStream, ieWLen)
		if pm != nil {
			dst = pm.wireSGE(0, ieWLen)
		}
		eb.recv(rwr(11, dst))
		ea.run("SEND from the signature lkey", send(10, lsge), AnyLen)
		eb.recvOK("receive of the SEND", 11, ieWLen)
	case c.send:
		ea.recv(rwr(11, lsge))
		eb.run("SEND", send(10, b.mr.SGE(iePStream, ieWLen)), AnyLen)
		ea.recvOK("receive into the signature lkey", 11, ieWLen)
	case c.gather && !c.remote:
		raddr, rkey := b.mr.Addr+iePStream, b.mr.RKey
		if pm != nil {
			raddr, rkey = 0, pm.RKey
		}
		ea.run("RDMA WRITE from the signature lkey", write(10, lsge, raddr, rkey), AnyLen)
	case c.gather:
		dst := b.mr.SGE(iePStream, ieWLen)
		if pm != nil {
			dst = pm.wireSGE(0, ieWLen)
		}
		eb.run("RDMA READ from the signature rkey", read(10, dst, 0, hm.RKey), ieWLen)
	case !c.remote:
		ea.run("RDMA READ into the signature lkey", read(10, lsge, b.mr.Addr+iePStream, b.mr.RKey), ieWLen)
	default:
		eb.run("RDMA WRITE to the signature rkey", write(10, b.mr.SGE(iePStream, ieWLen), 0, hm.RKey), AnyLen)
	}
	detMR.wantErr("signature status", verbs.SigErr{Type: c.typ, Expected: exp, Actual: act, Offset: uint64(k * ieWB), Key: detMR.RKey})
	if pm != nil {
		hm.status("the sender's key (its memory PI was good)", nil)
	}
	if hooked != nil {
		if n := hooked(); n != 1 {
			t.Errorf("the wire hook corrupted %d messages, want 1", n)
		}
	}
	// The data moved as it was, the bad block included.
	switch {
	case c.gather && c.wire:
		sameBytes(t, "data stripped into the peer's memory", pdata, badData)
	case c.gather:
		sameBytes(t, "wire stream at the peer", pstream, bad)
	default:
		sameBytes(t, "data in the host's memory", hdata, badData)
		if c.pass {
			sameBytes(t, "PI passed into the host's memory", hmeta, badMeta)
		}
	}
}

// ieInsertUnchecked: with no PI in memory there is nothing to check on the
// way out: data corrupted in memory gets fresh PI, no error is reported.
func ieInsertUnchecked(t *testing.T, s *suite) {
	a, b, ea, eb := s.sigPair(t)
	hm := ea.sigMR(1, 1)
	data := pattern(ieDataLen, 0x21)
	copy(a.buf[ieHData:], data)
	hm.regWait(a.sg(ieHData, ieDataLen), nil, ieInsertStrip, 1)
	a.buf[ieHData+4*ieIV+7] ^= 0x10 // "corrupted" in memory after registration
	data[4*ieIV+7] ^= 0x10
	for _, remote := range []bool{false, true} {
		clear(b.buf[:ieWLen])
		if remote {
			eb.run("READ", read(2, b.mr.SGE(0, ieWLen), 0, hm.RKey), ieWLen)
		} else {
			ea.run("WRITE", write(3, hm.wireSGE(0, ieWLen), b.mr.Addr, b.mr.RKey), AnyLen)
		}
		hm.status("insert over changed data", nil)
		sameBytes(t, "wire stream", b.buf[:ieWLen], ieStream(t, data))
		if err := t10dif.Verify(ieDom, t10dif.CheckAll, t10dif.Buf{Data: b.buf[:ieWLen]}); err != nil {
			t.Errorf("the inserted stream does not verify: %v", err)
		}
	}
}

// ieRearm: only the first error of a registration is reported; each new
// registration (LOCAL_INV, IncKey, CheckMRStatus, REG_MR_INTEGRITY)
// reports its first error again, whatever the parity of the driver's
// error count (expected_sigerr_count), with the key of that registration
// and the offset in the key's wire domain.
func ieRearm(t *testing.T, s *suite) {
	a, b, ea, eb := s.sigPair(t)
	hm := ea.sigMR(1, 1)
	data := pattern(ieDataLen, 0x33)
	good := ieStream(t, data)
	wrid := uint64(0)
	next := func() uint64 { wrid++; return wrid }
	reg := func() uint32 {
		t.Helper()
		if wrid > 0 {
			ea.run("LOCAL_INV", localInv(next(), hm.RKey), AnyLen)
		}
		return hm.regWait(a.sg(ieHData, ieDataLen), nil, ieInsertStrip, next())
	}
	// xfer has the peer WRITE the stream from block first on, with block k
	// corrupted (k < 0: none), and returns the error it should give.
	xfer := func(first, k int, typ verbs.SigErrType) verbs.SigErr {
		t.Helper()
		w := append([]byte(nil), good...)
		var e verbs.SigErr
		if k >= 0 {
			e.Type, e.Offset, e.Key = typ, uint64(k*ieWB), hm.RKey
			e.Expected, e.Actual = ieCorrupt(typ, w, k)
		}
		copy(b.buf, w)
		clear(a.buf[ieHData : ieHData+ieDataLen])
		id := next()
		eb.run("RDMA WRITE to the signature rkey", write(id, b.mr.SGE(first*ieWB, (ieBlocks-first)*ieWB), uint64(first*ieWB), hm.RKey), AnyLen)
		d, _ := ieSplit(w)
		sameBytes(t, "stripped data", a.buf[ieHData+first*ieIV:ieHData+ieDataLen], d[first*ieIV:])
		return e
	}
	reg()
	xfer(0, -1, 0)
	hm.status("a clean transfer", nil)

	k1 := reg()
	hm.wantErr("first error after a registration", xfer(0, 2, verbs.SigBadGuard))
	xfer(0, 4, verbs.SigBadAppTag)
	hm.status("second error of the same registration", nil)

	k2 := reg()
	if k2 == k1 {
		t.Errorf("re-registration kept key %#x", k1)
	}
	hm.wantErr("error after the second registration (from block 4)", xfer(4, 6, verbs.SigBadRefTag))

	reg()
	hm.wantErr("error after the third registration", xfer(0, 7, verbs.SigBadGuard))

	reg()
	xfer(0, -1, 0)
	hm.status("a clean registration", nil)
	reg()
	hm.wantErr("error after a clean registration", xfer(0, 0, verbs.SigBadAppTag))
	xfer(0, 1, verbs.SigBadGuard)
	hm.status("second error after a clean registration", nil)
}

// ieInsertPair sets up a host whose integrity MR (INSERT/STRIP) covers
// data at ieHData, connected to a peer.
func ieInsertPair(t testing.TB, s *suite) (a, b *node, ea, eb *ep, hm *sigMR, data []byte) {
	t.Helper()
	a, b, ea, eb = s.sigPair(t)
	hm = ea.sigMR(1, 1)
	data = pattern(ieDataLen, 0x47)
	copy(a.buf[ieHData:], data)
	return a, b, ea, eb, hm, data
}

// ieReadOK has e READ the whole stream through rkey into its node's spare
// memory and checks that it is data with PI inserted.
func ieReadOK(t testing.TB, what string, e *ep, rkey uint32, data []byte, wrid uint64) {
	t.Helper()
	buf := e.n.buf[ieSpare : ieSpare+ieWLen]
	clear(buf)
	e.run(what, read(wrid, e.n.mr.SGE(ieSpare, ieWLen), 0, rkey), ieWLen)
	sameBytes(t, what, buf, ieStream(t, data))
}

// ieReadFails has a fresh QP of peer READ through rkey, served by a fresh
// integrity QP of host: the READ fails with a remote access error and the
// serving QP goes to error.
func ieReadFails(t testing.TB, what string, host, peer *node, rkey uint32, wrid uint64) {
	t.Helper()
	xh, xp := sigLink(t, host, peer)
	xp.post(read(wrid, peer.mr.SGE(ieSpare, ieWLen), 0, rkey))
	CheckErr(t, what, Poll1(t, xp.scq), wrid, verbs.WCRemAccessErr, xp.qp.QPN())
	brokenResponder(t, xh, host.mr.SGE(ieSpare, 64))
}

// ieReRegNoInv: REG_MR_INTEGRITY of a key still valid (no LOCAL_INV) fails
// the signature UMR's not-free check: the REG completes in error, the QP
// goes to error and the WRs after it are flushed. The failed UMR changes
// nothing: the old key still works, the new one does not.
func ieReRegNoInv(t *testing.T, s *suite) {
	a, b, ea, eb, hm, data := ieInsertPair(t, s)
	key1 := hm.regWait(a.sg(ieHData, ieDataLen), nil, ieInsertStrip, 1)
	ieReadOK(t, "READ through the first registration", eb, key1, data, 2)
	hm.status("status", nil)

	hm.IncKey()
	key2 := hm.RKey
	ea.post(verbs.SendWR{WRID: 3, Opcode: verbs.WRRegMRIntegrity, Flags: verbs.SendSignaled, MR: hm.MR, Access: sigAccess},
		write(4, a.mr.SGE(ieSpare, 8), b.mr.Addr+ieSpare, b.mr.RKey))
	wcs := ieUntil(t, ea.scq, 4)
	if w := wcs[0]; w.WRID != 3 || w.Status == verbs.WCSuccess || w.Status == verbs.WCWRFlushErr || w.QPN != ea.qp.QPN() {
		t.Errorf("REG_MR_INTEGRITY over a valid key: got %s, want an error completion of wr_id 0x3", FormatWC(w))
	}
	// The REG's SET_PSV WQEs may flush under its wr_id; then the WRITE.
	for _, w := range wcs[1:] {
		if (w.WRID != 3 && w.WRID != 4) || w.Status != verbs.WCWRFlushErr {
			t.Errorf("after the failed REG: got %s, want flush errors", FormatWC(w))
		}
	}
	if last := wcs[len(wcs)-1]; last.WRID != 4 || last.Status != verbs.WCWRFlushErr {
		t.Errorf("WRITE after the failed REG: got %s, want IBV_WC_WR_FLUSH_ERR", FormatWC(last))
	}
	// The QP is in error: a receive posted to it is flushed too.
	ea.recv(rwr(0xF2, a.mr.SGE(ieSpare, 64)))
	CheckErr(t, "receive posted after the failed REG", Poll1(t, ea.rcq), 0xF2, verbs.WCWRFlushErr, ea.qp.QPN())
	// A new QP pair: the first registration is intact.
	xh, xp := sigLink(t, a, b)
	ieReadOK(t, "READ through the key of the registration the failed REG left", xp, key1, data, 5)
	hm.on(xh).status("status after the failed REG", nil)
	ieReadFails(t, "READ through the key of the failed REG", a, b, key2, 6)
}

// ieReRegNoCheck: REG_MR_INTEGRITY before CheckMRStatus of the previous
// registration is refused at post (EINVAL): the WRs before it are posted,
// nothing of it is. After the status check the same REG succeeds.
func ieReRegNoCheck(t *testing.T, s *suite) {
	a, _, ea, eb, hm, data := ieInsertPair(t, s)
	key1 := hm.regWait(a.sg(ieHData, ieDataLen), nil, ieInsertStrip, 1)
	ieReadOK(t, "READ through the registration", eb, key1, data, 2)
	hm.IncKey()
	postErr(t, "LOCAL_INV then REG_MR_INTEGRITY without a status check", ea.qp, []verbs.SendWR{
		{WRID: 3, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: key1},
		{WRID: 4, Opcode: verbs.WRRegMRIntegrity, Flags: verbs.SendSignaled, MR: hm.MR, Access: sigAccess},
	}, 1, verbs.ErrInvalid)
	Check(t, "LOCAL_INV", Poll1(t, ea.scq), Want{WRID: 3, Op: verbs.WCLocalInv, Len: AnyLen})
	Quiet(t, ea.scq, quiet, "after the refused REG")
	if e, err := hm.CheckMRStatus(); e != nil || err != nil {
		t.Errorf("CheckMRStatus = %+v, %v; want no error", e, err)
	}
	hm.postReg(5)
	ieReadOK(t, "READ through the registration after the status check", eb, hm.RKey, data, 6)
	hm.status("status", nil)
}

// ieStaleKey: after a re-registration the old rkey fails with a remote
// access error; an error recorded under one key variant and checked after
// the MR's key moved on is reported as a guard error at offset 0 with the
// recorded key (mlx5_ib_check_mr_status).
func ieStaleKey(t *testing.T, s *suite) {
	a, b, ea, eb, hm, data := ieInsertPair(t, s)
	sg := a.sg(ieHData, ieDataLen)
	key1 := hm.regWait(sg, nil, ieInsertStrip, 1)
	ieReadOK(t, "READ through the first key", eb, key1, data, 2)
	hm.status("status", nil)
	ea.run("LOCAL_INV", localInv(3, key1), AnyLen)
	key2 := hm.regWait(sg, nil, ieInsertStrip, 4)
	if key2 == key1 || key2>>8 != key1>>8 {
		t.Errorf("re-registered key %#x; want the index of %#x with another variant", key2, key1)
	}
	ieReadFails(t, "READ through the previous variant", a, b, key1, 5)
	ieReadOK(t, "READ through the current key", eb, key2, data, 6)
	// The old variant as an lkey fails locally.
	{
		xh, _ := sigLink(t, a, b)
		xh.post(write(7, verbs.SGE{Length: ieWLen, LKey: key1}, b.mr.Addr+ieSpare, b.mr.RKey))
		CheckErr(t, "WRITE from the previous variant's lkey", Poll1(t, xh.scq), 7, verbs.WCLocProtErr, xh.qp.QPN())
	}
	hm.status("status", nil)

	// An app tag error at block 3 recorded under key3, checked after the
	// key was bumped to key4.
	ea.run("LOCAL_INV", localInv(8, key2), AnyLen)
	key3 := hm.regWait(sg, nil, ieInsertStrip, 9)
	w := ieStream(t, data)
	ieCorrupt(verbs.SigBadAppTag, w, 3)
	copy(b.buf[ieSpare:], w)
	eb.run("WRITE with a bad app tag", write(10, b.mr.SGE(ieSpare, ieWLen), 0, key3), AnyLen)
	Quiet(t, ea.scq, quiet, "the host's CQ with the signature error") // the driver records the error
	hm.IncKey()
	key4 := hm.RKey
	hm.wantErr("error recorded under the previous variant", verbs.SigErr{Type: verbs.SigBadGuard, Offset: 0, Key: key3})
	ea.run("LOCAL_INV", localInv(11, key3), AnyLen)
	hm.postReg(12)
	ieReadOK(t, "READ through the key after it", eb, key4, data, 13)
	hm.status("status", nil)
}

// iePostRefused: signature WRs the driver refuses at post (EINVAL,
// nothing posted): on a QP created without integrity, with remote atomic
// access, with SGEs, on MRs of the wrong type; CheckMRStatus of an MR
// without signature.
func iePostRefused(t *testing.T, s *suite) {
	a, b := s.pair(t)
	plain, peer := a.ep(nil), b.ep(nil)
	connect(t, plain, peer, nil, nil)
	ea, eb := sigLink(t, a, b)
	hm := ea.sigMR(1, 1)
	hm.mapPI(a.sg(ieHData, ieDataLen), nil, ieInsertStrip)
	hm.IncKey()
	sig, err := a.pd.AllocMR(verbs.MRTypeSignature, 2)
	if err != nil {
		t.Fatalf("alloc signature mr: %v", err)
	}
	sig.SetSigAttrs(ieInsertStrip)
	fr, err := a.pd.AllocMR(verbs.MRTypeMemReg, 4)
	if err != nil {
		t.Fatalf("alloc mr: %v", err)
	}
	dsge := a.mr.SGE(ieHData, ieDataLen)
	regI := func(mr *verbs.MR) verbs.SendWR {
		return verbs.SendWR{WRID: 1, Opcode: verbs.WRRegMRIntegrity, Flags: verbs.SendSignaled, MR: mr, Access: sigAccess}
	}
	regS := func(mr *verbs.MR, sg ...verbs.SGE) verbs.SendWR {
		return verbs.SendWR{WRID: 2, Opcode: verbs.WRRegSigMR, Flags: verbs.SendSignaled, MR: mr, SG: sg, Access: sigAccess}
	}
	postErr(t, "REG_MR_INTEGRITY on a QP without integrity", plain.qp, []verbs.SendWR{regI(hm.MR)}, 0, verbs.ErrInvalid)
	postErr(t, "REG_SIG_MR on a QP without integrity", plain.qp, []verbs.SendWR{regS(sig, dsge)}, 0, verbs.ErrInvalid)
	// The refused WRs left the QP working.
	fill(a.buf[ieSpare:ieSpare+64], 0x61)
	plain.run("WRITE after the refused WRs", write(3, a.mr.SGE(ieSpare, 64), b.mr.Addr+ieSpare, b.mr.RKey), AnyLen)
	sameBytes(t, "written", b.buf[ieSpare:ieSpare+64], a.buf[ieSpare:ieSpare+64])
	Quiet(t, plain.scq, quiet, "QP without integrity")

	atomic := regI(hm.MR)
	atomic.Access |= verbs.AccessRemoteAtomic
	withSG := regI(hm.MR)
	withSG.SG = []verbs.SGE{dsge}
	for _, c := range []struct {
		what string
		wr   verbs.SendWR
	}{
		{"REG_MR_INTEGRITY with remote atomic access", atomic},
		{"REG_MR_INTEGRITY with an SGE", withSG},
		{"REG_MR_INTEGRITY of a fast-registration MR", regI(fr)},
		{"REG_MR_INTEGRITY of a signature MR", regI(sig)},
		{"REG_SIG_MR of an integrity MR", regS(hm.MR, dsge)},
		{"REG_SIG_MR of a fast-registration MR", regS(fr, dsge)},
		{"REG_SIG_MR without a data SGE", regS(sig)},
		{"REG_SIG_MR with two data SGEs", regS(sig, dsge, dsge)},
	} {
		postErr(t, c.what, ea.qp, []verbs.SendWR{c.wr}, 0, verbs.ErrInvalid)
	}
	Quiet(t, ea.scq, quiet, "integrity QP after the refused WRs")
	if e, err := a.mr.CheckMRStatus(); e != nil || !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("CheckMRStatus of an MR without signature = %+v, %v; want %v", e, err, verbs.ErrInvalid)
	}
	// The integrity MR is untouched by the refusals: it registers.
	hm.postReg(4)
	ieReadOK(t, "READ through the registration", eb, hm.RKey, a.buf[ieHData:ieHData+ieDataLen], 5)
	hm.status("status", nil)
}

// ieMapLimits: MapSGPI refuses more entries than the integrity MR was
// allocated for (ALIGN(data + meta, 4) descriptors) when neither PA nor
// MTT mode can map them; at the limit it maps (KLM) and the registration
// moves the data.
func ieMapLimits(t *testing.T, s *suite) {
	a, b, ea, eb := s.sigPair(t)
	for _, c := range [][2]int{{0, 1}, {1, 0}, {-1, 1}} {
		if _, err := a.pd.AllocMRIntegrity(c[0], c[1]); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("AllocMRIntegrity(%d, %d) = %v, want %v", c[0], c[1], err, verbs.ErrInvalid)
		}
	}
	caps := a.ctx.Caps()
	if lim := int(caps.Mkey.MaxFastRegPageListLen() / 2); lim > 0 {
		if _, err := a.pd.AllocMRIntegrity(lim+1, 1); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("AllocMRIntegrity(%d, 1) above max_pi_fast_reg_page_list_len %d = %v, want %v", lim+1, lim, err, verbs.ErrInvalid)
		}
	}
	hm := ea.sigMR(2, 2) // 4 descriptors
	// Blocks scattered at unaligned addresses: neither PA nor MTT. The
	// first three hold the data; the fourth only counts against the limit.
	const nblk = 3
	data := pattern(nblk*ieIV, 0x75)
	w := ieStream(t, data)
	_, meta := ieSplit(w)
	sges := make([]verbs.SGE, 0, 5)
	for i := range 4 {
		off := 4 + i*1000
		copy(a.buf[off:], data[min(i, nblk-1)*ieIV:][:ieIV])
		sges = append(sges, a.mr.SGE(off, ieIV))
	}
	copy(a.buf[ieHMeta+4:], meta)
	msge := a.mr.SGE(ieHMeta+4, len(meta))
	if err := hm.MapSGPI(sges[:4], []verbs.SGE{msge}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("MapSGPI of 4 data + 1 metadata entries into 4 descriptors = %v, want %v", err, verbs.ErrInvalid)
	}
	if err := hm.MapSGPI(sges[:4], nil); err != nil {
		t.Errorf("MapSGPI of 4 data entries into 4 descriptors: %v", err)
	}
	if err := hm.MapSGPI(nil, []verbs.SGE{msge}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("MapSGPI without data = %v, want %v", err, verbs.ErrInvalid)
	}
	if err := a.mr.MapSGPI(sges[:1], nil); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("MapSGPI of an MR that is not an integrity MR = %v, want %v", err, verbs.ErrInvalid)
	}
	if err := hm.MapSGPI(sges[:nblk], []verbs.SGE{msge}); err != nil {
		t.Fatalf("MapSGPI of 3 data + 1 metadata entries into 4 descriptors: %v", err)
	}
	if hm.Addr != 0 || hm.Len != nblk*(ieIV+8) {
		t.Errorf("mapped MR at %#x+%d, want zero based, %d bytes", hm.Addr, hm.Len, nblk*(ieIV+8))
	}
	hm.SetSigAttrs(iePass)
	hm.IncKey()
	// Unsignaled: KLM mode posts the PI MR's UMR too; the WRITE after it
	// completes after the registration.
	ea.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRegMRIntegrity, MR: hm.MR, Access: sigAccess},
		write(2, a.mr.SGE(ieSpare, 8), b.mr.Addr+ieSpare, b.mr.RKey))
	Check(t, "WRITE after the registration", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	clear(b.buf[:len(w)])
	eb.run("READ through the KLM-mapped key", read(3, b.mr.SGE(0, len(w)), 0, hm.RKey), len(w))
	sameBytes(t, "stream read through the KLM-mapped key", b.buf[:len(w)], w)
	hm.status("status", nil)
}

// ieOldAPI: the old API — a signature MR (MRTypeSignature) registered with
// REG_SIG_MR over separately registered data and protection MRs — puts
// the same bytes on the wire as REG_MR_INTEGRITY over the same memory;
// its errors are reported the same way; LOCAL_INV of its key stops
// access, and REG_SIG_MR registers it again.
func ieOldAPI(t *testing.T, s *suite) {
	a, b, ea, eb := s.sigPair(t)
	data := pattern(ieDataLen, 0x5A)
	good := ieStream(t, data)
	_, goodMeta := ieSplit(good)
	dbuf, pbuf := a.alloc(ieDataLen), a.alloc(ieMetaLen)
	copy(dbuf, data)
	copy(pbuf, goodMeta)
	dmr := a.reg(a.pd, dbuf, verbs.AccessLocalWrite)
	pmr := a.reg(a.pd, pbuf, verbs.AccessLocalWrite)
	raw, err := a.pd.AllocMR(verbs.MRTypeSignature, 2)
	if err != nil {
		t.Fatalf("alloc signature mr: %v", err)
	}
	sig := &sigMR{MR: raw, e: ea}
	sig.SetSigAttrs(iePass)
	prot := pmr.SGE(0, ieMetaLen)
	regSig := func(wrid uint64) {
		t.Helper()
		sig.IncKey()
		ea.run("REG_SIG_MR", verbs.SendWR{WRID: wrid, Opcode: verbs.WRRegSigMR, Flags: verbs.SendSignaled, MR: sig.MR,
			SG: []verbs.SGE{dmr.SGE(0, ieDataLen)}, Prot: &prot, Access: sigAccess}, AnyLen)
	}
	// Capture what goes on the wire between the two QPs (if the device
	// lets us), else compare what the peer READs.
	var (
		mu   sync.Mutex
		seen [][]byte
	)
	if s.wireHook != nil {
		ieHook(t, s, ea, eb, func(w []byte) bool {
			mu.Lock()
			seen = append(seen, append([]byte(nil), w...))
			mu.Unlock()
			return true
		})
	}
	captured := func(what string) []byte {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if s.wireHook == nil {
			return nil
		}
		if len(seen) != 1 {
			t.Errorf("%s: %d messages on the wire, want 1", what, len(seen))
			return nil
		}
		w := seen[0]
		seen = nil
		return w
	}
	readAll := func(what string, rkey uint32, wrid uint64) []byte {
		t.Helper()
		clear(b.buf[:ieWLen])
		eb.run(what, read(wrid, b.mr.SGE(0, ieWLen), 0, rkey), ieWLen)
		return append([]byte(nil), b.buf[:ieWLen]...)
	}

	regSig(1)
	oldRead := readAll("READ through the signature MR", sig.RKey, 2)
	oldWire := captured("old API")
	sig.status("signature MR status", nil)
	sameBytes(t, "stream through the signature MR", oldRead, good)

	im := ea.sigMR(1, 1)
	im.regWait([]verbs.SGE{dmr.SGE(0, ieDataLen)}, []verbs.SGE{prot}, iePass, 3)
	newRead := readAll("READ through the integrity MR", im.RKey, 4)
	newWire := captured("new API")
	im.status("integrity MR status", nil)
	sameBytes(t, "the peer's data: integrity MR vs signature MR", newRead, oldRead)
	if s.wireHook != nil {
		sameBytes(t, "wire bytes: integrity MR vs signature MR", newWire, oldWire)
		sameBytes(t, "wire bytes of the signature MR", oldWire, good)
	}

	// A bad ref tag in the protection MR, block 5: reported through the
	// signature MR after it is invalidated and registered again.
	ea.run("LOCAL_INV", localInv(5, sig.RKey), AnyLen)
	regSig(6)
	w := append([]byte(nil), good...)
	exp, act := ieCorrupt(verbs.SigBadRefTag, w, 5)
	_, badMeta := ieSplit(w)
	copy(pbuf, badMeta)
	got := readAll("READ with a bad ref tag in memory", sig.RKey, 7)
	captured("old API, bad ref tag")
	sig.wantErr("signature MR", verbs.SigErr{Type: verbs.SigBadRefTag, Expected: exp, Actual: act, Offset: 5 * ieWB, Key: sig.RKey})
	sameBytes(t, "stream with the bad tuple passed", got, w)
	copy(pbuf, goodMeta)

	// LOCAL_INV of the signature key: no more access through it.
	old := sig.RKey
	ea.run("LOCAL_INV", localInv(8, old), AnyLen)
	if s.wireHook != nil {
		s.wireHook(nil)
	}
	ieReadFails(t, "READ through the invalidated signature key", a, b, old, 9)
	regSig(10)
	sameBytes(t, "READ after REG_SIG_MR again", readAll("READ after REG_SIG_MR again", sig.RKey, 11), good)
	// REG_SIG_MR too needs CheckMRStatus since the last registration
	// (mlx5's set_sig_umr_wr): refused at post, nothing posted.
	ea.run("LOCAL_INV", localInv(12, sig.RKey), AnyLen)
	sig.IncKey()
	if n, err := ea.qp.PostSend([]verbs.SendWR{{WRID: 13, Opcode: verbs.WRRegSigMR, Flags: verbs.SendSignaled, MR: sig.MR,
		SG: []verbs.SGE{dmr.SGE(0, ieDataLen)}, Prot: &prot, Access: sigAccess}}); n != 0 || !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("REG_SIG_MR without a status check: posted %d, %v; want 0, ErrInvalid", n, err)
	}
	Quiet(t, ea.scq, quiet, "refused REG_SIG_MR")
	sig.status("signature MR status", nil)
	regSig(14)
}

// ieSendWithInv: the peer invalidates the host's signature key with
// SEND_WITH_INV (the signature UMR enables remote invalidation): access
// through it fails afterwards, and the key, free again, registers without
// a LOCAL_INV.
func ieSendWithInv(t *testing.T, s *suite) {
	a, b, ea, eb, hm, data := ieInsertPair(t, s)
	sg := a.sg(ieHData, ieDataLen)
	key := hm.regWait(sg, nil, ieInsertStrip, 1)
	ieReadOK(t, "READ through the signature key", eb, key, data, 2)

	ea.recv(rwr(3, a.mr.SGE(ieSpare, 64)))
	fill(b.buf[ieSpare:ieSpare+32], 0x19)
	eb.run("SEND_WITH_INV", verbs.SendWR{WRID: 4, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, SG: b.sg(ieSpare, 32), InvalidateRKey: key}, AnyLen)
	Check(t, "receive of SEND_WITH_INV", Poll1(t, ea.rcq), Want{WRID: 3, Op: verbs.WCRecv, Len: 32, Imm: key, WithInv: true})
	sameBytes(t, "received", a.buf[ieSpare:ieSpare+32], b.buf[ieSpare:ieSpare+32])

	ieReadFails(t, "READ through the remotely invalidated key", a, b, key, 5)
	hm.status("status", nil)
	hm.IncKey()
	hm.postReg(6) // no LOCAL_INV: the key is free
	ieReadOK(t, "READ through the key registered again", eb, hm.RKey, data, 7)
	hm.status("status", nil)
}

// ieChained: the rw.c pattern, one post per I/O: LOCAL_INV and
// REG_MR_INTEGRITY unsignaled, chained before the RDMA WRITE that gathers
// through the new key (PASS, memory PI checked). The registration is in
// place before the WRITE runs, and each I/O's error is reported under its
// own key.
func ieChained(t *testing.T, s *suite) {
	a, b, ea, _ := s.sigPair(t)
	hm := ea.sigMR(1, 1)
	data := pattern(ieDataLen, 0x6C)
	good := ieStream(t, data)
	for i, typ := range []verbs.SigErrType{verbs.SigBadRefTag, verbs.SigBadGuard, verbs.SigBadAppTag, verbs.SigBadRefTag} {
		k := (2*i + 1) % ieBlocks
		w := append([]byte(nil), good...)
		exp, act := ieCorrupt(typ, w, k)
		d, m := ieSplit(w)
		copy(a.buf[ieHData:], d)
		copy(a.buf[ieHMeta:], m)
		hm.mapPI(a.sg(ieHData, ieDataLen), a.sg(ieHMeta, ieMetaLen), iePass)
		var wrs []verbs.SendWR
		if i > 0 {
			wrs = append(wrs, verbs.SendWR{WRID: 1, Opcode: verbs.WRLocalInv, InvalidateRKey: hm.RKey})
		}
		hm.IncKey()
		clear(b.buf[:ieWLen])
		wrs = append(wrs, verbs.SendWR{WRID: 2, Opcode: verbs.WRRegMRIntegrity, MR: hm.MR, Access: sigAccess},
			write(3, hm.wireSGE(0, ieWLen), b.mr.Addr, b.mr.RKey))
		ea.post(wrs...)
		Check(t, "RDMA WRITE chained after the registration", Poll1(t, ea.scq), Want{WRID: 3, Op: verbs.WCRDMAWrite, Len: AnyLen})
		hm.wantErr(fmt.Sprintf("I/O %d", i), verbs.SigErr{Type: typ, Expected: exp, Actual: act, Offset: uint64(k * ieWB), Key: hm.RKey})
		sameBytes(t, "wire stream at the peer", b.buf[:ieWLen], w)
	}
}

// ieErrorCQ: the signature error CQE goes to the send CQ of the QP that
// served the access: of two host QPs in the PD of the signature key, each
// serving a peer, only the one that served the bad WRITE reports it.
func ieErrorCQ(t *testing.T, s *suite) {
	a, b, e1, p1, hm, _ := ieInsertPair(t, s)
	e2, p2 := sigLink(t, a, b)
	key := hm.regWait(a.sg(ieHData, ieDataLen), nil, ieInsertStrip, 1)
	w := ieStream(t, pattern(ieDataLen, 0x7E))
	exp, act := ieCorrupt(verbs.SigBadGuard, w, 4)
	copy(b.buf[ieSpare:], w)
	p2.run("WRITE through the second QP", write(2, b.mr.SGE(ieSpare, ieWLen), 0, key), AnyLen)
	Quiet(t, e1.scq, quiet, "send CQ of the host QP that did not serve the WRITE")
	if e, err := hm.CheckMRStatus(); e != nil || err != nil {
		t.Errorf("CheckMRStatus before the serving QP's CQ was polled = %+v, %v; want nothing recorded yet", e, err)
	}
	hm.on(e2).wantErr("after polling the serving QP's send CQ", verbs.SigErr{Type: verbs.SigBadGuard, Expected: exp, Actual: act, Offset: 4 * ieWB, Key: key})
	Quiet(t, p1.scq, 0, "the other peer")
}
