package umr

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hcasim/hcasim/klm"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	require.NoError(t, err)
	return b
}

// Offsets from mlx5dv.h (../shared/reference/external/mlx5dv_layout.out):
// umr ctrl flags 0, klm_octowords 4, bsf_octowords 6, mkey_mask 8; mkey
// context free 0, access_flags 2, qpn_mkey 4, flags_pd 12, start_addr 16,
// len 24, bsf_octword_size 32, translations_octword_size 52,
// log_page_size 59.
func TestSegmentLayouts(t *testing.T) {
	c := make(CtrlSeg, CtrlSegSize)
	c.Encode(&CtrlFields{Flags: 0xA0, XLTOctowords: 0x0102, BSFOctowords: 0x0304, Mask: 0x0506070809101112, XLTOffsetHi: 0x13141516})
	want := unhex(t, `a0 000000 0102 0304 0506070809101112 13141516`+strings.Repeat("00", 28))
	assert.Equal(t, want, []byte(c), "ctrl seg")
	m := make(MkeySeg, MkeySegSize)
	f := MkeyFields{
		Free: true, Mode: klm.ModeKSM, SmallFence: true, UMREnabled: true,
		Access: klm.LocalRead | klm.RemoteWrite | klm.LocalWrite, QPN: 0xABCDEF, Variant: 0x42,
		Length64: true, BSFEnabled: true, ExpectedSigErr: 1, RemoteInvalidate: true, PD: 0x123456,
		StartAddr: 0x1122334455667788, Len: 0x99AABBCCDDEEFF00, BSFOctowords: 4, XLTOctowords: 0x10, LogPageSize: 12,
	}
	m.Encode(&f)
	want = unhex(t, `40 01 af 00  abcdef42 00000000 c5123456 1122334455667788 99aabbccddeeff00 00000004`+
		strings.Repeat("00", 16)+`00000010 000000 0c 00000000`)
	assert.Equal(t, want, []byte(m), "mkey seg")
	assert.Equal(t, f, m.Fields(), "mkey seg round trip")
	// Access mode 4 (SW_ICM) uses the status byte's mode bits.
	f2 := MkeyFields{Mode: 6}
	m.Encode(&f2)
	assert.Equal(t, byte(0x04), m[0], "mode 6: status byte")
	assert.Equal(t, byte(0x02), m[2], "mode 6: flags byte")
	assert.Equal(t, klm.AccessMode(6), m.Fields().Mode, "mode 6 round trip")
}

// The LOCAL_INV of mlx5-integrity.md §2.7: UMR ctrl flags 0x80, mask FREE
// only; mkey segment all zero except byte 0 = 0x40.
func TestLocalInvalidateBytes(t *testing.T) {
	body := localInv()
	want := unhex(t, `80 000000 0000 0000 0000000020000000`+strings.Repeat("00", 32)+
		`40`+strings.Repeat("00", 63))
	require.Equal(t, want, body, "LOCAL_INV")
	op, err := Decode(body, 0x1234, nil)
	require.NoError(t, err)
	require.True(t, op.IsLocalInvalidate(), "Decode = %+v; want a LOCAL_INV", op)
}

func localInv() []byte {
	b := make([]byte, CtrlSegSize+MkeySegSize)
	CtrlSeg(b).Encode(&CtrlFields{Flags: FlagInline, Mask: MaskInvalidate})
	MkeySeg(b[CtrlSegSize:]).Encode(&MkeyFields{Free: true})
	return b
}

// wqe builds UMR segments: ctrl, mkey, inline translation, BSF.
func wqe(c CtrlFields, m MkeyFields, xlt, bsf []byte) []byte {
	b := make([]byte, CtrlSegSize+MkeySegSize, CtrlSegSize+MkeySegSize+len(xlt)+len(bsf))
	c.XLTOctowords = uint16(len(xlt) / klm.OctowordSize)
	if bsf != nil {
		c.BSFOctowords = uint16(len(bsf) / klm.OctowordSize)
	}
	CtrlSeg(b).Encode(&c)
	MkeySeg(b[CtrlSegSize:]).Encode(&m)
	return append(append(b, xlt...), bsf...)
}

