package hcatest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
)

// integrityRecipeScenarios are the integrity offload recipes (NVMe-oF,
// iSER): PI inserted, stripped, passed and translated by the HCA.
//
// Every recipe runs between a host (the local side) and a target (the
// remote side) through the public verbs API only: an integrity MR is
// mapped with MapSGPI, given its signature attributes, its key bumped and
// registered with an unsignaled REG_MR_INTEGRITY, as the kernel ULPs do.
// The expected bytes in memory and on the wire come from package t10dif
// and, where a public vector fits, from testvectors/public.jsonl (the case
// ids are named next to the embedded values). The wire stream is observed
// in the peer's plain memory: whatever crosses the wire lands there
// unchanged. After every transfer the send CQ of the QP that owns the
// access (where a SIG_ERR CQE would go) is polled and CheckMRStatus is
// asked, so that a clean transfer is proven clean and a PI error is
// compared with the one t10dif finds.
var integrityRecipeScenarios = []scenario{
	{"NVMeHostInsertPA", rcpHostInsertPA},
	{"NVMeHostStripPA", rcpHostStripPA},
	{"NVMeHostInsertMTT4096", rcpHostInsertMTT},
	{"NVMeHostStripKLM", rcpHostStripKLM},
	{"HostPassRead", rcpHostPassRead},
	{"HostPassWriteMTT4096", rcpHostPassWrite},
	{"TargetPassLocalKLM", rcpTargetPassLocal},
	{"TargetStripLocal", rcpTargetStripLocal},
	{"TargetInsertLocal", rcpTargetInsertLocal},
	{"ISERTranslateToWire", rcpISERToWire},
	{"ISERTranslateToMemory", rcpISERToMemory},
	{"Type3Escape", rcpType3Escape},
	{"Type1Escapes", rcpType1Escapes},
	{"AppTagCheckMask", rcpAppTagMask},
	{"RemoteInvalidate", rcpRemoteInvalidate},
	{"WireOffsets", rcpWireOffsets},
	{"GuardSeed", rcpGuardSeed},
}

// rcpAccess is the access an NVMe host gives its integrity MR.
const rcpAccess = verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite

// rcpCmdOff is where each node keeps its command capsules (away from the
// data regions the scenarios use).
const rcpCmdOff = bufSize - 256

// rcpPair opens the host (local) and target (remote) sides with connected
// integrity-enabled endpoints.
func rcpPair(t *testing.T, s *suite) (h, g *node, he, ge *ep) {
	t.Helper()
	h, g = s.pair(t)
	he, ge = h.ep(&epOpts{integrity: true}), g.ep(&epOpts{integrity: true})
	connect(t, he, ge, nil, nil)
	return h, g, he, ge
}

// rcpAllocMR allocates an integrity MR in the node's PD.
func rcpAllocMR(t testing.TB, n *node, maxData, maxMeta int) *verbs.MR {
	t.Helper()
	mr, err := n.pd.AllocMRIntegrity(maxData, maxMeta)
	if err != nil {
		t.Fatalf("alloc integrity mr %d+%d: %v", maxData, maxMeta, err)
	}
	return mr
}

func rcpSum(l []verbs.SGE) uint64 {
	n := uint64(0)
	for _, s := range l {
		n += uint64(s.Length)
	}
	return n
}

// rcpReg maps data and meta into mr, sets the attributes, bumps the key
// and posts an unsignaled REG_MR_INTEGRITY on e (the ULP recipe): the WR
// that follows on e is ordered after it. It checks what MapSGPI promises:
// a zero-based MR of the memory-domain length, MetaLength the metadata
// bytes (kept by SetSigAttrs).
func rcpReg(t testing.TB, e *ep, mr *verbs.MR, data, meta []verbs.SGE, a verbs.SigAttrs) {
	t.Helper()
	if err := mr.MapSGPI(data, meta); err != nil {
		t.Fatalf("map sg pi (%d data, %d meta entries): %v", len(data), len(meta), err)
	}
	dl, ml := rcpSum(data), rcpSum(meta)
	if mr.Addr != 0 || mr.Len != dl+ml {
		t.Errorf("mapped integrity MR at %#x+%d, want zero-based with %d+%d bytes", mr.Addr, mr.Len, dl, ml)
	}
	mr.SetSigAttrs(a)
	got := mr.SigAttrs()
	if got.MetaLength != uint32(ml) {
		t.Errorf("MetaLength %d after MapSGPI and SetSigAttrs, want %d", got.MetaLength, ml)
	}
	if got.CheckMask != a.CheckMask || got.Mem != a.Mem || got.Wire != a.Wire {
		t.Errorf("SigAttrs %+v, want %+v", got, a)
	}
	old := mr.RKey
	mr.IncKey()
	if mr.RKey == old || mr.RKey>>8 != old>>8 || mr.LKey != mr.RKey {
		t.Errorf("IncKey: %#x → lkey %#x rkey %#x; want the same index with another variant", old, mr.LKey, mr.RKey)
	}
	e.post(verbs.SendWR{WRID: 0xAE6, Opcode: verbs.WRRegMRIntegrity, MR: mr, Access: rcpAccess})
}

// rcpCmd sends a 64-byte command capsule from one side to the other
// (signaled SEND into a posted receive) and checks both completions and
// the bytes: after a host's REG_MR_INTEGRITY it tells the target that the
// key is usable, after a target's RDMA it is the response.
func rcpCmd(t testing.TB, from, to *ep, id uint64) {
	t.Helper()
	fill(from.n.buf[rcpCmdOff:rcpCmdOff+64], byte(id))
	clear(to.n.buf[rcpCmdOff+64 : rcpCmdOff+128])
	to.recv(rwr(id, to.n.mr.SGE(rcpCmdOff+64, 64)))
	from.post(send(id, from.n.mr.SGE(rcpCmdOff, 64)))
	check(t, "command capsule send", poll1(t, from.scq), want{wrid: id, op: verbs.WCSend, len: anyLen, qpn: from.qp.QPN()})
	check(t, "command capsule receive", poll1(t, to.rcq), want{wrid: id, op: verbs.WCRecv, len: 64, qpn: to.qp.QPN()})
	sameBytes(t, "command capsule", to.n.buf[rcpCmdOff+64:rcpCmdOff+128], from.n.buf[rcpCmdOff:rcpCmdOff+64])
}

// rcpInv posts a signaled LOCAL_INV of mr's key and checks its completion.
func rcpInv(t testing.TB, e *ep, mr *verbs.MR, id uint64) {
	t.Helper()
	e.post(verbs.SendWR{WRID: id, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: mr.RKey})
	check(t, "LOCAL_INV of the signature key", poll1(t, e.scq), want{wrid: id, op: verbs.WCLocalInv, len: anyLen, qpn: e.qp.QPN()})
}

// rcpStatus polls e's send CQ (where the SIG_ERR CQE of an access by e's
// QP, or served by it, goes; it yields no work completion) and checks the
// MR status against want (nil: no error), a mismatch as t10dif reports it
// for the same stream. A reported error must be cleared by reading it.
func rcpStatus(t testing.TB, e *ep, mr *verbs.MR, what string, want *t10dif.Error) {
	t.Helper()
	quietCQ(t, e.scq, quiet, what+": send CQ of the MR owner")
	got, err := mr.CheckMRStatus()
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
		if got.Type != typ || got.Offset != want.ProtectedOffset || got.Expected != uint32(want.Expected) ||
			got.Actual != uint32(want.Actual) || got.Key != mr.RKey {
			t.Errorf("%s: signature error {%v offset %d expected %#x actual %#x key %#x}, want {%v offset %d expected %#x actual %#x key %#x}",
				what, got.Type, got.Offset, got.Expected, got.Actual, got.Key, typ, want.ProtectedOffset, want.Expected, want.Actual, mr.RKey)
		}
		if again, _ := mr.CheckMRStatus(); again != nil {
			t.Errorf("%s: the signature error was reported twice: %+v", what, again)
		}
	}
}

