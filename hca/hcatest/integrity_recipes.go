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
	h, g, he, ge := s.sigPair(t)
	const iv, blocks = 512, 4
	data := rcpPattern(iv*blocks, func(i int) byte { return byte(i) })
	copy(h.buf, data)
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0xfffffffe, 0xbeef)
	mr := he.sigMR(4, 4)
	// NVMe host: check_mask guard | ref (PRCHK_GUARD, PRCHK_REF).
	a := verbs.SigAttrs{CheckMask: 0xCF, Wire: rcpSigDomain(d)}
	// Signaled here (PA: the signature UMR is the only signaled WQE).
	if err := mr.MapSGPI(h.sg(0, iv*blocks), nil); err != nil {
		t.Fatalf("map sg pi: %v", err)
	}
	if mr.Addr != 0 || mr.Len != iv*blocks || mr.SigAttrs().MetaLength != 0 {
		t.Errorf("mapped at %#x+%d meta %d, want 0+%d meta 0", mr.Addr, mr.Len, mr.SigAttrs().MetaLength, iv*blocks)
	}
	mr.SetSigAttrs(a)
	mr.IncKey()
	he.post(verbs.SendWR{WRID: 0x51, Opcode: verbs.WRRegMRIntegrity, Flags: verbs.SendSignaled, MR: mr.MR, Access: sigAccess})
	Check(t, "signaled REG_MR_INTEGRITY", Poll1(t, he.scq), Want{WRID: 0x51, Op: verbs.WCRegMR, Len: AnyLen, QPN: he.qp.QPN()})
	he.capsule(ge, 1)
	wlen := blocks * (iv + 8)
	clear(g.buf[:wlen+64])
	ge.run("target RDMA READ through the host's signature rkey", read(2, g.mr.SGE(0, wlen), 0, mr.RKey), wlen)
	sameBytes(t, "wire stream (host data with PI inserted) vs t10dif generate", g.buf[:wlen], rcpGen(t, d, data))
	_, pi := rcpSplit(g.buf[:wlen], iv)
	// pub-0082 expected.pi_hex.
	sameBytes(t, "inserted PI vs vector pub-0082", pi, rcpHex(t, "4f10beeffffffffe4f10beefffffffff4f10beef000000004f10beef00000001"))
	rcpSHA(t, "wire stream vs pub-0082 output_sha256", g.buf[:wlen], "e3683105f9768b8a550ba0c8d53318ee880ebd4dabe3ee3b43b84c5a1e328591")
	sameBytes(t, "bytes after the read", g.buf[wlen:wlen+64], make([]byte, 64))
	sameBytes(t, "host memory untouched", h.buf[:iv*blocks], data)
	mr.status("after the insert", nil)
	ge.capsule(he, 3) // the response capsule
}

// rcpHostStripPA is the NVMe-oF host's read (memory NONE, wire T10-DIF,
// PA): the target RDMA WRITEs the protected stream into the host's
// signature rkey and host memory receives the data stripped. The first
// I/O uses vector pub-0064 (Type 2, CRC, 9 × 512 bytes of 0xff, ref
// 0x3a38b, app 0x9b18); the MR is then invalidated and re-registered for a
// second I/O with another ref tag, which must be the one checked.
func rcpHostStripPA(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv = 512
	mr := he.sigMR(4, 4)

	// pub-0064: the stream is the data with the vector's tuples.
	data := bytes.Repeat([]byte{0xff}, 9*iv)
	pi := rcpHex(t, "e6a19b180003a38be6a19b180003a38ce6a19b180003a38de6a19b180003a38ee6a19b180003a38fe6a19b180003a390e6a19b180003a391e6a19b180003a392e6a19b180003a393")
	stream := rcpInterleave(data, pi, iv)
	rcpSHA(t, "pub-0064 stream", stream, "d790abb93ada7cf9d09cced7735314eea921853bb503ae9027e80187f89a648c")
	d := rcpDomain(t10dif.Type2, t10dif.GuardCRC16, iv, 0x3a38b, 0x9b18)
	copy(g.buf, stream)
	fill(h.buf[:len(data)+64], 0x3C)
	before := append([]byte(nil), h.buf[len(data):len(data)+64]...)
	key1 := mr.reg(h.sg(0, len(data)), nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d)})
	he.capsule(ge, 1)
	ge.run("target RDMA WRITE into the host's signature rkey", write(2, g.mr.SGE(0, len(stream)), 0, mr.RKey), AnyLen)
	ge.capsule(he, 3)
	sameBytes(t, "host memory (stream stripped)", h.buf[:len(data)], data)
	sameBytes(t, "host memory after the data", h.buf[len(data):len(data)+64], before)
	mr.status("after the pub-0064 strip", nil)

	// Second I/O: invalidate, new data region and ref tag.
	mr.inv(4)
	const off2, n2 = 16384, 6 * iv
	data2 := pattern(n2, 0x17)
	d2 := rcpDomain(t10dif.Type2, t10dif.GuardCRC16, iv, 0x70000000, 0x9b18)
	stream2 := rcpGen(t, d2, data2)
	copy(g.buf[off2:], stream2)
	clear(h.buf[off2 : off2+n2])
	mr.reg(h.sg(off2, n2), nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d2)})
	if mr.RKey == key1 {
		t.Errorf("re-registration kept key %#x", key1)
	}
	he.capsule(ge, 5)
	ge.run("second RDMA WRITE", write(6, g.mr.SGE(off2, len(stream2)), 0, mr.RKey), AnyLen)
	ge.capsule(he, 7)
	sameBytes(t, "host memory of the second I/O", h.buf[off2:off2+n2], data2)
	sameBytes(t, "first I/O's memory untouched by the second", h.buf[:len(data)], data)
	mr.status("after the re-registered strip", nil)
}