type env struct {
	mem *klm.Memory
	tab *klm.Table
	buf []byte
}

func newEnv(t testing.TB) *env {
	e := &env{mem: klm.NewMemory(), buf: make([]byte, 1<<16)}
	for i := range e.buf {
		e.buf[i] = byte(i * 7)
	}
	require.NoError(t, e.mem.Map(0x10000, e.buf))
	e.tab = klm.NewTable(klm.ConnectX5, e.mem)
	return e
}

// create makes a free, UMR-enabled mkey of the given mode and capacity.
func (e *env) create(t testing.TB, mode klm.AccessMode, octowords uint32, pd uint32) klm.Key {
	t.Helper()
	k, err := e.tab.Create(klm.Mkey{Free: true, UMREnabled: true, Mode: mode, PD: pd, XLTOctowords: octowords, Variant: 0x11, QPN: 0xFFFFFF})
	require.NoError(t, err)
	return k
}

func klmList(ents ...klm.KLMFields) []byte {
	b := make([]byte, 0, 64)
	for _, f := range ents {
		e := make([]byte, klm.KLMSize)
		klm.KLM(e).Encode(&f)
		b = append(b, e...)
	}
	for len(b)%64 != 0 { // mlx5 pads inline translations to 64 bytes
		b = append(b, 0xEE)
	}
	return b
}

func read(t testing.TB, e *env, key klm.Key, pd uint32, addr, n uint64, acc klm.Access) ([]byte, error) {
	t.Helper()
	segs, err := e.tab.Resolve(nil, klm.Request{Key: key, PD: pd, Addr: addr, Len: n, Access: acc})
	return bytes.Join(segs, nil), err
}

// A fast registration (the FRWR mask) of a KLM key, then LOCAL_INV.
func TestFastRegisterAndInvalidate(t *testing.T) {
	e := newEnv(t)
	k := e.create(t, klm.ModeKLM, 8, 5)
	newKey := klm.MakeKey(k.Index(), 0x12)
	xlt := klmList(
		klm.KLMFields{ByteCount: 100, Key: klm.ReservedLKey, VA: 0x10000},
		klm.KLMFields{ByteCount: 50, Key: klm.ReservedLKey, VA: 0x18000},
	)
	reg := wqe(CtrlFields{Flags: FlagInline, Mask: MaskFastReg},
		MkeyFields{Access: klm.LocalRead | klm.LocalWrite | klm.RemoteRead | klm.RemoteWrite, UMREnabled: true, Mode: klm.ModeKLM,
			QPN: 0xFFFFFF, Variant: 0x12, RemoteInvalidate: true, StartAddr: 0x7000, Len: 150}, xlt, nil)
	op, err := Decode(reg, newKey, nil)
	require.NoError(t, err)
	require.NoError(t, Apply(e.tab, op))
	got, err := read(t, e, newKey, 5, 0x7000+90, 20, klm.RemoteRead)
	require.NoError(t, err)
	want := append(append([]byte(nil), e.buf[90:100]...), e.buf[0x8000:0x8000+10]...)
	require.Equal(t, want, got, "read through the new key")
	// The old variant no longer works.
	_, err = read(t, e, k, 5, 0x7000, 1, klm.LocalRead)
	requireFault(t, err, klm.FaultVariant, "old variant")
	// Re-registering without invalidation is refused by the signature-style
	// not-free check, and leaves the key as it was.
	again := append([]byte(nil), reg...)
	again[0] |= FlagCheckNotFree
	op2, _ := Decode(again, newKey, nil)
	require.ErrorIs(t, Apply(e.tab, op2), ErrNotFree, "re-register a valid key with the not-free check")
	// LOCAL_INV frees it.
	op3, _ := Decode(localInv(), newKey, nil)
	require.NoError(t, Apply(e.tab, op3))
	_, err = read(t, e, newKey, 5, 0x7000, 1, klm.LocalRead)
	requireFault(t, err, klm.FaultFree, "after LOCAL_INV")
	// A LOCAL_INV with the check-free flag fails on a free key.
	inv := localInv()
	inv[0] |= FlagCheckFree
	op4, _ := Decode(inv, newKey, nil)
	require.ErrorIs(t, Apply(e.tab, op4), ErrFree, "check-free on a free key")
	// Now the not-free check passes.
	require.NoError(t, Apply(e.tab, op2), "register a free key with the not-free check")
}