// rcpDomain is a T10 PI (8-byte tuple) domain with its type's default
// reference-tag and escape rules and the app tag fully compared.
func rcpDomain(typ t10dif.DIFType, g t10dif.GuardType, iv int, ref uint32, app uint16) t10dif.Domain {
	return t10dif.Domain{Format: t10dif.FormatPI8, Guard: g, Type: typ, Interval: iv, RefTag: uint64(ref), AppTag: app, AppTagMask: 0xFFFF}
}

// rcpSigDomain is the RDMA signature domain of a t10dif domain, as the
// NVMe and iSER ULPs set it: ref_remap for an incrementing ref tag,
// app_escape always, ref_escape with the app-and-ref escape (Type 3).
func rcpSigDomain(d t10dif.Domain) verbs.SigDomain {
	sd := verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: uint32(d.Interval), Bg: uint16(d.Seed),
		AppTag: d.AppTag, RefTag: uint32(d.RefTag), ApptagCheckMask: d.AppTagMask}
	if d.Guard == t10dif.GuardIPChecksum {
		sd.BgType = verbs.BgCSUM
	}
	ref, esc := d.Ref, d.Escape
	if ref == t10dif.RefDefault {
		ref = t10dif.RefIncrement
		if d.Type == t10dif.Type3 {
			ref = t10dif.RefConstant
		}
	}
	if esc == t10dif.EscapeDefault {
		esc = t10dif.EscapeApp
		if d.Type == t10dif.Type3 {
			esc = t10dif.EscapeAppRef
		}
	}
	sd.RefRemap = ref == t10dif.RefIncrement
	sd.AppEscape = esc == t10dif.EscapeApp || esc == t10dif.EscapeAppRef
	sd.RefEscape = esc == t10dif.EscapeAppRef
	return sd
}

// rcpGen is t10dif's INSERT of data: the interleaved stream.
func rcpGen(t testing.TB, d t10dif.Domain, data []byte) []byte {
	t.Helper()
	out := make([]byte, len(data)/d.Interval*(d.Interval+8))
	if _, err := t10dif.Generate(d, t10dif.Buf{Data: out}, data); err != nil {
		t.Fatalf("t10dif generate: %v", err)
	}
	return out
}

// rcpGenMeta is t10dif's INSERT of data into a separate metadata buffer:
// the tuples.
func rcpGenMeta(t testing.TB, d t10dif.Domain, data []byte) []byte {
	t.Helper()
	d.Separate = true
	out, meta := make([]byte, len(data)), make([]byte, len(data)/d.Interval*8)
	if _, err := t10dif.Generate(d, t10dif.Buf{Data: out, Meta: meta}, data); err != nil {
		t.Fatalf("t10dif generate (separate): %v", err)
	}
	return meta
}

// rcpInterleave builds the protected stream of data and its tuples.
func rcpInterleave(data, meta []byte, iv int) []byte {
	var out []byte
	for i := 0; i*iv < len(data); i++ {
		out = append(out, data[i*iv:(i+1)*iv]...)
		out = append(out, meta[i*8:(i+1)*8]...)
	}
	return out
}

// rcpSplit returns the data and the tuples of a protected stream.
func rcpSplit(stream []byte, iv int) (data, meta []byte) {
	for off := 0; off+iv+8 <= len(stream); off += iv + 8 {
		data = append(data, stream[off:off+iv]...)
		meta = append(meta, stream[off+iv:off+iv+8]...)
	}
	return data, meta
}

// rcpTuple overwrites tuple i of a metadata buffer (or, with iv > 0, of
// an interleaved stream).
func rcpTuple(b []byte, iv, i int, guard, app uint16, ref uint32) {
	p := b[i*8:]
	if iv > 0 {
		p = b[i*(iv+8)+iv:]
	}
	binary.BigEndian.PutUint16(p, guard)
	binary.BigEndian.PutUint16(p[2:], app)
	binary.BigEndian.PutUint32(p[4:], ref)
}

func rcpGuardOf(b []byte, iv, i int) uint16 {
	return binary.BigEndian.Uint16(b[i*(iv+8)+iv:])
}

// rcpVerify is t10dif's verdict on a protected stream (nil: clean).
func rcpVerify(t testing.TB, d t10dif.Domain, check t10dif.CheckMask, stream []byte) *t10dif.Error {
	t.Helper()
	err := t10dif.Verify(d, check, t10dif.Buf{Data: stream})
	if err == nil {
		return nil
	}
	e, ok := err.(*t10dif.Error)
	if !ok {
		t.Fatalf("t10dif verify: %v", err)
	}
	return e
}

// rcpHex decodes a vector's hex string.
func rcpHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex in a vector: %v", err)
	}
	return b
}

// rcpSHA checks a vector's SHA-256 of the bytes built from it.
func rcpSHA(t testing.TB, what string, b []byte, want string) {
	t.Helper()
	if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != want {
		t.Errorf("%s: sha256 %x, want %s", what, got, want)
	}
}

// rcpSplitMix64 is the vectors' "splitmix64" data spec (FORMAT.md §2).
func rcpSplitMix64(seed uint64, n int) []byte {
	out := make([]byte, 0, n+8)
	st := seed
	for len(out) < n {
		st += 0x9E3779B97F4A7C15
		z := st
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		z ^= z >> 31
		out = binary.LittleEndian.AppendUint64(out, z)
	}
	return out[:n]
}

// rcpPattern is the vectors' "pattern" data specs.
func rcpPattern(n int, f func(i int) byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = f(i)
	}
	return b
}

// rcpGather concatenates the bytes of buf that sges (offsets into the
// node's main MR) address.
func rcpGather(n *node, sges []verbs.SGE) []byte {
	var out []byte
	for _, s := range sges {
		off := int(s.Addr - n.mr.Addr)
		out = append(out, n.buf[off:off+int(s.Length)]...)
	}
	return out
}

// rcpScatter copies b into the node's buffer pieces that sges address.
func rcpScatter(n *node, sges []verbs.SGE, b []byte) {
	for _, s := range sges {
		off := int(s.Addr - n.mr.Addr)
		b = b[copy(n.buf[off:off+int(s.Length)], b):]
	}
}