// rcpHostInsertMTT: the host write with interval 4096 and its data in
// three page-aligned pieces out of order (MTT mapping); blocks straddle
// the pieces. The target reads the whole wire stream, then block 1 alone
// at its wire offset: its ref tag is the key's first ref tag + 1.
func rcpHostInsertMTT(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv, blocks = 4096, 2
	sges := []verbs.SGE{h.mr.SGE(3*4096+1024, 3072), h.mr.SGE(1*4096, 4096), h.mr.SGE(2*4096, 1024)}
	fill(h.buf[:8*4096], 0x61)
	data := rcpGather(h, sges)
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x5000, 0x4242)
	mr := he.sigMR(4, 4)
	mr.reg(sges, nil, verbs.SigAttrs{CheckMask: 0xCF, Wire: rcpSigDomain(d)})
	he.capsule(ge, 1)
	wlen := blocks * (iv + 8)
	want1 := rcpGen(t, d, data)
	ge.run("RDMA READ of the whole wire stream", read(2, g.mr.SGE(0, wlen), 0, mr.RKey), wlen)
	sameBytes(t, "wire stream vs t10dif generate", g.buf[:wlen], want1)
	// Block 1 alone, at wire offset iv+8.
	ge.run("RDMA READ of block 1", read(3, g.mr.SGE(16384, iv+8), iv+8, mr.RKey), iv+8)
	sameBytes(t, "block 1 read at its wire offset", g.buf[16384:16384+iv+8], want1[iv+8:])
	if ref := binary.BigEndian.Uint32(g.buf[16384+iv+4:]); ref != 0x5001 {
		t.Errorf("block 1's ref tag %#x, want 0x5001", ref)
	}
	mr.status("after the inserts", nil)
	ge.capsule(he, 4)
}

// rcpHostStripKLM: the host read with its data in three unaligned pieces
// (KLM mapping). The target writes the stream in two RDMA WRITEs at their
// wire offsets (blocks 0–2, then 3–7): ref tags count from the key's
// first block, so the stream is clean; host memory gets it stripped.
func rcpHostStripKLM(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv, blocks = 512, 8
	sges := []verbs.SGE{h.mr.SGE(100, 1000), h.mr.SGE(5003, 2000), h.mr.SGE(12007, 1096)}
	data := pattern(iv*blocks, 0x29)
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x2000, 0x0101)
	stream := rcpGen(t, d, data)
	copy(g.buf, stream)
	fill(h.buf[:16384], 0xEE)
	keep := append([]byte(nil), h.buf[:16384]...)
	mr := he.sigMR(4, 4)
	mr.reg(sges, nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d)})
	he.capsule(ge, 1)
	split := 3 * (iv + 8)
	ge.post(write(2, g.mr.SGE(0, split), 0, mr.RKey), write(3, g.mr.SGE(split, len(stream)-split), uint64(split), mr.RKey))
	wcs := Poll(t, ge.scq, 2)
	Check(t, "WRITE of blocks 0-2", wcs[0], Want{WRID: 2, Op: verbs.WCRDMAWrite, Len: AnyLen})
	Check(t, "WRITE of blocks 3-7", wcs[1], Want{WRID: 3, Op: verbs.WCRDMAWrite, Len: AnyLen})
	ge.capsule(he, 4)
	sameBytes(t, "host pieces (stripped)", rcpGather(h, sges), data)
	// Nothing around the pieces was written.
	rcpScatter(h, sges, rcpGather(&node{buf: keep, mr: h.mr}, sges))
	sameBytes(t, "host memory around the pieces", h.buf[:16384], keep)
	mr.status("after the strip", nil)
}