// requireFault checks that err is a klm.Fault of the given kind.
func requireFault(t testing.TB, err error, kind klm.FaultKind, msg string) {
	t.Helper()
	var f *klm.Fault
	require.ErrorAs(t, err, &f, "%s: want a fault of kind %v", msg, kind)
	require.Equal(t, kind, f.Kind, "%s: fault %v", msg, err)
}

// Every mask bit changes exactly its field; fields outside the mask keep
// their values.
func TestMaskBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bits := []Mask{MaskLen, MaskPageSize, MaskStartAddr, MaskPD, MaskEnRInval, MaskEnSigErr,
		MaskBSFEnable, MaskKey, MaskQPN, MaskLR, MaskLW, MaskRR, MaskRW, MaskA, MaskSmallFence, MaskFree}
	randFields := func() MkeyFields {
		return MkeyFields{
			Free: rng.IntN(2) == 0, Mode: klm.ModePA, SmallFence: rng.IntN(2) == 0, UMREnabled: true,
			Access: klm.Access(rng.IntN(256)) & klm.AccessMask, QPN: rng.Uint32() & 0xFFFFFF, Variant: uint8(rng.Uint32()),
			Length64: rng.IntN(2) == 0, BSFEnabled: rng.IntN(2) == 0, ExpectedSigErr: uint8(rng.IntN(2)),
			RemoteInvalidate: rng.IntN(2) == 0, PD: rng.Uint32() & 0xFFFFFF, StartAddr: rng.Uint64(), Len: rng.Uint64(),
			LogPageSize: uint8(12 + rng.IntN(10)),
		}
	}
	view := func(m *klm.Mkey) MkeyFields {
		return MkeyFields{Free: m.Free, Mode: m.Mode, SmallFence: m.SmallFence, UMREnabled: m.UMREnabled, Access: m.Access,
			QPN: m.QPN, Variant: m.Variant, Length64: m.Length64, BSFEnabled: m.BSFEnabled, ExpectedSigErr: m.ExpectedSigErr,
			RemoteInvalidate: m.RemoteInvalidate, PD: m.PD, StartAddr: m.StartAddr, Len: m.Len, LogPageSize: m.LogPageSize}
	}
	applied := 0
	for range 3000 {
		e := newEnv(t)
		cur := randFields()
		cur.Access |= klm.LocalWrite // keep the starting access valid
		mk := cur.Mkey()
		key, err := e.tab.Create(mk)
		require.NoError(t, err)
		before := view(e.tab.Lookup(key.Index()))
		var mask Mask
		for _, b := range bits {
			if rng.IntN(3) == 0 {
				mask |= b
			}
		}
		nf := randFields()
		var bsf []byte
		if mask&MaskBSFEnable != 0 && nf.BSFEnabled {
			bsf = bytes.Repeat([]byte{0x5A}, BSFSize)
		}
		op, err := Decode(wqe(CtrlFields{Flags: FlagInline, Mask: mask}, nf, nil, bsf), key, nil)
		require.NoError(t, err)
		err = Apply(e.tab, op)
		after := view(e.tab.Lookup(key.Index()))
		want := before
		set := func(m Mask, f func()) {
			if mask&m != 0 {
				f()
			}
		}
		set(MaskLen, func() { want.Len, want.Length64 = nf.Len, nf.Length64 })
		set(MaskPageSize, func() { want.LogPageSize = nf.LogPageSize })
		set(MaskStartAddr, func() { want.StartAddr = nf.StartAddr })
		set(MaskPD, func() { want.PD = nf.PD })
		set(MaskEnRInval, func() { want.RemoteInvalidate = nf.RemoteInvalidate })
		set(MaskEnSigErr, func() { want.ExpectedSigErr = nf.ExpectedSigErr })
		set(MaskBSFEnable, func() { want.BSFEnabled = nf.BSFEnabled })
		set(MaskKey, func() { want.Variant = nf.Variant })
		set(MaskQPN, func() { want.QPN = nf.QPN })
		for _, p := range []struct {
			m Mask
			a klm.Access
		}{{MaskLR, klm.LocalRead}, {MaskLW, klm.LocalWrite}, {MaskRR, klm.RemoteRead}, {MaskRW, klm.RemoteWrite}, {MaskA, klm.Atomic}} {
			set(p.m, func() { want.Access = want.Access&^p.a | nf.Access&p.a })
		}
		set(MaskSmallFence, func() { want.SmallFence = nf.SmallFence })
		set(MaskFree, func() { want.Free = nf.Free })
		if !want.Access.Valid() {
			require.ErrorIs(t, err, ErrAccess, "mask %#x to access %v", mask, want.Access)
			require.Equal(t, before, after, "mask %#x to access %v: the table changed", mask, want.Access)
			continue
		}
		require.NoError(t, err, "mask %#x", mask)
		applied++
		require.Equal(t, want, after, "mask %#x\nbefore %+v\nfields %+v", mask, before, nf)
	}
	require.GreaterOrEqual(t, applied, 1000, "random UMRs applied of 3000")
}