// rcpHostInsertPA is the NVMe-oF host's write (PRACT, memory NONE, wire
// T10-DIF) with its data in one SGE (PA mapping): the target RDMA READs
// the host's data through the signature rkey and gets it with PI
// inserted. The data and expected PI are vector pub-0082 (Type 1, CRC,
// 4 × 512 bytes incrementing, ref tag 0xfffffffe wrapping, app 0xbeef).
func rcpHostInsertPA(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks = 512, 4
	data := rcpPattern(iv*blocks, func(i int) byte { return byte(i) })
	copy(h.buf, data)
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0xfffffffe, 0xbeef)
	mr := rcpAllocMR(t, h, 4, 4)
	// NVMe host: check_mask guard | ref (PRCHK_GUARD, PRCHK_REF).
	a := verbs.SigAttrs{CheckMask: 0xCF, Wire: rcpSigDomain(d)}
	// Signaled here (PA: the signature UMR is the only signaled WQE).
	if err := mr.MapSGPI([]verbs.SGE{h.mr.SGE(0, iv*blocks)}, nil); err != nil {
		t.Fatalf("map sg pi: %v", err)
	}
	if mr.Addr != 0 || mr.Len != iv*blocks || mr.SigAttrs().MetaLength != 0 {
		t.Errorf("mapped at %#x+%d meta %d, want 0+%d meta 0", mr.Addr, mr.Len, mr.SigAttrs().MetaLength, iv*blocks)
	}
	mr.SetSigAttrs(a)
	mr.IncKey()
	he.post(verbs.SendWR{WRID: 0x51, Opcode: verbs.WRRegMRIntegrity, Flags: verbs.SendSignaled, MR: mr, Access: rcpAccess})
	check(t, "signaled REG_MR_INTEGRITY", poll1(t, he.scq), want{wrid: 0x51, op: verbs.WCRegMR, len: anyLen, qpn: he.qp.QPN()})
	rcpCmd(t, he, ge, 1)
	wlen := blocks * (iv + 8)
	clear(g.buf[:wlen+64])
	ge.post(read(2, g.mr.SGE(0, wlen), 0, mr.RKey))
	check(t, "target RDMA READ through the host's signature rkey", poll1(t, ge.scq), want{wrid: 2, op: verbs.WCRDMARead, len: wlen})
	sameBytes(t, "wire stream (host data with PI inserted) vs t10dif generate", g.buf[:wlen], rcpGen(t, d, data))
	_, pi := rcpSplit(g.buf[:wlen], iv)
	// pub-0082 expected.pi_hex.
	sameBytes(t, "inserted PI vs vector pub-0082", pi, rcpHex(t, "4f10beeffffffffe4f10beefffffffff4f10beef000000004f10beef00000001"))
	rcpSHA(t, "wire stream vs pub-0082 output_sha256", g.buf[:wlen], "e3683105f9768b8a550ba0c8d53318ee880ebd4dabe3ee3b43b84c5a1e328591")
	sameBytes(t, "bytes after the read", g.buf[wlen:wlen+64], make([]byte, 64))
	sameBytes(t, "host memory untouched", h.buf[:iv*blocks], data)
	rcpStatus(t, he, mr, "after the insert", nil)
	rcpCmd(t, ge, he, 3) // the response capsule
}

// rcpHostStripPA is the NVMe-oF host's read (memory NONE, wire T10-DIF,
// PA): the target RDMA WRITEs the protected stream into the host's
// signature rkey and host memory receives the data stripped. The first
// I/O uses vector pub-0064 (Type 2, CRC, 9 × 512 bytes of 0xff, ref
// 0x3a38b, app 0x9b18); the MR is then invalidated and re-registered for a
// second I/O with another ref tag, which must be the one checked.
func rcpHostStripPA(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv = 512
	mr := rcpAllocMR(t, h, 4, 4)

	// pub-0064: the stream is the data with the vector's tuples.
	data := bytes.Repeat([]byte{0xff}, 9*iv)
	pi := rcpHex(t, "e6a19b180003a38be6a19b180003a38ce6a19b180003a38de6a19b180003a38ee6a19b180003a38fe6a19b180003a390e6a19b180003a391e6a19b180003a392e6a19b180003a393")
	stream := rcpInterleave(data, pi, iv)
	rcpSHA(t, "pub-0064 stream", stream, "d790abb93ada7cf9d09cced7735314eea921853bb503ae9027e80187f89a648c")
	d := rcpDomain(t10dif.Type2, t10dif.GuardCRC16, iv, 0x3a38b, 0x9b18)
	copy(g.buf, stream)
	fill(h.buf[:len(data)+64], 0x3C)
	before := append([]byte(nil), h.buf[len(data):len(data)+64]...)
	rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(0, len(data))}, nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d)})
	key1 := mr.RKey
	rcpCmd(t, he, ge, 1)
	ge.post(write(2, g.mr.SGE(0, len(stream)), 0, mr.RKey))
	check(t, "target RDMA WRITE into the host's signature rkey", poll1(t, ge.scq), want{wrid: 2, op: verbs.WCRDMAWrite, len: anyLen})
	rcpCmd(t, ge, he, 3)
	sameBytes(t, "host memory (stream stripped)", h.buf[:len(data)], data)
	sameBytes(t, "host memory after the data", h.buf[len(data):len(data)+64], before)
	rcpStatus(t, he, mr, "after the pub-0064 strip", nil)

	// Second I/O: invalidate, new data region and ref tag.
	rcpInv(t, he, mr, 4)
	const off2, n2 = 16384, 6 * iv
	data2 := pattern(n2, 0x17)
	d2 := rcpDomain(t10dif.Type2, t10dif.GuardCRC16, iv, 0x70000000, 0x9b18)
	stream2 := rcpGen(t, d2, data2)
	copy(g.buf[off2:], stream2)
	clear(h.buf[off2 : off2+n2])
	rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(off2, n2)}, nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d2)})
	if mr.RKey == key1 {
		t.Errorf("re-registration kept key %#x", key1)
	}
	rcpCmd(t, he, ge, 5)
	ge.post(write(6, g.mr.SGE(off2, len(stream2)), 0, mr.RKey))
	check(t, "second RDMA WRITE", poll1(t, ge.scq), want{wrid: 6, op: verbs.WCRDMAWrite, len: anyLen})
	rcpCmd(t, ge, he, 7)
	sameBytes(t, "host memory of the second I/O", h.buf[off2:off2+n2], data2)
	sameBytes(t, "first I/O's memory untouched by the second", h.buf[:len(data)], data)
	rcpStatus(t, he, mr, "after the re-registered strip", nil)
}

// rcpHostInsertMTT: the host write with interval 4096 and its data in
// three page-aligned pieces out of order (MTT mapping); blocks straddle
// the pieces. The target reads the whole wire stream, then block 1 alone
// at its wire offset: its ref tag is the key's first ref tag + 1.
func rcpHostInsertMTT(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks = 4096, 2
	sges := []verbs.SGE{h.mr.SGE(3*4096+1024, 3072), h.mr.SGE(1*4096, 4096), h.mr.SGE(2*4096, 1024)}
	fill(h.buf[:8*4096], 0x61)
	data := rcpGather(h, sges)
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x5000, 0x4242)
	mr := rcpAllocMR(t, h, 4, 4)
	rcpReg(t, he, mr, sges, nil, verbs.SigAttrs{CheckMask: 0xCF, Wire: rcpSigDomain(d)})
	rcpCmd(t, he, ge, 1)
	wlen := blocks * (iv + 8)
	want1 := rcpGen(t, d, data)
	ge.post(read(2, g.mr.SGE(0, wlen), 0, mr.RKey))
	check(t, "RDMA READ of the whole wire stream", poll1(t, ge.scq), want{wrid: 2, op: verbs.WCRDMARead, len: wlen})
	sameBytes(t, "wire stream vs t10dif generate", g.buf[:wlen], want1)
	// Block 1 alone, at wire offset iv+8.
	ge.post(read(3, g.mr.SGE(16384, iv+8), iv+8, mr.RKey))
	check(t, "RDMA READ of block 1", poll1(t, ge.scq), want{wrid: 3, op: verbs.WCRDMARead, len: iv + 8})
	sameBytes(t, "block 1 read at its wire offset", g.buf[16384:16384+iv+8], want1[iv+8:])
	if ref := binary.BigEndian.Uint32(g.buf[16384+iv+4:]); ref != 0x5001 {
		t.Errorf("block 1's ref tag %#x, want 0x5001", ref)
	}
	rcpStatus(t, he, mr, "after the inserts", nil)
	rcpCmd(t, ge, he, 4)
}