// rcpHostPassRead: PASS (PI in host memory as a separate metadata buffer,
// and on the wire, same parameters, check mask 0xFF): the target READs the
// protected stream, with the memory tuples copied through. Block 5 carries
// an escaped tuple (app 0xffff) with a bad guard and ref tag: it is not
// checked and is copied as it is, not regenerated.
func rcpHostPassRead(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv, blocks, metaOff = 512, 8, 16384
	data := pattern(iv*blocks, 0x44)
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x100, 0x5a5a)
	meta := rcpGenMeta(t, d, data)
	rcpTuple(meta, 0, 5, binary.BigEndian.Uint16(meta[5*8:])^0x1234, 0xFFFF, 0xdeadbeef)
	copy(h.buf, data)
	copy(h.buf[metaOff:], meta)
	sd := rcpSigDomain(d)
	mr := he.sigMR(4, 4)
	mr.reg(h.sg(0, len(data)), h.sg(metaOff, len(meta)),
		verbs.SigAttrs{CheckMask: 0xFF, Mem: sd, Wire: sd})
	he.capsule(ge, 1)
	wlen := blocks * (iv + 8)
	ge.run("RDMA READ of the passed stream", read(2, g.mr.SGE(0, wlen), 0, mr.RKey), wlen)
	sameBytes(t, "wire stream (memory data and tuples interleaved)", g.buf[:wlen], rcpInterleave(data, meta, iv))
	if e := rcpVerify(t, d, t10dif.CheckAll, g.buf[:wlen]); e != nil {
		t.Errorf("t10dif finds the passed stream bad: %v", e)
	}
	mr.status("after the pass (escaped block 5)", nil)
	ge.capsule(he, 3)
}

// rcpHostPassWrite: PASS from the wire into host memory, interval 4096,
// data in two page-aligned pieces and the metadata in a buffer of its own
// (MTT mapping): data and tuples land in their buffers, the tuples copied
// from the wire — block 1's escaped tuple (app 0xffff, bad guard and ref)
// included, unchanged.
func rcpHostPassWrite(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv, blocks, metaOff = 4096, 2, 20000
	d := rcpDomain(t10dif.Type2, t10dif.GuardCRC16, iv, 0x77, 0x1111)
	dsges := []verbs.SGE{h.mr.SGE(0, iv), h.mr.SGE(2*iv, iv)}
	msge := h.sg(metaOff, blocks*8)
	data := pattern(iv*blocks, 0x0D)
	stream := rcpGen(t, d, data)
	rcpTuple(stream, iv, 1, rcpGuardOf(stream, iv, 1)^0x8001, 0xFFFF, 0x12345)
	copy(g.buf, stream)
	fill(h.buf[:32768], 0xA5)
	between := append([]byte(nil), h.buf[iv:2*iv]...)
	sd := rcpSigDomain(d)
	mr := he.sigMR(4, 4)
	mr.reg(dsges, msge, verbs.SigAttrs{CheckMask: 0xFF, Mem: sd, Wire: sd})
	he.capsule(ge, 1)
	ge.run("RDMA WRITE of the protected stream", write(2, g.mr.SGE(0, len(stream)), 0, mr.RKey), AnyLen)
	ge.capsule(he, 3)
	wd, wm := rcpSplit(stream, iv)
	sameBytes(t, "host data pieces", rcpGather(h, dsges), wd)
	sameBytes(t, "host metadata buffer (tuples copied through)", rcpGather(h, msge), wm)
	sameBytes(t, "host page between the data pieces", h.buf[iv:2*iv], between)
	mr.status("after the pass (escaped block 1)", nil)
}