func TestDecodeErrors(t *testing.T) {
	good := wqe(CtrlFields{Flags: FlagInline, Mask: MaskFastReg}, MkeyFields{UMREnabled: true}, klmList(klm.KLMFields{ByteCount: 1, Key: klm.ReservedLKey}), nil)
	for _, tc := range []struct {
		name string
		body []byte
		want error
	}{
		{"short", good[:100], ErrShortWQE},
		{"unknown mask bit", func() []byte {
			b := append([]byte(nil), good...)
			binary.BigEndian.PutUint64(b[8:], uint64(MaskFastReg|1<<2))
			return b
		}(), ErrUnknownMask},
		{"translation larger than supplied", good[:len(good)-1], ErrShortTranslation},
		{"both free checks", func() []byte {
			b := append([]byte(nil), good...)
			b[0] |= FlagCheckFree | FlagCheckNotFree
			return b
		}(), ErrBadFlags},
		{"reserved flag bit", func() []byte {
			b := append([]byte(nil), good...)
			b[0] |= 0x01
			return b
		}(), ErrBadFlags},
		{"BSF missing", wqe(CtrlFields{Flags: FlagInline, Mask: MaskSignature}, MkeyFields{BSFEnabled: true}, klmList(), nil), ErrBadBSF},
		{"BSF wrong size", wqe(CtrlFields{Flags: FlagInline, Mask: MaskSignature}, MkeyFields{BSFEnabled: true}, nil, make([]byte, 32)), ErrBadBSF},
		{"pointer without data segment", func() []byte {
			b := append([]byte(nil), good[:CtrlSegSize+MkeySegSize]...)
			b[0] = 0
			return b
		}(), ErrShortWQE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.body, 0x800, nil)
			require.ErrorIs(t, err, tc.want, "Decode")
		})
	}
}