// rcpHostStripKLM: the host read with its data in three unaligned pieces
// (KLM mapping). The target writes the stream in two RDMA WRITEs at their
// wire offsets (blocks 0–2, then 3–7): ref tags count from the key's
// first block, so the stream is clean; host memory gets it stripped.
func rcpHostStripKLM(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks = 512, 8
	sges := []verbs.SGE{h.mr.SGE(100, 1000), h.mr.SGE(5003, 2000), h.mr.SGE(12007, 1096)}
	data := pattern(iv*blocks, 0x29)
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x2000, 0x0101)
	stream := rcpGen(t, d, data)
	copy(g.buf, stream)
	fill(h.buf[:16384], 0xEE)
	keep := append([]byte(nil), h.buf[:16384]...)
	mr := rcpAllocMR(t, h, 4, 4)
	rcpReg(t, he, mr, sges, nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d)})
	rcpCmd(t, he, ge, 1)
	split := 3 * (iv + 8)
	ge.post(write(2, g.mr.SGE(0, split), 0, mr.RKey), write(3, g.mr.SGE(split, len(stream)-split), uint64(split), mr.RKey))
	wcs := poll(t, ge.scq, 2)
	check(t, "WRITE of blocks 0-2", wcs[0], want{wrid: 2, op: verbs.WCRDMAWrite, len: anyLen})
	check(t, "WRITE of blocks 3-7", wcs[1], want{wrid: 3, op: verbs.WCRDMAWrite, len: anyLen})
	rcpCmd(t, ge, he, 4)
	sameBytes(t, "host pieces (stripped)", rcpGather(h, sges), data)
	// Nothing around the pieces was written.
	rcpScatter(h, sges, rcpGather(&node{buf: keep, mr: h.mr}, sges))
	sameBytes(t, "host memory around the pieces", h.buf[:16384], keep)
	rcpStatus(t, he, mr, "after the strip", nil)
}

// rcpHostPassRead: PASS (PI in host memory as a separate metadata buffer,
// and on the wire, same parameters, check mask 0xFF): the target READs the
// protected stream, with the memory tuples copied through. Block 5 carries
// an escaped tuple (app 0xffff) with a bad guard and ref tag: it is not
// checked and is copied as it is, not regenerated.
func rcpHostPassRead(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks, metaOff = 512, 8, 16384
	data := pattern(iv*blocks, 0x44)
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x100, 0x5a5a)
	meta := rcpGenMeta(t, d, data)
	rcpTuple(meta, 0, 5, binary.BigEndian.Uint16(meta[5*8:])^0x1234, 0xFFFF, 0xdeadbeef)
	copy(h.buf, data)
	copy(h.buf[metaOff:], meta)
	sd := rcpSigDomain(d)
	mr := rcpAllocMR(t, h, 4, 4)
	rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(0, len(data))}, []verbs.SGE{h.mr.SGE(metaOff, len(meta))},
		verbs.SigAttrs{CheckMask: 0xFF, Mem: sd, Wire: sd})
	rcpCmd(t, he, ge, 1)
	wlen := blocks * (iv + 8)
	ge.post(read(2, g.mr.SGE(0, wlen), 0, mr.RKey))
	check(t, "RDMA READ of the passed stream", poll1(t, ge.scq), want{wrid: 2, op: verbs.WCRDMARead, len: wlen})
	sameBytes(t, "wire stream (memory data and tuples interleaved)", g.buf[:wlen], rcpInterleave(data, meta, iv))
	if e := rcpVerify(t, d, t10dif.CheckAll, g.buf[:wlen]); e != nil {
		t.Errorf("t10dif finds the passed stream bad: %v", e)
	}
	rcpStatus(t, he, mr, "after the pass (escaped block 5)", nil)
	rcpCmd(t, ge, he, 3)
}

// rcpHostPassWrite: PASS from the wire into host memory, interval 4096,
// data in two page-aligned pieces and the metadata in a buffer of its own
// (MTT mapping): data and tuples land in their buffers, the tuples copied
// from the wire — block 1's escaped tuple (app 0xffff, bad guard and ref)
// included, unchanged.
func rcpHostPassWrite(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks, metaOff = 4096, 2, 20000
	d := rcpDomain(t10dif.Type2, t10dif.GuardCRC16, iv, 0x77, 0x1111)
	dsges := []verbs.SGE{h.mr.SGE(0, iv), h.mr.SGE(2*iv, iv)}
	msge := []verbs.SGE{h.mr.SGE(metaOff, blocks*8)}
	data := pattern(iv*blocks, 0x0D)
	stream := rcpGen(t, d, data)
	rcpTuple(stream, iv, 1, rcpGuardOf(stream, iv, 1)^0x8001, 0xFFFF, 0x12345)
	copy(g.buf, stream)
	fill(h.buf[:32768], 0xA5)
	between := append([]byte(nil), h.buf[iv:2*iv]...)
	sd := rcpSigDomain(d)
	mr := rcpAllocMR(t, h, 4, 4)
	rcpReg(t, he, mr, dsges, msge, verbs.SigAttrs{CheckMask: 0xFF, Mem: sd, Wire: sd})
	rcpCmd(t, he, ge, 1)
	ge.post(write(2, g.mr.SGE(0, len(stream)), 0, mr.RKey))
	check(t, "RDMA WRITE of the protected stream", poll1(t, ge.scq), want{wrid: 2, op: verbs.WCRDMAWrite, len: anyLen})
	rcpCmd(t, ge, he, 3)
	wd, wm := rcpSplit(stream, iv)
	sameBytes(t, "host data pieces", rcpGather(h, dsges), wd)
	sameBytes(t, "host metadata buffer (tuples copied through)", rcpGather(h, msge), wm)
	sameBytes(t, "host page between the data pieces", h.buf[iv:2*iv], between)
	rcpStatus(t, he, mr, "after the pass (escaped block 1)", nil)
}

// rcpTargetPassLocal is the NVMe target without PRACT using its own
// integrity key as a local key (PASS both ways, memory data and metadata
// each in two unaligned pieces: KLM mapping): it RDMA READs the host's
// protected stream into its signature lkey (data and tuples separate in
// its memory), then, after LOCAL_INV and a new registration, RDMA WRITEs
// from its signature lkey into the host's plain memory (interleaved).
func rcpTargetPassLocal(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks = 512, 4
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0xA000, 0x0BAD)
	data := pattern(iv*blocks, 0x71)
	stream := rcpGen(t, d, data)
	copy(h.buf, stream)
	dsges := []verbs.SGE{g.mr.SGE(100, 1500), g.mr.SGE(3005, 548)}
	msges := []verbs.SGE{g.mr.SGE(9000, 16), g.mr.SGE(9100, 16)}
	sd := rcpSigDomain(d)
	a := verbs.SigAttrs{CheckMask: 0xFF, Mem: sd, Wire: sd}
	mr := rcpAllocMR(t, g, 4, 4)
	rcpReg(t, ge, mr, dsges, msges, a)
	wlen := len(stream)
	if mr.Len != uint64(wlen) {
		t.Errorf("memory-domain length %d, want %d (data + metadata = wire length with PI on both)", mr.Len, wlen)
	}
	ge.post(read(1, verbs.SGE{Addr: 0, Length: uint32(mr.Len), LKey: mr.LKey}, h.mr.Addr, h.mr.RKey))
	check(t, "RDMA READ into the signature lkey", poll1(t, ge.scq), want{wrid: 1, op: verbs.WCRDMARead, len: wlen})
	wd, wm := rcpSplit(stream, iv)
	sameBytes(t, "target data pieces", rcpGather(g, dsges), wd)
	sameBytes(t, "target metadata pieces", rcpGather(g, msges), wm)
	rcpStatus(t, ge, mr, "after the READ into the signature lkey", nil)

	// The other way: the memory (with a changed block 2) goes out.
	rcpInv(t, ge, mr, 2)
	data2 := pattern(iv*blocks, 0x13)
	meta2 := rcpGenMeta(t, d, data2)
	rcpScatter(g, dsges, data2)
	rcpScatter(g, msges, meta2)
	rcpReg(t, ge, mr, dsges, msges, a)
	const dst = 16384
	ge.post(write(3, verbs.SGE{Addr: 0, Length: uint32(mr.Len), LKey: mr.LKey}, h.mr.Addr+dst, h.mr.RKey))
	check(t, "RDMA WRITE from the signature lkey", poll1(t, ge.scq), want{wrid: 3, op: verbs.WCRDMAWrite, len: anyLen})
	rcpCmd(t, ge, he, 4)
	sameBytes(t, "host memory (target memory interleaved on the wire)", h.buf[dst:dst+wlen], rcpInterleave(data2, meta2, iv))
	rcpStatus(t, ge, mr, "after the WRITE from the signature lkey", nil)
}