// rcpTargetPassLocal is the NVMe target without PRACT using its own
// integrity key as a local key (PASS both ways, memory data and metadata
// each in two unaligned pieces: KLM mapping): it RDMA READs the host's
// protected stream into its signature lkey (data and tuples separate in
// its memory), then, after LOCAL_INV and a new registration, RDMA WRITEs
// from its signature lkey into the host's plain memory (interleaved).
func rcpTargetPassLocal(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv, blocks = 512, 4
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0xA000, 0x0BAD)
	data := pattern(iv*blocks, 0x71)
	stream := rcpGen(t, d, data)
	copy(h.buf, stream)
	dsges := []verbs.SGE{g.mr.SGE(100, 1500), g.mr.SGE(3005, 548)}
	msges := []verbs.SGE{g.mr.SGE(9000, 16), g.mr.SGE(9100, 16)}
	sd := rcpSigDomain(d)
	a := verbs.SigAttrs{CheckMask: 0xFF, Mem: sd, Wire: sd}
	mr := ge.sigMR(4, 4)
	mr.reg(dsges, msges, a)
	wlen := len(stream)
	if mr.Len != uint64(wlen) {
		t.Errorf("memory-domain length %d, want %d (data + metadata = wire length with PI on both)", mr.Len, wlen)
	}
	ge.run("RDMA READ into the signature lkey", read(1, mr.wireSGE(0, int(mr.Len)), h.mr.Addr, h.mr.RKey), wlen)
	wd, wm := rcpSplit(stream, iv)
	sameBytes(t, "target data pieces", rcpGather(g, dsges), wd)
	sameBytes(t, "target metadata pieces", rcpGather(g, msges), wm)
	mr.status("after the READ into the signature lkey", nil)

	// The other way: the memory (with a changed block 2) goes out.
	mr.inv(2)
	data2 := pattern(iv*blocks, 0x13)
	meta2 := rcpGenMeta(t, d, data2)
	rcpScatter(g, dsges, data2)
	rcpScatter(g, msges, meta2)
	mr.reg(dsges, msges, a)
	const dst = 16384
	ge.run("RDMA WRITE from the signature lkey", write(3, mr.wireSGE(0, int(mr.Len)), h.mr.Addr+dst, h.mr.RKey), AnyLen)
	ge.capsule(he, 4)
	sameBytes(t, "host memory (target memory interleaved on the wire)", h.buf[dst:dst+wlen], rcpInterleave(data2, meta2, iv))
	mr.status("after the WRITE from the signature lkey", nil)
}

// rcpTargetStripLocal is the NVMe target with PRACT on a host read (PI in
// its memory as separate metadata, none on the wire): it RDMA WRITEs from
// its signature lkey (length = data only, as rw.c subtracts meta_length)
// into the host's plain memory, which gets the data stripped; after a new
// registration it SENDs from the signature lkey, and the host receives the
// stripped data. Type 3 (constant ref tag).
func rcpTargetStripLocal(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv, blocks, metaOff = 512, 4, 4096
	d := rcpDomain(t10dif.Type3, t10dif.GuardCRC16, iv, 0x00ABCDEF, 0x3333)
	data := pattern(iv*blocks, 0x5B)
	meta := rcpGenMeta(t, d, data)
	copy(g.buf, data)
	copy(g.buf[metaOff:], meta)
	dsge, msge := g.sg(0, len(data)), g.sg(metaOff, len(meta))
	a := verbs.SigAttrs{CheckMask: 0xFF, Mem: rcpSigDomain(d)} // wire NONE
	mr := ge.sigMR(4, 4)
	mr.reg(dsge, msge, a)
	n := uint32(mr.Len) - mr.SigAttrs().MetaLength
	if n != uint32(len(data)) {
		t.Fatalf("wire length %d (Len %d - MetaLength %d), want %d", n, mr.Len, mr.SigAttrs().MetaLength, len(data))
	}
	fill(h.buf[:8192], 0xC3)
	after := append([]byte(nil), h.buf[len(data):len(data)+64]...)
	ge.run("RDMA WRITE from the signature lkey", write(1, mr.wireSGE(0, int(n)), h.mr.Addr, h.mr.RKey), AnyLen)
	ge.capsule(he, 2)
	sameBytes(t, "host memory (target data, PI stripped)", h.buf[:len(data)], data)
	sameBytes(t, "host memory after the data", h.buf[len(data):len(data)+64], after)
	mr.status("after the WRITE", nil)

	mr.inv(3)
	mr.reg(dsge, msge, a)
	clear(h.buf[8192 : 8192+4096])
	he.recv(rwr(4, h.mr.SGE(8192, 4096)))
	ge.run("SEND from the signature lkey", send(5, mr.wireSGE(0, int(n))), AnyLen)
	he.recvOK("host receive of the stripped data", 4, len(data))
	sameBytes(t, "received data (PI stripped)", h.buf[8192:8192+len(data)], data)
	sameBytes(t, "receive buffer after the data", h.buf[8192+len(data):8192+4096], make([]byte, 4096-len(data)))
	sameBytes(t, "target metadata unchanged", g.buf[metaOff:metaOff+len(meta)], meta)
	mr.status("after the SEND", nil)
}