// A translation pointed to by a data segment is fetched through its key.
func TestPointedTranslation(t *testing.T) {
	e := newEnv(t)
	k := e.create(t, klm.ModeMTT, 8, 3)
	// Four MTT entries at IOVA 0x10100 (inside the mapped buffer).
	var mtt []byte
	for i := range 4 {
		ent := make([]byte, klm.MTTSize)
		klm.MTT(ent).Encode(&klm.MTTFields{Addr: 0x10000 + uint64(3-i)*0x1000, Read: true, Write: true})
		mtt = append(mtt, ent...)
	}
	copy(e.buf[0x100:], mtt)
	b := make([]byte, CtrlSegSize+MkeySegSize+DataSegSize)
	CtrlSeg(b).Encode(&CtrlFields{XLTOctowords: 2, Mask: MaskFastReg})
	MkeySeg(b[CtrlSegSize:]).Encode(&MkeyFields{Access: klm.LocalRead | klm.LocalWrite, StartAddr: 0x40000, Len: 0x4000, LogPageSize: 12, Variant: 0x11})
	klm.KLM(b[CtrlSegSize+MkeySegSize:]).Encode(&klm.KLMFields{ByteCount: 64, Key: klm.ReservedLKey, VA: 0x10100})
	fetch := func(key klm.Key, addr uint64, n int) ([]byte, error) {
		segs, err := e.tab.Resolve(nil, klm.Request{Key: key, PD: 3, Addr: addr, Len: uint64(n), Access: klm.LocalRead})
		return bytes.Join(segs, nil), err
	}
	op, err := Decode(b, k, fetch)
	require.NoError(t, err)
	require.NoError(t, Apply(e.tab, op))
	// Page 0 of the key is IOVA 0x13000 (buffer offset 0x3000).
	got, err := read(t, e, k, 3, 0x40010, 16, klm.LocalRead)
	require.NoError(t, err, "read")
	require.Equal(t, e.buf[0x3010:0x3020], got, "read")
	// A data segment shorter than the translation is refused; so is a
	// fetch through a bad key.
	klm.KLM(b[CtrlSegSize+MkeySegSize:]).Encode(&klm.KLMFields{ByteCount: 16, Key: klm.ReservedLKey, VA: 0x10100})
	_, err = Decode(b, k, fetch)
	require.ErrorIs(t, err, ErrShortTranslation, "short data segment")
	klm.KLM(b[CtrlSegSize+MkeySegSize:]).Encode(&klm.KLMFields{ByteCount: 64, Key: 0x999, VA: 0x10100})
	_, err = Decode(b, k, fetch)
	require.ErrorIs(t, err, ErrFetch, "bad fetch key")
	require.ErrorIs(t, err, klm.ErrFault, "bad fetch key")
}

func TestApplyErrorsLeaveTableUnchanged(t *testing.T) {
	e := newEnv(t)
	k := e.create(t, klm.ModeKLM, 4, 1)
	before := e.tab.Lookup(k.Index())
	big := klmList(make([]klm.KLMFields, 5)...) // 5 entries padded to 8: 8 octowords > 4
	for _, tc := range []struct {
		name string
		op   *Op
		want error
	}{
		{"too many entries", mustDecode(t, wqe(CtrlFields{Flags: FlagInline, Mask: MaskFastReg}, MkeyFields{Access: klm.LocalRead}, big, nil), k), ErrTooManyEntries},
		{"remote write without local write", mustDecode(t, wqe(CtrlFields{Flags: FlagInline, Mask: MaskFastReg}, MkeyFields{Access: klm.RemoteWrite}, nil, nil), k), ErrAccess},
		{"atomic without local write", mustDecode(t, wqe(CtrlFields{Flags: FlagInline, Mask: MaskA | MaskFree}, MkeyFields{Access: klm.Atomic}, nil, nil), k), ErrAccess},
		{"no such mkey", mustDecode(t, localInv(), klm.MakeKey(999, 0)), klm.ErrNoMkey},
		{"reserved index", mustDecode(t, localInv(), klm.ReservedLKey), klm.ErrIndex},
		{"bad translation", mustDecode(t, wqe(CtrlFields{Flags: FlagInline, Mask: MaskFastReg}, MkeyFields{Access: klm.LocalRead, Len: 64},
			func() []byte { // repeat block whose entries do not sum to bcount_per_cycle
				b := make([]byte, 64)
				klm.RepeatCtrl(b).Encode(&klm.RepeatCtrlFields{BytesPerCycle: 9, Op: klm.RepeatBlockOp, RepeatCount: 1, NumEntries: 1})
				klm.RepeatEntry(b[16:]).Encode(&klm.RepeatEntryFields{ByteCount: 8, Key: klm.ReservedLKey})
				return b
			}(), nil), k), klm.ErrBadTranslation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, Apply(e.tab, tc.op), tc.want, "Apply")
			require.Same(t, before, e.tab.Lookup(k.Index()), "the table changed")
		})
	}
	// A key created without umr_en cannot be changed by a UMR.
	k2, err := e.tab.Create(klm.Mkey{Free: true, XLTOctowords: 4})
	require.NoError(t, err)
	require.ErrorIs(t, Apply(e.tab, mustDecode(t, localInv(), k2)), ErrNotUMR, "UMR on a key without umr_en")
}