// rcpTargetStripLocal is the NVMe target with PRACT on a host read (PI in
// its memory as separate metadata, none on the wire): it RDMA WRITEs from
// its signature lkey (length = data only, as rw.c subtracts meta_length)
// into the host's plain memory, which gets the data stripped; after a new
// registration it SENDs from the signature lkey, and the host receives the
// stripped data. Type 3 (constant ref tag).
func rcpTargetStripLocal(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks, metaOff = 512, 4, 4096
	d := rcpDomain(t10dif.Type3, t10dif.GuardCRC16, iv, 0x00ABCDEF, 0x3333)
	data := pattern(iv*blocks, 0x5B)
	meta := rcpGenMeta(t, d, data)
	copy(g.buf, data)
	copy(g.buf[metaOff:], meta)
	dsge, msge := []verbs.SGE{g.mr.SGE(0, len(data))}, []verbs.SGE{g.mr.SGE(metaOff, len(meta))}
	a := verbs.SigAttrs{CheckMask: 0xFF, Mem: rcpSigDomain(d)} // wire NONE
	mr := rcpAllocMR(t, g, 4, 4)
	rcpReg(t, ge, mr, dsge, msge, a)
	n := uint32(mr.Len) - mr.SigAttrs().MetaLength
	if n != uint32(len(data)) {
		t.Fatalf("wire length %d (Len %d - MetaLength %d), want %d", n, mr.Len, mr.SigAttrs().MetaLength, len(data))
	}
	fill(h.buf[:8192], 0xC3)
	after := append([]byte(nil), h.buf[len(data):len(data)+64]...)
	ge.post(write(1, verbs.SGE{Addr: 0, Length: n, LKey: mr.LKey}, h.mr.Addr, h.mr.RKey))
	check(t, "RDMA WRITE from the signature lkey", poll1(t, ge.scq), want{wrid: 1, op: verbs.WCRDMAWrite, len: anyLen})
	rcpCmd(t, ge, he, 2)
	sameBytes(t, "host memory (target data, PI stripped)", h.buf[:len(data)], data)
	sameBytes(t, "host memory after the data", h.buf[len(data):len(data)+64], after)
	rcpStatus(t, ge, mr, "after the WRITE", nil)

	rcpInv(t, ge, mr, 3)
	rcpReg(t, ge, mr, dsge, msge, a)
	clear(h.buf[8192 : 8192+4096])
	he.recv(rwr(4, h.mr.SGE(8192, 4096)))
	ge.post(send(5, verbs.SGE{Addr: 0, Length: n, LKey: mr.LKey}))
	check(t, "SEND from the signature lkey", poll1(t, ge.scq), want{wrid: 5, op: verbs.WCSend, len: anyLen})
	check(t, "host receive of the stripped data", poll1(t, he.rcq), want{wrid: 4, op: verbs.WCRecv, len: len(data)})
	sameBytes(t, "received data (PI stripped)", h.buf[8192:8192+len(data)], data)
	sameBytes(t, "receive buffer after the data", h.buf[8192+len(data):8192+4096], make([]byte, 4096-len(data)))
	sameBytes(t, "target metadata unchanged", g.buf[metaOff:metaOff+len(meta)], meta)
	rcpStatus(t, ge, mr, "after the SEND", nil)
}

// rcpTargetInsertLocal is the NVMe target with PRACT on a host write (PI
// in its memory as separate metadata, none on the wire): it RDMA READs the
// host's plain data into its signature lkey and finds the data and the
// inserted tuples in its memory; after a new registration (data in two
// unaligned pieces: KLM) a SEND from the host lands on a receive through
// the signature lkey, with PI inserted.
func rcpTargetInsertLocal(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks, metaOff = 512, 4, 4096
	d := rcpDomain(t10dif.Type2, t10dif.GuardCRC16, iv, 0x10, 0xA0A0)
	data := pattern(iv*blocks, 0x66)
	copy(h.buf, data)
	a := verbs.SigAttrs{CheckMask: 0xFF, Mem: rcpSigDomain(d)}
	mr := rcpAllocMR(t, g, 4, 4)
	fill(g.buf[:8192], 0x99)
	afterMeta := append([]byte(nil), g.buf[metaOff+blocks*8:metaOff+blocks*8+64]...)
	dsge, msge := []verbs.SGE{g.mr.SGE(0, len(data))}, []verbs.SGE{g.mr.SGE(metaOff, blocks*8)}
	rcpReg(t, ge, mr, dsge, msge, a)
	ge.post(read(1, verbs.SGE{Addr: 0, Length: uint32(len(data)), LKey: mr.LKey}, h.mr.Addr, h.mr.RKey))
	check(t, "RDMA READ into the signature lkey", poll1(t, ge.scq), want{wrid: 1, op: verbs.WCRDMARead, len: len(data)})
	sameBytes(t, "target data", g.buf[:len(data)], data)
	sameBytes(t, "target metadata (PI inserted)", g.buf[metaOff:metaOff+blocks*8], rcpGenMeta(t, d, data))
	sameBytes(t, "target memory after the metadata", g.buf[metaOff+blocks*8:metaOff+blocks*8+64], afterMeta)
	rcpStatus(t, ge, mr, "after the READ", nil)

	rcpInv(t, ge, mr, 2)
	dsge = []verbs.SGE{g.mr.SGE(10003, 1200), g.mr.SGE(13001, 848)}
	msge = []verbs.SGE{g.mr.SGE(15000, blocks*8)}
	d2 := rcpDomain(t10dif.Type2, t10dif.GuardCRC16, iv, 0x8000, 0xA0A1)
	rcpReg(t, ge, mr, dsge, msge, verbs.SigAttrs{CheckMask: 0xFF, Mem: rcpSigDomain(d2)})
	ge.recv(rwr(3, verbs.SGE{Addr: 0, Length: uint32(len(data)), LKey: mr.LKey}))
	rcpCmd(t, ge, he, 4) // the registration is done: "ready"
	data2 := pattern(iv*blocks, 0x08)
	copy(h.buf[8192:], data2)
	he.post(send(5, h.mr.SGE(8192, len(data2))))
	check(t, "host SEND", poll1(t, he.scq), want{wrid: 5, op: verbs.WCSend, len: anyLen})
	check(t, "receive through the signature lkey", poll1(t, ge.rcq), want{wrid: 3, op: verbs.WCRecv, len: len(data2)})
	sameBytes(t, "target data pieces", rcpGather(g, dsge), data2)
	sameBytes(t, "target metadata (PI inserted)", rcpGather(g, msge), rcpGenMeta(t, d2, data2))
	rcpStatus(t, ge, mr, "after the receive", nil)
}