// rcpTargetInsertLocal is the NVMe target with PRACT on a host write (PI
// in its memory as separate metadata, none on the wire): it RDMA READs the
// host's plain data into its signature lkey and finds the data and the
// inserted tuples in its memory; after a new registration (data in two
// unaligned pieces: KLM) a SEND from the host lands on a receive through
// the signature lkey, with PI inserted.
func rcpTargetInsertLocal(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv, blocks, metaOff = 512, 4, 4096
	d := rcpDomain(t10dif.Type2, t10dif.GuardCRC16, iv, 0x10, 0xA0A0)
	data := pattern(iv*blocks, 0x66)
	copy(h.buf, data)
	a := verbs.SigAttrs{CheckMask: 0xFF, Mem: rcpSigDomain(d)}
	mr := ge.sigMR(4, 4)
	fill(g.buf[:8192], 0x99)
	afterMeta := append([]byte(nil), g.buf[metaOff+blocks*8:metaOff+blocks*8+64]...)
	dsge, msge := g.sg(0, len(data)), g.sg(metaOff, blocks*8)
	mr.reg(dsge, msge, a)
	ge.run("RDMA READ into the signature lkey", read(1, mr.wireSGE(0, len(data)), h.mr.Addr, h.mr.RKey), len(data))
	sameBytes(t, "target data", g.buf[:len(data)], data)
	sameBytes(t, "target metadata (PI inserted)", g.buf[metaOff:metaOff+blocks*8], rcpGenMeta(t, d, data))
	sameBytes(t, "target memory after the metadata", g.buf[metaOff+blocks*8:metaOff+blocks*8+64], afterMeta)
	mr.status("after the READ", nil)

	mr.inv(2)
	dsge = []verbs.SGE{g.mr.SGE(10003, 1200), g.mr.SGE(13001, 848)}
	msge = g.sg(15000, blocks*8)
	d2 := rcpDomain(t10dif.Type2, t10dif.GuardCRC16, iv, 0x8000, 0xA0A1)
	mr.reg(dsge, msge, verbs.SigAttrs{CheckMask: 0xFF, Mem: rcpSigDomain(d2)})
	ge.recv(rwr(3, mr.wireSGE(0, len(data))))
	ge.capsule(he, 4) // the registration is done: "ready"
	data2 := pattern(iv*blocks, 0x08)
	copy(h.buf[8192:], data2)
	he.run("host SEND", send(5, h.mr.SGE(8192, len(data2))), AnyLen)
	ge.recvOK("receive through the signature lkey", 3, len(data2))
	sameBytes(t, "target data pieces", rcpGather(g, dsge), data2)
	sameBytes(t, "target metadata (PI inserted)", rcpGather(g, msge), rcpGenMeta(t, d2, data2))
	mr.status("after the receive", nil)
}

// rcpISERToWire is iSER with IP-checksum PI in the initiator's memory
// (separate metadata) and CRC on the wire: the target reads the stream and
// gets CRC guards, tags copied. Vectors pub-0156 (Type 1, 8 × 512,
// splitmix64 seed 1168: its input PI in memory, its output PI on the
// wire) and pub-0099 (Type 1, 5 × 4096 of 0xff, app 0x1d0c: its input PI
// in memory; the wire's CRC PI from t10dif).
func rcpISERToWire(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	mr := he.sigMR(4, 4)
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
			mr.inv(uint64(10 * i))
		}
		inPI := rcpHex(t, c.inPI)
		rcpSHA(t, c.id+" input", rcpInterleave(c.data, inPI, c.iv), c.inSHA)
		copy(h.buf, c.data)
		copy(h.buf[c.metaOff:], inPI)
		mem := rcpDomain(t10dif.Type1, t10dif.GuardIPChecksum, c.iv, 0, c.app)
		wire := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, c.iv, 0, c.app)
		mem.Escape, wire.Escape = t10dif.EscapeAppRef, t10dif.EscapeAppRef // iSER: app_escape and ref_escape
		mr.reg(h.sg(0, len(c.data)), h.sg(c.metaOff, len(inPI)),
			verbs.SigAttrs{CheckMask: 0xFF, Mem: rcpSigDomain(mem), Wire: rcpSigDomain(wire)})
		he.capsule(ge, uint64(10*i+1))
		wlen := c.blocks * (c.iv + 8)
		clear(g.buf[:wlen])
		ge.run(c.id+": RDMA READ", read(uint64(10*i+2), g.mr.SGE(0, wlen), 0, mr.RKey), wlen)
		gotData, gotPI := rcpSplit(g.buf[:wlen], c.iv)
		sameBytes(t, c.id+": data on the wire", gotData, c.data)
		sameBytes(t, c.id+": wire stream vs t10dif (CRC generated, tags copied)", g.buf[:wlen], rcpGen(t, wire, c.data))
		if c.outPI != "" {
			sameBytes(t, c.id+": wire PI vs the vector's output", gotPI, rcpHex(t, c.outPI))
			rcpSHA(t, c.id+": wire stream vs the vector's output", g.buf[:wlen], c.outSHA)
		}
		sameBytes(t, c.id+": memory metadata unchanged", h.buf[c.metaOff:c.metaOff+len(inPI)], inPI)
		mr.status(c.id, nil)
		ge.capsule(he, uint64(10*i+3))
	}
}