func mustDecode(t testing.TB, b []byte, k klm.Key) *Op {
	t.Helper()
	op, err := Decode(b, k, nil)
	require.NoError(t, err)
	return op
}

// The translation offset writes entries in the middle of the existing
// translation and keeps the others.
func TestTranslationOffset(t *testing.T) {
	e := newEnv(t)
	k := e.create(t, klm.ModeMTT, 8, 0)
	mtt := func(pages ...uint64) []byte {
		var b []byte
		for _, p := range pages {
			ent := make([]byte, 8)
			klm.MTT(ent).Encode(&klm.MTTFields{Addr: p, Read: true})
			b = append(b, ent...)
		}
		return b
	}
	op := mustDecode(t, wqe(CtrlFields{Flags: FlagInline, Mask: MaskFastReg},
		MkeyFields{Access: klm.LocalRead, Len: 4 << 12, LogPageSize: 12, Variant: 0x11}, mtt(0x10000, 0x11000, 0x12000, 0x13000), nil), k)
	require.NoError(t, Apply(e.tab, op))
	// Replace page 2 (octoword 1 holds pages 2 and 3).
	op = mustDecode(t, wqe(CtrlFields{Flags: FlagInline | FlagXLTOffset, BSFOctowords: 1}, MkeyFields{}, mtt(0x1F000, 0x13000), nil), k)
	op.Ctrl.BSFOctowords = 1 // wqe() sets it only for a BSF
	op.XLTOffset = op.Ctrl.XLTOffset()
	require.NoError(t, Apply(e.tab, op))
	got, err := read(t, e, k, 0, 2<<12, 4, klm.LocalRead)
	require.NoError(t, err, "page 2 after the offset update")
	require.Equal(t, e.buf[0xF000:0xF004], got, "page 2 after the offset update")
	got, err = read(t, e, k, 0, 1<<12, 4, klm.LocalRead)
	require.NoError(t, err, "page 1 after the offset update")
	require.Equal(t, e.buf[0x1000:0x1004], got, "page 1 after the offset update")
}