// rcpISERToWire is iSER with IP-checksum PI in the initiator's memory
// (separate metadata) and CRC on the wire: the target reads the stream and
// gets CRC guards, tags copied. Vectors pub-0156 (Type 1, 8 × 512,
// splitmix64 seed 1168: its input PI in memory, its output PI on the
// wire) and pub-0099 (Type 1, 5 × 4096 of 0xff, app 0x1d0c: its input PI
// in memory; the wire's CRC PI from t10dif).
func rcpISERToWire(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	mr := rcpAllocMR(t, h, 4, 4)
	for i, c := range []struct {
		id            string
		iv, blocks    int
		app           uint16
		data          []byte
		inPI, inSHA   string
		outPI, outSHA string
		metaOff       int
	}{
		{id: "pub-0156", iv: 512, blocks: 8, data: rcpSplitMix64(1168, 4096),
			inPI:   "a433000000000000a1f80000000000010c1e00000000000211cf0000000000033de4000000000004751a0000000000058b77000000000006930f000000000007",
			inSHA:  "0ab7e9ad1957abfe6483e0e74a89532a44e1381b4f6d1677aa20036b1a919462",
			outPI:  "124a000000000000195a0000000000012dbb00000000000280d900000000000361020000000000044c67000000000005431c00000000000607bd000000000007",
			outSHA: "aecaa926cd3970288ad6ade82b1fe3e7056ecd71280203968f09383394dc4e55", metaOff: 8192},
		{id: "pub-0099", iv: 4096, blocks: 5, app: 0x1d0c, data: bytes.Repeat([]byte{0xff}, 5*4096),
			inPI:  "00001d0c0000000000001d0c0000000100001d0c0000000200001d0c0000000300001d0c00000004",
			inSHA: "4b8ccf73dd71538159e4cdf6659c794866441a7068a49559be11e13ef9dcc166", metaOff: 24576},
	} {
		if i > 0 {
			rcpInv(t, he, mr, uint64(10*i))
		}
		inPI := rcpHex(t, c.inPI)
		rcpSHA(t, c.id+" input", rcpInterleave(c.data, inPI, c.iv), c.inSHA)
		copy(h.buf, c.data)
		copy(h.buf[c.metaOff:], inPI)
		mem := rcpDomain(t10dif.Type1, t10dif.GuardIPChecksum, c.iv, 0, c.app)
		wire := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, c.iv, 0, c.app)
		mem.Escape, wire.Escape = t10dif.EscapeAppRef, t10dif.EscapeAppRef // iSER: app_escape and ref_escape
		rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(0, len(c.data))}, []verbs.SGE{h.mr.SGE(c.metaOff, len(inPI))},
			verbs.SigAttrs{CheckMask: 0xFF, Mem: rcpSigDomain(mem), Wire: rcpSigDomain(wire)})
		rcpCmd(t, he, ge, uint64(10*i+1))
		wlen := c.blocks * (c.iv + 8)
		clear(g.buf[:wlen])
		ge.post(read(uint64(10*i+2), g.mr.SGE(0, wlen), 0, mr.RKey))
		check(t, c.id+": RDMA READ", poll1(t, ge.scq), want{wrid: uint64(10*i + 2), op: verbs.WCRDMARead, len: wlen})
		gotData, gotPI := rcpSplit(g.buf[:wlen], c.iv)
		sameBytes(t, c.id+": data on the wire", gotData, c.data)
		sameBytes(t, c.id+": wire stream vs t10dif (CRC generated, tags copied)", g.buf[:wlen], rcpGen(t, wire, c.data))
		if c.outPI != "" {
			sameBytes(t, c.id+": wire PI vs the vector's output", gotPI, rcpHex(t, c.outPI))
			rcpSHA(t, c.id+": wire stream vs the vector's output", g.buf[:wlen], c.outSHA)
		}
		sameBytes(t, c.id+": memory metadata unchanged", h.buf[c.metaOff:c.metaOff+len(inPI)], inPI)
		rcpStatus(t, he, mr, c.id, nil)
		rcpCmd(t, ge, he, uint64(10*i+3))
	}
}

// rcpISERToMemory is iSER's read with CRC on the wire and IP-checksum PI
// in the initiator's memory, the data in two unaligned pieces plus a
// metadata buffer (KLM): the target writes the CRC-protected stream and
// memory gets the IP-checksum tuples with the tags copied. Vector
// pub-0155 (13 × 512 zeros, Type 1, ref 1, app 0x3bd4; its output with
// CRC → IP checksum, the direction here).
func rcpISERToMemory(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks = 512, 13
	data := make([]byte, iv*blocks)
	inPI := rcpHex(t, "00003bd40000000100003bd40000000200003bd40000000300003bd40000000400003bd40000000500003bd40000000600003bd40000000700003bd40000000800003bd40000000900003bd40000000a00003bd40000000b00003bd40000000c00003bd40000000d")
	outPI := rcpHex(t, "ffff3bd400000001ffff3bd400000002ffff3bd400000003ffff3bd400000004ffff3bd400000005ffff3bd400000006ffff3bd400000007ffff3bd400000008ffff3bd400000009ffff3bd40000000affff3bd40000000bffff3bd40000000cffff3bd40000000d")
	stream := rcpInterleave(data, inPI, iv)
	rcpSHA(t, "pub-0155 input", stream, "5314e2e3049ff8b71eb317f2e52469c83005f37f25ebcfaccb8b19c3d1ae6d6e")
	copy(g.buf, stream)
	dsges := []verbs.SGE{h.mr.SGE(16, 3000), h.mr.SGE(20008, iv*blocks-3000)}
	msge := []verbs.SGE{h.mr.SGE(30000, blocks*8)}
	fill(h.buf[:32768], 0xEE)
	mem := rcpDomain(t10dif.Type1, t10dif.GuardIPChecksum, iv, 1, 0x3bd4)
	wire := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 1, 0x3bd4)
	mem.Escape, wire.Escape = t10dif.EscapeAppRef, t10dif.EscapeAppRef
	mr := rcpAllocMR(t, h, 4, 4)
	rcpReg(t, he, mr, dsges, msge, verbs.SigAttrs{CheckMask: 0xFF, Mem: rcpSigDomain(mem), Wire: rcpSigDomain(wire)})
	rcpCmd(t, he, ge, 1)
	ge.post(write(2, g.mr.SGE(0, len(stream)), 0, mr.RKey))
	check(t, "RDMA WRITE of the CRC stream", poll1(t, ge.scq), want{wrid: 2, op: verbs.WCRDMAWrite, len: anyLen})
	rcpCmd(t, ge, he, 3)
	gotData, gotMeta := rcpGather(h, dsges), rcpGather(h, msge)
	sameBytes(t, "initiator data pieces", gotData, data)
	sameBytes(t, "initiator metadata vs pub-0155 output (IP checksum, tags copied)", gotMeta, outPI)
	rcpSHA(t, "memory as a stream vs pub-0155 output", rcpInterleave(gotData, gotMeta, iv), "a6cc7554649a04b82f3bdbf060642e2f9cd433d29999cf4431ff5031f62b92eb")
	sameBytes(t, "metadata vs t10dif generate (IP checksum)", gotMeta, rcpGenMeta(t, mem, data))
	rcpStatus(t, he, mr, "after the translation", nil)
}