// rcpISERToMemory is iSER's read with CRC on the wire and IP-checksum PI
// in the initiator's memory, the data in two unaligned pieces plus a
// metadata buffer (KLM): the target writes the CRC-protected stream and
// memory gets the IP-checksum tuples with the tags copied. Vector
// pub-0155 (13 × 512 zeros, Type 1, ref 1, app 0x3bd4; its output with
// CRC → IP checksum, the direction here).
func rcpISERToMemory(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv, blocks = 512, 13
	data := make([]byte, iv*blocks)
	inPI := rcpHex(t, "00003bd40000000100003bd40000000200003bd40000000300003bd40000000400003bd40000000500003bd40000000600003bd40000000700003bd40000000800003bd40000000900003bd40000000a00003bd40000000b00003bd40000000c00003bd40000000d")
	outPI := rcpHex(t, "ffff3bd400000001ffff3bd400000002ffff3bd400000003ffff3bd400000004ffff3bd400000005ffff3bd400000006ffff3bd400000007ffff3bd400000008ffff3bd400000009ffff3bd40000000affff3bd40000000bffff3bd40000000cffff3bd40000000d")
	stream := rcpInterleave(data, inPI, iv)
	rcpSHA(t, "pub-0155 input", stream, "5314e2e3049ff8b71eb317f2e52469c83005f37f25ebcfaccb8b19c3d1ae6d6e")
	copy(g.buf, stream)
	dsges := []verbs.SGE{h.mr.SGE(16, 3000), h.mr.SGE(20008, iv*blocks-3000)}
	msge := h.sg(30000, blocks*8)
	fill(h.buf[:32768], 0xEE)
	mem := rcpDomain(t10dif.Type1, t10dif.GuardIPChecksum, iv, 1, 0x3bd4)
	wire := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 1, 0x3bd4)
	mem.Escape, wire.Escape = t10dif.EscapeAppRef, t10dif.EscapeAppRef
	mr := he.sigMR(4, 4)
	mr.reg(dsges, msge, verbs.SigAttrs{CheckMask: 0xFF, Mem: rcpSigDomain(mem), Wire: rcpSigDomain(wire)})
	he.capsule(ge, 1)
	ge.run("RDMA WRITE of the CRC stream", write(2, g.mr.SGE(0, len(stream)), 0, mr.RKey), AnyLen)
	ge.capsule(he, 3)
	gotData, gotMeta := rcpGather(h, dsges), rcpGather(h, msge)
	sameBytes(t, "initiator data pieces", gotData, data)
	sameBytes(t, "initiator metadata vs pub-0155 output (IP checksum, tags copied)", gotMeta, outPI)
	rcpSHA(t, "memory as a stream vs pub-0155 output", rcpInterleave(gotData, gotMeta, iv), "a6cc7554649a04b82f3bdbf060642e2f9cd433d29999cf4431ff5031f62b92eb")
	sameBytes(t, "metadata vs t10dif generate (IP checksum)", gotMeta, rcpGenMeta(t, mem, data))
	mr.status("after the translation", nil)
}

// rcpType3Escape: Type 3 (constant ref tag, app and ref escape). The
// insert writes the configured app tag 0xffff and the constant ref tag
// (vector pub-0084: 3 × 512 zeros, ref 0x12345678). On a strip, a block
// with app 0xffff and ref 0xffffffff is skipped whatever its guard; a block
// with app 0xffff but another ref tag is checked, and its bad guard is
// reported at its offset as t10dif reports it.
func rcpType3Escape(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv = 512
	mr := he.sigMR(4, 4)

	// INSERT: pub-0084.
	d := rcpDomain(t10dif.Type3, t10dif.GuardCRC16, iv, 0x12345678, 0xFFFF)
	data := make([]byte, 3*iv)
	copy(h.buf, data)
	mr.reg(h.sg(0, len(data)), nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d)})
	he.capsule(ge, 1)
	wlen := 3 * (iv + 8)
	ge.run("RDMA READ (Type 3 insert)", read(2, g.mr.SGE(0, wlen), 0, mr.RKey), wlen)
	_, pi := rcpSplit(g.buf[:wlen], iv)
	sameBytes(t, "inserted PI vs pub-0084", pi, rcpHex(t, "0000ffff123456780000ffff123456780000ffff12345678"))
	rcpSHA(t, "wire stream vs pub-0084 output", g.buf[:wlen], "a93730dea33bb850da8f11267d80234b618e2b70740898f070b6b15d1358b64a")
	mr.status("after the Type 3 insert", nil)

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
		mr.inv(id)
		copy(g.buf, stream)
		clear(h.buf[:len(data)])
		mr.reg(h.sg(0, len(data)), nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d)})
		he.capsule(ge, id+1)
		ge.run(c.name+": RDMA WRITE", write(id+2, g.mr.SGE(0, len(stream)), 0, mr.RKey), AnyLen)
		ge.capsule(he, id+3)
		sameBytes(t, c.name+": host memory (all blocks stripped)", h.buf[:len(data)], data)
		mr.status(c.name, wantErr)
	}
}