// The signature UMR of mlx5-integrity.md §2.3–2.5: strided translation over
// a KLM PI MR, BSF carried to the mkey, 16 DS.
func TestSignatureUMR(t *testing.T) {
	e := newEnv(t)
	// The PI MR: zero-based KLM over 8 × 512 B of data at 0x10000 and 64 B
	// of PI at 0x18000.
	pi := e.create(t, klm.ModeKLM, 8, 9)
	op := mustDecode(t, wqe(CtrlFields{Flags: FlagInline, Mask: MaskFastReg},
		MkeyFields{Access: klm.LocalRead | klm.LocalWrite, Len: 4096 + 64, Variant: 0x34},
		klmList(klm.KLMFields{ByteCount: 4096, Key: klm.ReservedLKey, VA: 0x10000}, klm.KLMFields{ByteCount: 64, Key: klm.ReservedLKey, VA: 0x18000}), nil), pi)
	require.NoError(t, Apply(e.tab, op))
	piKey := klm.MakeKey(pi.Index(), 0x34)
	sig := e.create(t, klm.ModeKLM, 4, 9)
	xlt := make([]byte, 64)
	klm.RepeatCtrl(xlt).Encode(&klm.RepeatCtrlFields{BytesPerCycle: 520, Op: klm.RepeatBlockOp, RepeatCount: 8, NumEntries: 2})
	klm.RepeatEntry(xlt[16:]).Encode(&klm.RepeatEntryFields{Stride: 512, ByteCount: 512, Key: piKey, VA: 0})
	klm.RepeatEntry(xlt[32:]).Encode(&klm.RepeatEntryFields{Stride: 8, ByteCount: 8, Key: piKey, VA: 4096})
	bsf := unhex(t, `90 CF FF 01  00 00 10 00  00 00 00 11  00 00 00 10`+strings.Repeat("00", 16)+
		`C0 00 00 00  00 00 10 00  01 80 00 00  00 41 FF FF  C0 00 00 00  00 00 10 00  01 80 00 00  00 41 FF FF`)
	body := wqe(CtrlFields{Flags: FlagInline | FlagCheckNotFree, Mask: MaskSignature},
		MkeyFields{Access: klm.LocalRead | klm.LocalWrite | klm.RemoteRead | klm.RemoteWrite, UMREnabled: true, Mode: klm.ModeKLM,
			QPN: 0xFFFFFF, Variant: 0x56, RemoteInvalidate: true, ExpectedSigErr: 1, BSFEnabled: true, PD: 9,
			Len: 4096 + 64, XLTOctowords: 4, BSFOctowords: 4}, xlt, bsf)
	require.Equal(t, 16*16, 16+len(body), "signature UMR bytes, want 16 DS")
	sigKey := klm.MakeKey(sig.Index(), 0x56)
	op = mustDecode(t, body, sigKey)
	require.NoError(t, Apply(e.tab, op))
	m := e.tab.Lookup(sig.Index())
	require.True(t, m.BSFEnabled, "sig mkey %+v", m)
	require.Equal(t, bsf, m.BSF, "sig mkey BSF")
	require.EqualValues(t, 1, m.ExpectedSigErr, "sig mkey %+v", m)
	require.EqualValues(t, 0x56, m.Variant, "sig mkey %+v", m)
	// The key's stream is data block i then PI tuple i.
	got, err := read(t, e, sigKey, 9, 0, 4160, klm.RemoteRead)
	require.NoError(t, err)
	var want []byte
	for i := range 8 {
		want = append(want, e.buf[i*512:(i+1)*512]...)
		want = append(want, e.buf[0x8000+i*8:0x8000+i*8+8]...)
	}
	require.True(t, bytes.Equal(got, want), "signature key stream is not the interleaved data and PI")
	// A second signature UMR without invalidation fails the not-free check.
	require.ErrorIs(t, Apply(e.tab, op), ErrNotFree, "second signature UMR")
	// Disabling the BSF drops it.
	require.NoError(t, Apply(e.tab, mustDecode(t, wqe(CtrlFields{Flags: FlagInline, Mask: MaskBSFEnable}, MkeyFields{}, nil, nil), sigKey)))
	m = e.tab.Lookup(sig.Index())
	require.False(t, m.BSFEnabled, "BSF kept after BSF_EN cleared")
	require.Nil(t, m.BSF, "BSF kept after BSF_EN cleared")
}

// Decode∘Encode: the segment views round-trip every field.
func TestSegmentRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		c := CtrlFields{Flags: uint8(rng.Uint32()), XLTOctowords: uint16(rng.Uint32()), BSFOctowords: uint16(rng.Uint32()),
			Mask: Mask(rng.Uint64()), XLTOffsetHi: rng.Uint32()}
		b := make(CtrlSeg, CtrlSegSize)
		b.Encode(&c)
		require.Equal(t, c, b.Fields(), "ctrl round trip")
		m := MkeyFields{Free: rng.IntN(2) == 0, Mode: klm.AccessMode(rng.IntN(32)), SmallFence: rng.IntN(2) == 0,
			UMREnabled: rng.IntN(2) == 0, Access: klm.Access(rng.Uint32()) & klm.AccessMask, QPN: rng.Uint32() & 0xFFFFFF,
			Variant: uint8(rng.Uint32()), Length64: rng.IntN(2) == 0, BSFEnabled: rng.IntN(2) == 0,
			ExpectedSigErr: uint8(rng.IntN(2)), RemoteInvalidate: rng.IntN(2) == 0, PD: rng.Uint32() & 0xFFFFFF,
			StartAddr: rng.Uint64(), Len: rng.Uint64(), BSFOctowords: rng.Uint32(), XLTOctowords: rng.Uint32(), LogPageSize: uint8(rng.IntN(64))}
		s := make(MkeySeg, MkeySegSize)
		s.Encode(&m)
		require.Equal(t, m, s.Fields(), "mkey round trip")
	}
}