// rcpType3Escape: Type 3 (constant ref tag, app and ref escape). The
// insert writes the configured app tag 0xffff and the constant ref tag
// (vector pub-0084: 3 × 512 zeros, ref 0x12345678). On a strip, a block
// with app 0xffff and ref 0xffffffff is skipped whatever its guard; a block
// with app 0xffff but another ref tag is checked, and its bad guard is
// reported at its offset as t10dif reports it.
func rcpType3Escape(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv = 512
	mr := rcpAllocMR(t, h, 4, 4)

	// INSERT: pub-0084.
	d := rcpDomain(t10dif.Type3, t10dif.GuardCRC16, iv, 0x12345678, 0xFFFF)
	data := make([]byte, 3*iv)
	copy(h.buf, data)
	rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(0, len(data))}, nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d)})
	rcpCmd(t, he, ge, 1)
	wlen := 3 * (iv + 8)
	ge.post(read(2, g.mr.SGE(0, wlen), 0, mr.RKey))
	check(t, "RDMA READ (Type 3 insert)", poll1(t, ge.scq), want{wrid: 2, op: verbs.WCRDMARead, len: wlen})
	_, pi := rcpSplit(g.buf[:wlen], iv)
	sameBytes(t, "inserted PI vs pub-0084", pi, rcpHex(t, "0000ffff123456780000ffff123456780000ffff12345678"))
	rcpSHA(t, "wire stream vs pub-0084 output", g.buf[:wlen], "a93730dea33bb850da8f11267d80234b618e2b70740898f070b6b15d1358b64a")
	rcpStatus(t, he, mr, "after the Type 3 insert", nil)

	// STRIP with escapes.
	const blocks = 8
	d = rcpDomain(t10dif.Type3, t10dif.GuardCRC16, iv, 0x00C0FFEE, 0x0303)
	data = pattern(iv*blocks, 0x3E)
	base := rcpGen(t, d, data)
	for step, c := range []struct {
		name string
		bad5 bool // block 5: app 0xffff, ref not all ones, bad guard
	}{{"escaped block", false}, {"app-only escape does not apply", true}} {
		stream := append([]byte(nil), base...)
		rcpTuple(stream, iv, 2, rcpGuardOf(stream, iv, 2)^0xFFFF, 0xFFFF, 0xFFFFFFFF)
		if c.bad5 {
			rcpTuple(stream, iv, 5, rcpGuardOf(stream, iv, 5)^0x0100, 0xFFFF, 0x00C0FFEE)
		}
		wantErr := rcpVerify(t, d, t10dif.CheckAll, stream)
		if (wantErr != nil) != c.bad5 || (wantErr != nil && wantErr.Block != 5) {
			t.Fatalf("%s: t10dif's verdict %v is not the one the case is built for", c.name, wantErr)
		}
		id := uint64(10 * (step + 1))
		rcpInv(t, he, mr, id)
		copy(g.buf, stream)
		clear(h.buf[:len(data)])
		rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(0, len(data))}, nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d)})
		rcpCmd(t, he, ge, id+1)
		ge.post(write(id+2, g.mr.SGE(0, len(stream)), 0, mr.RKey))
		check(t, c.name+": RDMA WRITE", poll1(t, ge.scq), want{wrid: id + 2, op: verbs.WCRDMAWrite, len: anyLen})
		rcpCmd(t, ge, he, id+3)
		sameBytes(t, c.name+": host memory (all blocks stripped)", h.buf[:len(data)], data)
		rcpStatus(t, he, mr, c.name, wantErr)
	}
}

// rcpType1Escapes: one Type 1 stream whose block 3 has app 0xffff, ref
// 0xffffffff and a bad guard, written into three registrations: with
// app_escape the block is skipped; without escapes its guard error is
// reported; with ref_escape alone (ignored by mlx5 without app_escape) too.
func rcpType1Escapes(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks = 512, 8
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x40, 0x2222)
	data := pattern(iv*blocks, 0x4F)
	stream := rcpGen(t, d, data)
	rcpTuple(stream, iv, 3, rcpGuardOf(stream, iv, 3)^0x0F0F, 0xFFFF, 0xFFFFFFFF)
	copy(g.buf, stream)
	noEsc := d
	noEsc.Escape = t10dif.EscapeNone
	mr := rcpAllocMR(t, h, 4, 4)
	for i, c := range []struct {
		name      string
		app, ref  bool
		wantError bool
	}{{"app escape", true, false, false}, {"no escape", false, false, true}, {"ref escape alone", false, true, true}} {
		id := uint64(10 * (i + 1))
		if i > 0 {
			rcpInv(t, he, mr, id)
		}
		sd := rcpSigDomain(d)
		sd.AppEscape, sd.RefEscape = c.app, c.ref
		clear(h.buf[:len(data)])
		rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(0, len(data))}, nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: sd})
		rcpCmd(t, he, ge, id+1)
		ge.post(write(id+2, g.mr.SGE(0, len(stream)), 0, mr.RKey))
		check(t, c.name+": RDMA WRITE", poll1(t, ge.scq), want{wrid: id + 2, op: verbs.WCRDMAWrite, len: anyLen})
		rcpCmd(t, ge, he, id+3)
		sameBytes(t, c.name+": host memory", h.buf[:len(data)], data)
		var wantErr *t10dif.Error
		if c.wantError {
			wantErr = rcpVerify(t, noEsc, t10dif.CheckAll, stream)
			if wantErr == nil || wantErr.Block != 3 || wantErr.Type != t10dif.ErrorGuard {
				t.Fatalf("t10dif's verdict without escape: %v, want a guard error in block 3", wantErr)
			}
		} else if e := rcpVerify(t, d, t10dif.CheckAll, stream); e != nil {
			t.Fatalf("t10dif's verdict with app escape: %v, want none", e)
		}
		rcpStatus(t, he, mr, c.name, wantErr)
	}
}

// rcpAppTagMask: apptag_check_mask 0x00ff (NVMe LBATM). App tags that
// differ from the configured one only in the high byte pass; one that
// differs in bit 0 is an app tag error (expected the configured tag,
// actual the block's); with the app tag left out of the check mask (0xcf)
// it passes. The insert direction writes the full configured tag.
func rcpAppTagMask(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks = 512, 6
	d := rcpDomain(t10dif.Type2, t10dif.GuardCRC16, iv, 0x900, 0x12AB)
	d.AppTagMask = 0x00FF
	data := pattern(iv*blocks, 0x2D)
	high := d
	high.AppTag = 0x77AB
	streamHigh := rcpGen(t, high, data)
	streamLow := rcpGen(t, d, data)
	binary.BigEndian.PutUint16(streamLow[4*(iv+8)+iv+2:], 0x12AA)
	wlen := blocks * (iv + 8)
	mr := rcpAllocMR(t, h, 4, 4)
	for i, c := range []struct {
		name   string
		stream []byte
		check  uint8
	}{{"high byte differs", streamHigh, 0xFF}, {"bit 0 differs", streamLow, 0xFF}, {"bit 0 differs, app tag unchecked", streamLow, 0xCF}} {
		id := uint64(10 * (i + 1))
		if i > 0 {
			rcpInv(t, he, mr, id)
		}
		wantErr := rcpVerify(t, d, t10dif.CheckMask(c.check), c.stream)
		if i == 1 && (wantErr == nil || wantErr.Type != t10dif.ErrorAppTag || wantErr.Block != 4) {
			t.Fatalf("t10dif's verdict %v, want an app tag error in block 4", wantErr)
		}
		copy(g.buf, c.stream)
		clear(h.buf[:len(data)])
		rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(0, len(data))}, nil, verbs.SigAttrs{CheckMask: c.check, Wire: rcpSigDomain(d)})
		rcpCmd(t, he, ge, id+1)
		ge.post(write(id+2, g.mr.SGE(0, wlen), 0, mr.RKey))
		check(t, c.name+": RDMA WRITE", poll1(t, ge.scq), want{wrid: id + 2, op: verbs.WCRDMAWrite, len: anyLen})
		sameBytes(t, c.name+": host memory", h.buf[:len(data)], data)
		if i == 0 {
			// Read it back through the same key: the configured tag.
			ge.post(read(id+4, g.mr.SGE(32768, wlen), 0, mr.RKey))
			check(t, "RDMA READ back", poll1(t, ge.scq), want{wrid: id + 4, op: verbs.WCRDMARead, len: wlen})
			sameBytes(t, "read back: PI with the configured app tag 0x12ab", g.buf[32768:32768+wlen], rcpGen(t, d, data))
		}
		rcpCmd(t, ge, he, id+3)
		rcpStatus(t, he, mr, c.name, wantErr)
	}
}