// rcpType1Escapes: one Type 1 stream whose block 3 has app 0xffff, ref
// 0xffffffff and a bad guard, written into three registrations: with
// app_escape the block is skipped; without escapes its guard error is
// reported; with ref_escape alone (ignored by mlx5 without app_escape) too.
func rcpType1Escapes(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv, blocks = 512, 8
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x40, 0x2222)
	data := pattern(iv*blocks, 0x4F)
	stream := rcpGen(t, d, data)
	rcpTuple(stream, iv, 3, rcpGuardOf(stream, iv, 3)^0x0F0F, 0xFFFF, 0xFFFFFFFF)
	copy(g.buf, stream)
	noEsc := d
	noEsc.Escape = t10dif.EscapeNone
	mr := he.sigMR(4, 4)
	for i, c := range []struct {
		name      string
		app, ref  bool
		wantError bool
	}{{"app escape", true, false, false}, {"no escape", false, false, true}, {"ref escape alone", false, true, true}} {
		id := uint64(10 * (i + 1))
		if i > 0 {
			mr.inv(id)
		}
		sd := rcpSigDomain(d)
		sd.AppEscape, sd.RefEscape = c.app, c.ref
		clear(h.buf[:len(data)])
		mr.reg(h.sg(0, len(data)), nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: sd})
		he.capsule(ge, id+1)
		ge.run(c.name+": RDMA WRITE", write(id+2, g.mr.SGE(0, len(stream)), 0, mr.RKey), AnyLen)
		ge.capsule(he, id+3)
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
		mr.status(c.name, wantErr)
	}
}

// rcpAppTagMask: apptag_check_mask 0x00ff (NVMe LBATM). App tags that
// differ from the configured one only in the high byte pass; one that
// differs in bit 0 is an app tag error (expected the configured tag,
// actual the block's); with the app tag left out of the check mask (0xcf)
// it passes. The insert direction writes the full configured tag.
func rcpAppTagMask(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
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
	mr := he.sigMR(4, 4)
	for i, c := range []struct {
		name   string
		stream []byte
		check  uint8
	}{{"high byte differs", streamHigh, 0xFF}, {"bit 0 differs", streamLow, 0xFF}, {"bit 0 differs, app tag unchecked", streamLow, 0xCF}} {
		id := uint64(10 * (i + 1))
		if i > 0 {
			mr.inv(id)
		}
		wantErr := rcpVerify(t, d, t10dif.CheckMask(c.check), c.stream)
		if i == 1 && (wantErr == nil || wantErr.Type != t10dif.ErrorAppTag || wantErr.Block != 4) {
			t.Fatalf("t10dif's verdict %v, want an app tag error in block 4", wantErr)
		}
		copy(g.buf, c.stream)
		clear(h.buf[:len(data)])
		mr.reg(h.sg(0, len(data)), nil, verbs.SigAttrs{CheckMask: c.check, Wire: rcpSigDomain(d)})
		he.capsule(ge, id+1)
		ge.run(c.name+": RDMA WRITE", write(id+2, g.mr.SGE(0, wlen), 0, mr.RKey), AnyLen)
		sameBytes(t, c.name+": host memory", h.buf[:len(data)], data)
		if i == 0 {
			// Read it back through the same key: the configured tag.
			ge.run("RDMA READ back", read(id+4, g.mr.SGE(32768, wlen), 0, mr.RKey), wlen)
			sameBytes(t, "read back: PI with the configured app tag 0x12ab", g.buf[32768:32768+wlen], rcpGen(t, d, data))
		}
		ge.capsule(he, id+3)
		mr.status(c.name, wantErr)
	}
}