// rcpRemoteInvalidate: the target ends a host read with SEND_WITH_INV of
// the host's signature rkey (the key is registered with remote
// invalidation enabled); the host's receive reports the invalidated key,
// and the host re-registers the MR without a LOCAL_INV for its next I/O
// (a write: the target reads it with PI inserted).
func rcpRemoteInvalidate(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks = 512, 4
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x600, 0x0)
	data := pattern(iv*blocks, 0x1A)
	copy(g.buf, rcpGen(t, d, data))
	wlen := blocks * (iv + 8)
	mr := rcpAllocMR(t, h, 4, 4)
	rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(0, len(data))}, nil, verbs.SigAttrs{CheckMask: 0xCF, Wire: rcpSigDomain(d)})
	rcpCmd(t, he, ge, 1)
	ge.post(write(2, g.mr.SGE(0, wlen), 0, mr.RKey))
	check(t, "RDMA WRITE", poll1(t, ge.scq), want{wrid: 2, op: verbs.WCRDMAWrite, len: anyLen})
	he.recv(rwr(3, h.mr.SGE(rcpCmdOff+64, 64)))
	ge.post(verbs.SendWR{WRID: 4, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, SG: []verbs.SGE{g.mr.SGE(rcpCmdOff, 64)}, InvalidateRKey: mr.RKey})
	check(t, "SEND_WITH_INV response", poll1(t, ge.scq), want{wrid: 4, op: verbs.WCSend, len: anyLen})
	check(t, "host receive of the response", poll1(t, he.rcq), want{wrid: 3, op: verbs.WCRecv, len: 64, withInv: true, imm: mr.RKey})
	sameBytes(t, "host memory (stripped)", h.buf[:len(data)], data)
	rcpStatus(t, he, mr, "after the read", nil)

	data2 := pattern(iv*blocks, 0x2B)
	copy(h.buf[8192:], data2)
	d2 := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x700, 0x0)
	rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(8192, len(data2))}, nil, verbs.SigAttrs{CheckMask: 0xCF, Wire: rcpSigDomain(d2)})
	rcpCmd(t, he, ge, 5)
	ge.post(read(6, g.mr.SGE(16384, wlen), 0, mr.RKey))
	check(t, "RDMA READ through the re-registered key", poll1(t, ge.scq), want{wrid: 6, op: verbs.WCRDMARead, len: wlen})
	sameBytes(t, "wire stream of the second I/O", g.buf[16384:16384+wlen], rcpGen(t, d2, data2))
	rcpStatus(t, he, mr, "after the write", nil)
}

// rcpWireOffsets: addresses through a signature key are wire-stream
// offsets, also with PI in memory as separate metadata (PASS): a READ of
// blocks 2–4 at wire offset 2 × 520 gets those blocks' data and tuples; a
// WRITE of blocks 5–7 at wire offset 5 × 520 lands in those blocks' data
// and metadata only, and its tuples (ref tags counted from the key's
// first block) check clean.
func rcpWireOffsets(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks, metaOff = 512, 8, 8192
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x300, 0x0042)
	data := pattern(iv*blocks, 0x55)
	meta := rcpGenMeta(t, d, data)
	copy(h.buf, data)
	copy(h.buf[metaOff:], meta)
	sd := rcpSigDomain(d)
	mr := rcpAllocMR(t, h, 4, 4)
	rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(0, len(data))}, []verbs.SGE{h.mr.SGE(metaOff, len(meta))},
		verbs.SigAttrs{CheckMask: 0xFF, Mem: sd, Wire: sd})
	rcpCmd(t, he, ge, 1)
	wb := iv + 8
	full := rcpInterleave(data, meta, iv)
	ge.post(read(2, g.mr.SGE(0, 3*wb), uint64(2*wb), mr.RKey))
	check(t, "READ of blocks 2-4", poll1(t, ge.scq), want{wrid: 2, op: verbs.WCRDMARead, len: 3 * wb})
	sameBytes(t, "blocks 2-4 from their wire offset", g.buf[:3*wb], full[2*wb:5*wb])

	data2 := pattern(iv*blocks, 0x0B)
	stream2 := rcpGen(t, d, data2)
	copy(g.buf[16384:], stream2[5*wb:])
	ge.post(write(3, g.mr.SGE(16384, 3*wb), uint64(5*wb), mr.RKey))
	check(t, "WRITE of blocks 5-7", poll1(t, ge.scq), want{wrid: 3, op: verbs.WCRDMAWrite, len: anyLen})
	rcpCmd(t, ge, he, 4)
	meta2 := rcpGenMeta(t, d, data2)
	wantData := append(append([]byte(nil), data[:5*iv]...), data2[5*iv:]...)
	wantMeta := append(append([]byte(nil), meta[:5*8]...), meta2[5*8:]...)
	sameBytes(t, "host data", h.buf[:len(data)], wantData)
	sameBytes(t, "host metadata", h.buf[metaOff:metaOff+len(meta)], wantMeta)
	rcpStatus(t, he, mr, "after the offset accesses", nil)
}

// rcpGuardSeed: the wire domain's guard seed (bg, programmed in its PSV)
// is the CRC's initial value: the inserted guards are t10dif's with that
// seed, and a stream with seeded guards strips clean through the same
// registration.
func rcpGuardSeed(t *testing.T, s *suite) {
	h, g, he, ge := rcpPair(t, s)
	const iv, blocks = 512, 4
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x42, 0x0707)
	d.Seed = 0x1234
	data := pattern(iv*blocks, 0x37)
	copy(h.buf, data)
	want0 := rcpGen(t, rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x42, 0x0707), data)
	wantSeed := rcpGen(t, d, data)
	if bytes.Equal(want0, wantSeed) {
		t.Fatal("t10dif: the seed changes no guard")
	}
	mr := rcpAllocMR(t, h, 4, 4)
	rcpReg(t, he, mr, []verbs.SGE{h.mr.SGE(0, len(data))}, nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d)})
	rcpCmd(t, he, ge, 1)
	wlen := blocks * (iv + 8)
	ge.post(read(2, g.mr.SGE(0, wlen), 0, mr.RKey))
	check(t, "RDMA READ", poll1(t, ge.scq), want{wrid: 2, op: verbs.WCRDMARead, len: wlen})
	sameBytes(t, "wire stream (guards seeded with 0x1234)", g.buf[:wlen], wantSeed)
	rcpStatus(t, he, mr, "after the seeded insert", nil)
	// The same stream back: checked against seeded guards, clean.
	clear(h.buf[:len(data)])
	ge.post(write(3, g.mr.SGE(0, wlen), 0, mr.RKey))
	check(t, "RDMA WRITE back", poll1(t, ge.scq), want{wrid: 3, op: verbs.WCRDMAWrite, len: anyLen})
	rcpCmd(t, ge, he, 4)
	sameBytes(t, "host memory (stripped)", h.buf[:len(data)], data)
	rcpStatus(t, he, mr, "after the seeded strip", nil)
}