// rcpRemoteInvalidate: the target ends a host read with SEND_WITH_INV of
// the host's signature rkey (the key is registered with remote
// invalidation enabled); the host's receive reports the invalidated key,
// and the host re-registers the MR without a LOCAL_INV for its next I/O
// (a write: the target reads it with PI inserted).
func rcpRemoteInvalidate(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv, blocks = 512, 4
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x600, 0x0)
	data := pattern(iv*blocks, 0x1A)
	copy(g.buf, rcpGen(t, d, data))
	wlen := blocks * (iv + 8)
	mr := he.sigMR(4, 4)
	mr.reg(h.sg(0, len(data)), nil, verbs.SigAttrs{CheckMask: 0xCF, Wire: rcpSigDomain(d)})
	he.capsule(ge, 1)
	ge.run("RDMA WRITE", write(2, g.mr.SGE(0, wlen), 0, mr.RKey), AnyLen)
	he.recv(rwr(3, h.mr.SGE(rcpCmdOff+64, 64)))
	ge.run("SEND_WITH_INV response", verbs.SendWR{WRID: 4, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, SG: g.sg(rcpCmdOff, 64), InvalidateRKey: mr.RKey}, AnyLen)
	Check(t, "host receive of the response", Poll1(t, he.rcq), Want{WRID: 3, Op: verbs.WCRecv, Len: 64, WithInv: true, Imm: mr.RKey})
	sameBytes(t, "host memory (stripped)", h.buf[:len(data)], data)
	mr.status("after the read", nil)

	data2 := pattern(iv*blocks, 0x2B)
	copy(h.buf[8192:], data2)
	d2 := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x700, 0x0)
	mr.reg(h.sg(8192, len(data2)), nil, verbs.SigAttrs{CheckMask: 0xCF, Wire: rcpSigDomain(d2)})
	he.capsule(ge, 5)
	ge.run("RDMA READ through the re-registered key", read(6, g.mr.SGE(16384, wlen), 0, mr.RKey), wlen)
	sameBytes(t, "wire stream of the second I/O", g.buf[16384:16384+wlen], rcpGen(t, d2, data2))
	mr.status("after the write", nil)
}

// rcpWireOffsets: addresses through a signature key are wire-stream
// offsets, also with PI in memory as separate metadata (PASS): a READ of
// blocks 2–4 at wire offset 2 × 520 gets those blocks' data and tuples; a
// WRITE of blocks 5–7 at wire offset 5 × 520 lands in those blocks' data
// and metadata only, and its tuples (ref tags counted from the key's
// first block) check clean.
func rcpWireOffsets(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
	const iv, blocks, metaOff = 512, 8, 8192
	d := rcpDomain(t10dif.Type1, t10dif.GuardCRC16, iv, 0x300, 0x0042)
	data := pattern(iv*blocks, 0x55)
	meta := rcpGenMeta(t, d, data)
	copy(h.buf, data)
	copy(h.buf[metaOff:], meta)
	sd := rcpSigDomain(d)
	mr := he.sigMR(4, 4)
	mr.reg(h.sg(0, len(data)), h.sg(metaOff, len(meta)),
		verbs.SigAttrs{CheckMask: 0xFF, Mem: sd, Wire: sd})
	he.capsule(ge, 1)
	wb := iv + 8
	full := rcpInterleave(data, meta, iv)
	ge.run("READ of blocks 2-4", read(2, g.mr.SGE(0, 3*wb), uint64(2*wb), mr.RKey), 3*wb)
	sameBytes(t, "blocks 2-4 from their wire offset", g.buf[:3*wb], full[2*wb:5*wb])

	data2 := pattern(iv*blocks, 0x0B)
	stream2 := rcpGen(t, d, data2)
	copy(g.buf[16384:], stream2[5*wb:])
	ge.run("WRITE of blocks 5-7", write(3, g.mr.SGE(16384, 3*wb), uint64(5*wb), mr.RKey), AnyLen)
	ge.capsule(he, 4)
	meta2 := rcpGenMeta(t, d, data2)
	wantData := append(append([]byte(nil), data[:5*iv]...), data2[5*iv:]...)
	wantMeta := append(append([]byte(nil), meta[:5*8]...), meta2[5*8:]...)
	sameBytes(t, "host data", h.buf[:len(data)], wantData)
	sameBytes(t, "host metadata", h.buf[metaOff:metaOff+len(meta)], wantMeta)
	mr.status("after the offset accesses", nil)
}

// rcpGuardSeed: the wire domain's guard seed (bg, programmed in its PSV)
// is the CRC's initial value: the inserted guards are t10dif's with that
// seed, and a stream with seeded guards strips clean through the same
// registration.
func rcpGuardSeed(t *testing.T, s *suite) {
	h, g, he, ge := s.sigPair(t)
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
	mr := he.sigMR(4, 4)
	mr.reg(h.sg(0, len(data)), nil, verbs.SigAttrs{CheckMask: 0xFF, Wire: rcpSigDomain(d)})
	he.capsule(ge, 1)
	wlen := blocks * (iv + 8)
	ge.run("RDMA READ", read(2, g.mr.SGE(0, wlen), 0, mr.RKey), wlen)
	sameBytes(t, "wire stream (guards seeded with 0x1234)", g.buf[:wlen], wantSeed)
	mr.status("after the seeded insert", nil)
	// The same stream back: checked against seeded guards, clean.
	clear(h.buf[:len(data)])
	ge.run("RDMA WRITE back", write(3, g.mr.SGE(0, wlen), 0, mr.RKey), AnyLen)
	ge.capsule(he, 4)
	sameBytes(t, "host memory (stripped)", h.buf[:len(data)], data)
	mr.status("after the seeded strip", nil)
}
