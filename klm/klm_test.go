package klm_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/hcasim/hcasim/klm"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// Entry layouts: golden bytes (mlx5-integrity.md §3.5) and round trips.

func TestKLMLayout(t *testing.T) {
	for _, c := range []struct {
		f   klm.KLMFields
		hex string
	}{
		{klm.KLMFields{ByteCount: 0x200, Key: 0x1234, VA: 0}, "00000200 00001234 0000000000000000"},
		{klm.KLMFields{ByteCount: 0x01020304, Key: 0x05060708, VA: 0x090a0b0c0d0e0f10}, "01020304 05060708 090a0b0c0d0e0f10"},
		{klm.KLMFields{ByteCount: 0xFFFFFFFF, Key: 0xFFFFFFFF, VA: ^uint64(0)}, "ffffffff ffffffff ffffffffffffffff"},
		{klm.KLMFields{Key: klm.ReservedLKey, VA: 0x1000}, "00000000 00000200 0000000000001000"},
	} {
		want := unhex(t, c.hex)
		// Encode writes only its 16 bytes of a longer buffer.
		buf := bytes.Repeat([]byte{0xEE}, 3*klm.KLMSize)
		e := klm.KLM(buf[klm.KLMSize:])
		e.Encode(&c.f)
		assert.Equal(t, want, buf[klm.KLMSize:2*klm.KLMSize], "KLM %+v encodes", c.f)
		assert.Equal(t, bytes.Repeat([]byte{0xEE}, 16), buf[:16], "KLM %+v: Encode wrote before its entry", c.f)
		assert.Equal(t, bytes.Repeat([]byte{0xEE}, 16), buf[32:], "KLM %+v: Encode wrote after its entry", c.f)
		assert.Equal(t, c.f, klm.KLM(want).Fields(), "KLM % x decodes", want)
		v := klm.KLM(want)
		assert.Equal(t, c.f.ByteCount, v.ByteCount(), "KLM accessors of % x", want)
		assert.Equal(t, c.f.Key, v.Key(), "KLM accessors of % x", want)
		assert.Equal(t, c.f.VA, v.VA(), "KLM accessors of % x", want)
	}
}

func TestKSMLayout(t *testing.T) {
	f := klm.KSMFields{Key: 0x00001234, VA: 0x0102030405060708}
	want := unhex(t, "00000000 00001234 0102030405060708")
	buf := bytes.Repeat([]byte{0xEE}, klm.KSMSize)
	klm.KSM(buf).Encode(&f)
	require.Equal(t, want, buf, "KSM encodes (reserved bytes zeroed)")
	// The reserved word is ignored when decoding.
	dirty := unhex(t, "deadbeef 00001234 0102030405060708")
	require.Equal(t, f, klm.KSM(dirty).Fields(), "KSM % x decodes", dirty)
}

func TestMTTLayout(t *testing.T) {
	for _, c := range []struct {
		f    klm.MTTFields
		hex  string
		back klm.MTTFields
	}{
		{klm.MTTFields{Addr: 0x12345000, Read: true, Write: true}, "0000000012345003", klm.MTTFields{Addr: 0x12345000, Read: true, Write: true}},
		{klm.MTTFields{Addr: 0x12345000, Read: true}, "0000000012345001", klm.MTTFields{Addr: 0x12345000, Read: true}},
		{klm.MTTFields{Addr: 0x12345000, Write: true}, "0000000012345002", klm.MTTFields{Addr: 0x12345000, Write: true}},
		{klm.MTTFields{Addr: 0xFEDCBA9876543000}, "fedcba9876543000", klm.MTTFields{Addr: 0xFEDCBA9876543000}},
		// The two low bits of the address are the flags: Encode drops them.
		{klm.MTTFields{Addr: 0x1003, Read: true}, "0000000000001001", klm.MTTFields{Addr: 0x1000, Read: true}},
		// Other low bits (below the page size) are kept in the entry.
		{klm.MTTFields{Addr: 0x1ffc, Write: true}, "0000000000001ffe", klm.MTTFields{Addr: 0x1ffc, Write: true}},
	} {
		buf := make([]byte, klm.MTTSize)
		klm.MTT(buf).Encode(&c.f)
		assert.Equal(t, unhex(t, c.hex), buf, "MTT %+v encodes", c.f)
		assert.Equal(t, c.back, klm.MTT(buf).Fields(), "MTT % x decodes", buf)
	}
	require.EqualValues(t, 1, klm.MTTRead, "MTT flag EN_RD")
	require.EqualValues(t, 2, klm.MTTWrite, "MTT flag EN_WR")
}

func TestRepeatLayout(t *testing.T) {
	// The worked example of mlx5-integrity.md §2.4.
	ctrl := klm.RepeatCtrlFields{BytesPerCycle: 0x208, Op: klm.RepeatBlockOp, RepeatCount: 8, NumEntries: 2}
	wantCtrl := unhex(t, "00 00 02 08  00 00 04 00  00 00 00 08  00 00 00 02")
	buf := bytes.Repeat([]byte{0xEE}, klm.RepeatCtrlSize)
	klm.RepeatCtrl(buf).Encode(&ctrl)
	assert.Equal(t, wantCtrl, buf, "ctrl encodes")
	assert.Equal(t, ctrl, klm.RepeatCtrl(wantCtrl).Fields(), "ctrl decodes")
	// Reserved bytes 12-13 are ignored when decoding.
	dirty := bytes.Clone(wantCtrl)
	dirty[12], dirty[13] = 0xAB, 0xCD
	assert.Equal(t, ctrl, klm.RepeatCtrl(dirty).Fields(), "ctrl with reserved bytes decodes")
	for _, c := range []struct {
		f   klm.RepeatEntryFields
		hex string
	}{
		{klm.RepeatEntryFields{Stride: 0x200, ByteCount: 0x200, Key: 0x1234, VA: 0}, "02 00 02 00  00 00 12 34  00 00 00 00 00 00 00 00"},
		{klm.RepeatEntryFields{Stride: 8, ByteCount: 8, Key: 0x1234, VA: 0x1000}, "00 08 00 08  00 00 12 34  00 00 00 00 00 00 10 00"},
		{klm.RepeatEntryFields{Stride: 0xFFFF, ByteCount: 0x0102, Key: 0xA1B2C3D4, VA: 0x1122334455667788}, "ff ff 01 02  a1 b2 c3 d4  11 22 33 44 55 66 77 88"},
	} {
		buf := make([]byte, klm.RepeatEntrySize)
		klm.RepeatEntry(buf).Encode(&c.f)
		assert.Equal(t, unhex(t, c.hex), buf, "entry %+v encodes", c.f)
		assert.Equal(t, c.f, klm.RepeatEntry(buf).Fields(), "entry % x decodes", buf)
	}
}

func TestEntrySizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"KLMSize", klm.KLMSize, 16}, {"KSMSize", klm.KSMSize, 16}, {"MTTSize", klm.MTTSize, 8},
		{"RepeatCtrlSize", klm.RepeatCtrlSize, 16}, {"RepeatEntrySize", klm.RepeatEntrySize, 16}, {"OctowordSize", klm.OctowordSize, 16},
	} {
		require.Equal(t, c.want, c.got, "%s differs from mlx5's", c.name)
	}
	require.EqualValues(t, 0x400, klm.RepeatBlockOp, "RepeatBlockOp")
}

// ---------------------------------------------------------------------------
// Keys, permissions, capabilities, faults.

func TestKey(t *testing.T) {
	k := klm.MakeKey(0x12, 0x34)
	require.Equal(t, klm.Key(0x1234), k, "MakeKey(0x12, 0x34)")
	require.EqualValues(t, 0x12, k.Index(), "MakeKey(0x12, 0x34) index")
	require.EqualValues(t, 0x34, k.Variant(), "MakeKey(0x12, 0x34) variant")
	require.True(t, k.IsValid(), "MakeKey(0x12, 0x34) is not valid")
	kmax := klm.MakeKey(0xFFFFFF, 0xFF)
	require.Equal(t, klm.Key(0xFFFFFFFF), kmax, "MakeKey(max)")
	require.EqualValues(t, 0xFFFFFF, kmax.Index(), "MakeKey(max) index")
	require.False(t, klm.Key(0xFF).IsValid(), "index 0 is valid")
	require.False(t, klm.Key(0).IsValid(), "index 0 is valid")
	require.Equal(t, "0x00001234", k.String(), "String")
	require.Equal(t, klm.Key(0x200), klm.ReservedLKey, "ReservedLKey")
	require.EqualValues(t, 2, klm.ReservedLKey.Index(), "ReservedLKey index")
	require.Zero(t, klm.ReservedLKey.Variant(), "ReservedLKey variant")
	require.EqualValues(t, 8, klm.FirstIndex, "FirstIndex")
	for s, want := range map[string]klm.Key{"0x1203": 0x1203, " 4660 ": 4660, "0X00001234": 0x1234, "0xffffffff": 0xFFFFFFFF} {
		k, err := klm.ParseKey(s)
		if assert.NoError(t, err, "ParseKey(%q)", s) {
			assert.Equal(t, want, k, "ParseKey(%q)", s)
		}
	}
	for _, s := range []string{"", "0x100000000", "key", "-1"} {
		_, err := klm.ParseKey(s)
		assert.Error(t, err, "ParseKey(%q) succeeded", s)
	}
	require.Equal(t, klm.ReservedLKey, klm.MustParseKey("0x200"), "MustParseKey")
	assert.Panics(t, func() { klm.MustParseKey("x") }, "MustParseKey(\"x\") did not panic")
}

func TestAccess(t *testing.T) {
	for i := range 256 {
		a := klm.Access(i)
		valid := a&^klm.AccessMask == 0 && (a&(klm.RemoteWrite|klm.Atomic) == 0 || a&klm.LocalWrite != 0)
		assert.Equal(t, valid, a.Valid(), "%v.Valid()", a)
		var local klm.Access
		if a&(klm.LocalRead|klm.RemoteRead) != 0 {
			local |= klm.LocalRead
		}
		if a&(klm.LocalWrite|klm.RemoteWrite|klm.Atomic) != 0 {
			local |= klm.LocalWrite
		}
		assert.Equal(t, local, a.Local(), "%v.Local()", a)
		assert.Equal(t, a&(klm.RemoteRead|klm.RemoteWrite|klm.Atomic) != 0, a.Remote(), "%v.Remote()", a)
	}
	for a, want := range map[klm.Access]string{
		0: "none", klm.AccessMask: "LR|LW|RR|RW|A", klm.RemoteRead | klm.LocalRead: "LR|RR", 0x85: "LR|0x81",
	} {
		assert.Equal(t, want, a.String(), "Access(%#x).String()", uint8(a))
	}
	for _, c := range []struct{ got, want klm.Access }{
		{klm.LocalRead, 0x04}, {klm.LocalWrite, 0x08}, {klm.RemoteRead, 0x10}, {klm.RemoteWrite, 0x20}, {klm.Atomic, 0x40},
	} {
		require.Equal(t, c.want, c.got, "permission bit %v differs from MLX5_PERM_*", c.got)
	}
	for m, want := range map[klm.AccessMode]string{klm.ModePA: "PA", klm.ModeMTT: "MTT", klm.ModeKLM: "KLM", klm.ModeKSM: "KSM", 6: "AccessMode(6)"} {
		assert.Equal(t, want, m.String(), "mode %d String", m)
	}
}

func TestCaps(t *testing.T) {
	c := klm.ConnectX5
	require.EqualValues(t, 1<<16, c.MaxListEntries(), "ConnectX5 list entries")
	require.EqualValues(t, 1<<16, c.MaxFastRegPageListLen(), "ConnectX5 fast-reg page list entries")
	require.EqualValues(t, 4, c.MaxIndirection, "ConnectX5 = %+v", c)
	require.EqualValues(t, 16, c.MaxRepeatEntries, "ConnectX5 = %+v", c)
	require.EqualValues(t, 12, c.MinLogPageSize, "ConnectX5 = %+v", c)
	require.EqualValues(t, 30, c.MaxLogPageSize, "ConnectX5 = %+v", c)
	require.EqualValues(t, 1<<20, c.MaxMkeys, "ConnectX5 = %+v", c)
	c.LogMaxKLMListSize = 3
	require.EqualValues(t, 8, c.MaxListEntries(), "MaxListEntries with log 3")
}

func TestFaultError(t *testing.T) {
	f := &klm.Fault{Kind: klm.FaultPD, Key: 0x1234, Depth: 1, Addr: 0x10, Len: 0x20, Need: klm.LocalRead}
	msg := f.Error()
	for _, part := range []string{"PD mismatch", "0x00001234", "0x10", "0x20", "LR", "depth 1"} {
		assert.Contains(t, msg, part)
	}
	wrapped := fmt.Errorf("wqe 3: %w", f)
	assert.ErrorIs(t, wrapped, klm.ErrFault, "wrapped fault")
	var g *klm.Fault
	if assert.ErrorAs(t, wrapped, &g, "errors.As lost the fault") {
		assert.Same(t, f, g, "errors.As lost the fault")
	}
	assert.NotErrorIs(t, klm.ErrUnmappedIO, klm.ErrFault, "ErrUnmappedIO matches ErrFault")
	names := map[string]klm.FaultKind{} // name → the kind that has it
	for k := klm.FaultInvalid; k <= klm.FaultTranslation; k++ {
		s := k.String()
		assert.NotEmpty(t, s, "kind %d has no name", k)
		assert.False(t, strings.HasPrefix(s, "FaultKind("), "kind %d has no name", k)
		assert.NotContains(t, names, s, "kinds %d and %d share the name %q", names[s], k, s)
		names[s] = k
	}
	assert.Equal(t, "FaultKind(200)", klm.FaultKind(200).String())
}

// ---------------------------------------------------------------------------
// Memory.

func TestMemoryMap(t *testing.T) {
	m := klm.NewMemory()
	for _, c := range []struct {
		iova uint64
		n    int
		want error
	}{
		{0x1000, 0, klm.ErrEmptyMap},
		{^uint64(0) - 7, 16, klm.ErrEmptyMap}, // wraps
		{0x1000, 0x100, nil},
		{0x1000, 1, klm.ErrOverlap},      // same start
		{0x10FF, 1, klm.ErrOverlap},      // last byte
		{0x0FF0, 0x20, klm.ErrOverlap},   // straddles the start
		{0x10F0, 0x20, klm.ErrOverlap},   // straddles the end
		{0x1080, 0x10, klm.ErrOverlap},   // inside
		{0x0800, 0x1000, klm.ErrOverlap}, // contains
		{0x1100, 0x10, nil},              // adjacent after
		{0x0F00, 0x100, nil},             // adjacent before
		{0x10000, 0x10, nil},
		{0x0F80, 0x200, klm.ErrOverlap}, // spans two regions
		{^uint64(0) - 16, 16, nil},      // ends one byte before the top
		// As implemented, a region may not end exactly at 2^64: the last
		// byte of the address space cannot be mapped.
		{^uint64(0) - 15, 16, klm.ErrEmptyMap},
	} {
		err := m.Map(c.iova, make([]byte, c.n))
		if c.want == nil {
			assert.NoError(t, err, "Map(%#x, %#x)", c.iova, c.n)
		} else {
			assert.ErrorIs(t, err, c.want, "Map(%#x, %#x)", c.iova, c.n)
		}
	}
	assert.ErrorIs(t, m.Map(0x2000, nil), klm.ErrEmptyMap, "Map(nil)")
	require.EqualValues(t, 0x100+0x10+0x100+0x10+16, m.Mapped(), "Mapped")
	for _, a := range []uint64{0x1080, 0x10FF, 0x2000, 0} {
		assert.ErrorIs(t, m.Unmap(a), klm.ErrNotMapped, "Unmap(%#x)", a)
	}
	require.NoError(t, m.Unmap(0x1000))
	require.ErrorIs(t, m.Unmap(0x1000), klm.ErrNotMapped, "second Unmap")
	require.EqualValues(t, 0x10+0x100+0x10+16, m.Mapped(), "Mapped after Unmap")
	require.NoError(t, m.Map(0x1000, make([]byte, 0x100)), "Map after Unmap")
}

func TestMemoryLimit(t *testing.T) {
	m := klm.NewMemory()
	m.Limit = 100
	require.NoError(t, m.Map(0, make([]byte, 60)))
	require.ErrorIs(t, m.Map(100, make([]byte, 41)), klm.ErrMapLimit, "Map over the limit")
	require.EqualValues(t, 60, m.Mapped(), "a refused Map changed Mapped")
	require.NoError(t, m.Map(100, make([]byte, 40)), "Map up to the limit")
	require.ErrorIs(t, m.Map(200, make([]byte, 1)), klm.ErrMapLimit, "Map past a full limit")
	require.NoError(t, m.Unmap(0))
	require.NoError(t, m.Map(200, make([]byte, 60)), "Map after Unmap freed room")
}

func TestMemorySegments(t *testing.T) {
	s := newSpace(t)
	a := s.mapNew(0x1000, 0x100)
	b := s.mapNew(0x1100, 0x80) // adjacent to a
	c := s.mapNew(0x2000, 0x10)
	top := s.mapNew(^uint64(0)-0x20, 0x10)
	same := func(seg, want []byte) bool {
		return len(seg) == len(want) && unsafe.SliceData(seg) == unsafe.SliceData(want)
	}
	segs, err := s.mem.Segments(nil, 0x1010, 0x10)
	require.NoError(t, err, "one region")
	require.Len(t, segs, 1, "one region: segments")
	require.True(t, same(segs[0], a[0x10:0x20]), "one region: the segment is not the mapped buffer")
	// Writes through a segment reach the caller's buffer: no copies.
	segs[0][0] = 0x5A
	require.Equal(t, byte(0x5A), a[0x10], "a write through the segment is not in the mapped buffer")
	segs, err = s.mem.Segments(newSegs(), 0x10F0, 0x20)
	require.NoError(t, err, "adjacent regions")
	require.Len(t, segs, 4, "adjacent regions: segments")
	require.True(t, same(segs[2], a[0xF0:]) && same(segs[3], b[:0x10]), "adjacent regions: the segments are not the mapped buffers")
	checkSentinel(t, segs)
	segs, err = s.mem.Segments(nil, 0x1000, 0x180)
	require.NoError(t, err, "two whole regions")
	require.Len(t, segs, 2, "two whole regions: segments")
	require.True(t, same(segs[0], a) && same(segs[1], b), "two whole regions: the segments are not the mapped buffers")
	segs, err = s.mem.Segments(nil, 0x2000, 0x10)
	require.NoError(t, err, "whole region c")
	require.True(t, same(segs[0], c), "whole region c")
	segs, err = s.mem.Segments(nil, ^uint64(0)-0x20, 0x10)
	require.NoError(t, err, "region at the top")
	require.True(t, same(segs[0], top), "region at the top")
	for _, r := range []struct{ iova, n uint64 }{
		{0x0FFF, 2},             // starts before a
		{0x0F00, 1},             // entirely before
		{0x1170, 0x20},          // runs off b into the gap
		{0x1180, 1},             // in the gap
		{0x1000, 0x1011},        // a, b, gap, c
		{0x2010, 1},             // just after c
		{^uint64(0) - 0x11, 2},  // just after top
		{^uint64(0), 2},         // wraps
		{^uint64(0) - 0x20, 17}, // past top
	} {
		got, err := s.mem.Segments(newSegs(), r.iova, r.n)
		assert.ErrorIs(t, err, klm.ErrUnmappedIO, "Segments(%#x, %#x)", r.iova, r.n)
		assert.Len(t, got, len(sentinel), "Segments(%#x, %#x) failed with segments", r.iova, r.n)
		checkSentinel(t, got)
	}
	// Zero bytes are always fine, mapped or not.
	for _, iova := range []uint64{0, 0x1180, 0x1000, ^uint64(0)} {
		got, err := s.mem.Segments(newSegs(), iova, 0)
		assert.NoError(t, err, "Segments(%#x, 0)", iova)
		assert.Len(t, got, len(sentinel), "Segments(%#x, 0)", iova)
	}
	// After Unmap the range faults; slices handed out stay usable.
	old, _ := s.mem.Segments(nil, 0x1100, 0x80)
	s.unmap(0x1100)
	_, err = s.mem.Segments(nil, 0x10F0, 0x20)
	require.ErrorIs(t, err, klm.ErrUnmappedIO, "after Unmap")
	old[0][0] = 1
	require.Equal(t, byte(1), b[0], "old slice no longer aliases the buffer")
}

// ---------------------------------------------------------------------------
// Table.

func TestTableCreateLookup(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	seen := map[uint32]bool{}
	for i := range 20 {
		m := paMkey(0x1000, 0x10)
		m.Variant = uint8(i * 37)
		k := e.create(m)
		require.GreaterOrEqual(t, k.Index(), uint32(klm.FirstIndex), "key %v: index below FirstIndex", k)
		require.False(t, seen[k.Index()], "key %v: index reused", k)
		seen[k.Index()] = true
		require.Equal(t, m.Variant, k.Variant(), "key %v: variant", k)
		got := e.tbl.Lookup(k.Index())
		require.NotNil(t, got, "Lookup(%#x)", k.Index())
		require.Equal(t, m.Variant, got.Variant, "Lookup(%#x) = %+v: variant", k.Index(), got)
		require.EqualValues(t, 0x1000, got.StartAddr, "Lookup(%#x) = %+v: start", k.Index(), got)
		require.Equal(t, klm.ModePA, got.Mode, "Lookup(%#x) = %+v: mode", k.Index(), got)
		require.EqualValues(t, testPD, got.PD, "Lookup(%#x) = %+v: PD", k.Index(), got)
	}
	r := e.tbl.Lookup(klm.ReservedLKey.Index())
	require.NotNil(t, r, "Lookup(2): want the reserved lkey")
	require.Equal(t, klm.ModePA, r.Mode, "Lookup(2) = %+v, want the reserved lkey: mode", r)
	require.True(t, r.AnyPD, "Lookup(2) = %+v, want the reserved lkey: AnyPD", r)
	require.True(t, r.Length64, "Lookup(2) = %+v, want the reserved lkey: Length64", r)
	require.Equal(t, klm.LocalRead|klm.LocalWrite, r.Access, "Lookup(2) = %+v, want the reserved lkey: access", r)
	require.False(t, r.Free, "Lookup(2) = %+v, want the reserved lkey: free", r)
	require.Zero(t, r.Variant, "Lookup(2) = %+v, want the reserved lkey: variant", r)
	require.Zero(t, r.StartAddr, "Lookup(2) = %+v, want the reserved lkey: start", r)
	for _, i := range []uint32{0, 1, 3, 4, 5, 6, 7, 1 << 20, 1<<24 - 1, ^uint32(0)} {
		assert.Nil(t, e.tbl.Lookup(i), "Lookup(%#x)", i)
	}
	require.Equal(t, klm.ConnectX5, e.tbl.Caps(), "Caps")
	require.Same(t, e.mem, e.tbl.Memory(), "Memory")
}

func TestTableCreateErrors(t *testing.T) {
	caps := klm.ConnectX5
	caps.LogMaxKLMListSize = 3 // 8 entries
	caps.MaxRepeatEntries = 4
	pas := func(n int) []klm.MTTFields {
		es := make([]klm.MTTFields, n)
		for i := range es {
			es[i] = rw(uint64(i) << 12)
		}
		return es
	}
	ksms := func(n int) []klm.KSMFields { return make([]klm.KSMFields, n) }
	klms := func(n int) []klm.KLMFields {
		es := make([]klm.KLMFields, n)
		for i := range es {
			es[i] = klm.KLMFields{ByteCount: 0x10, Key: klm.ReservedLKey, VA: uint64(i) << 4}
		}
		return es
	}
	re := func(bc uint16) klm.RepeatEntryFields {
		return klm.RepeatEntryFields{Stride: bc, ByteCount: bc, Key: klm.ReservedLKey}
	}
	withAccess := func(m klm.Mkey, a klm.Access) klm.Mkey { m.Access = a; return m }
	withOcto := func(m klm.Mkey, o uint32) klm.Mkey { m.XLTOctowords = o; return m }
	free := func(m klm.Mkey) klm.Mkey { m.Free = true; return m }
	mode := func(m klm.Mkey, md klm.AccessMode) klm.Mkey { m.Mode = md; return m }
	for _, c := range []struct {
		name string
		m    klm.Mkey
		want error
	}{
		{"RW without LW", withAccess(paMkey(0, 1), klm.LocalRead|klm.RemoteWrite), klm.ErrBadAccess},
		{"A without LW", withAccess(paMkey(0, 1), klm.LocalRead|klm.RemoteRead|klm.Atomic), klm.ErrBadAccess},
		{"unknown access bit", withAccess(paMkey(0, 1), klm.LocalRead|0x80), klm.ErrBadAccess},
		{"free with bad access", free(withAccess(paMkey(0, 1), klm.RemoteWrite)), klm.ErrBadAccess},
		{"RW with LW", withAccess(paMkey(0, 1), klm.LocalWrite|klm.RemoteWrite), nil},
		{"no access", withAccess(paMkey(0, 1), 0), nil},
		{"XLT over capacity", withOcto(klmMkey(0, 0x10, klms(2)...), 1), klm.ErrTooManyEntries},
		{"free XLT over capacity", free(withOcto(klmMkey(0, 0x10, klms(2)...), 1)), klm.ErrTooManyEntries},
		{"XLT at capacity", withOcto(klmMkey(0, 0x20, klms(2)...), 2), nil},
		{"MTT page too small", mttMkey(0, 0x1000, 11, rw(0)), klm.ErrBadPageSize},
		{"MTT page too large", mttMkey(0, 0x1000, 31, rw(0)), klm.ErrBadPageSize},
		{"MTT page 2^30", mttMkey(0, 0x1000, 30, rw(0)), nil},
		{"KSM page too small", ksmMkey(0, 0x1000, 11, ksms(1)...), klm.ErrBadPageSize},
		{"MTT 8 entries", mttMkey(0, 8<<12, 12, pas(8)...), nil},
		{"MTT 9 entries", mttMkey(0, 8<<12, 12, pas(9)...), klm.ErrTooManyEntries},
		{"KSM 9 entries", ksmMkey(0, 8<<12, 12, ksms(9)...), klm.ErrTooManyEntries},
		{"KLM 8 entries", klmMkey(0, 0x80, klms(8)...), nil},
		{"KLM 9 entries", klmMkey(0, 0x90, klms(9)...), klm.ErrTooManyEntries},
		{"KLM 9 entries, 8 cover Len", klmMkey(0, 0x80, klms(9)...), nil},
		{"KLM 9 entries, Length64", func() klm.Mkey { m := klmMkey(0, 0, klms(9)...); m.Length64 = true; return m }(), klm.ErrTooManyEntries},
		{"mode 4", mode(paMkey(0, 1), 4), klm.ErrBadAccessMode},
		{"free mode 4", free(mode(paMkey(0, 1), 4)), nil},
		{"free bad page size", free(mttMkey(0, 1, 3)), nil},
		{"repeat 0 entries", withXLT(klmMkey(0, 1), repeatXLT(klm.RepeatCtrlFields{BytesPerCycle: 0, Op: klm.RepeatBlockOp, RepeatCount: 1})), klm.ErrBadTranslation},
		{"repeat 4 entries", repeatMkey(0, 1, 1, re(1), re(1), re(1), re(1)), nil},
		{"repeat 5 entries", repeatMkey(0, 1, 1, re(1), re(1), re(1), re(1), re(1)), klm.ErrBadTranslation},
		{"repeat short", withXLT(klmMkey(0, 1), repeatBlock(1, re(8), re(8))[:klm.RepeatCtrlSize+klm.RepeatEntrySize]), klm.ErrBadTranslation},
		{"repeat bytes per cycle", withXLT(klmMkey(0, 1), repeatXLT(klm.RepeatCtrlFields{BytesPerCycle: 0x207, Op: klm.RepeatBlockOp, RepeatCount: 8, NumEntries: 2}, re(0x200), re(8))), klm.ErrBadTranslation},
		{"repeat empty cycle", repeatMkey(0, 1, 1, re(0), re(0)), klm.ErrBadTranslation},
		{"repeat zero count", repeatMkey(0, 1, 0, re(8)), nil},
	} {
		_, err := klm.NewTable(caps, klm.NewMemory()).Create(c.m)
		if c.want == nil {
			assert.NoError(t, err, "%s: Create", c.name)
		} else {
			assert.ErrorIs(t, err, c.want, "%s: Create", c.name)
		}
	}
}

func TestTableFull(t *testing.T) {
	caps := klm.ConnectX5
	caps.MaxMkeys = klm.FirstIndex + 4
	e := newTbench(t, caps)
	var keys []klm.Key
	for range 4 {
		keys = append(keys, e.create(paMkey(0, 1)))
	}
	_, err := e.tbl.Create(paMkey(0, 1))
	require.ErrorIs(t, err, klm.ErrTableFull, "Create on a full table")
	require.NoError(t, e.tbl.Destroy(keys[1].Index()))
	k := e.create(paMkey(0, 1))
	require.Equal(t, keys[1].Index(), k.Index(), "Create after Destroy: want the freed index")
	_, err = e.tbl.Create(paMkey(0, 1))
	require.ErrorIs(t, err, klm.ErrTableFull, "Create on a full table")
	// Allocation goes upwards from the last index given and wraps around.
	w := newTbench(t, caps)
	idx := func() uint32 { return w.create(paMkey(0, 1)).Index() }
	destroy := func(i uint32) {
		t.Helper()
		require.NoError(t, w.tbl.Destroy(i))
	}
	for _, want := range []uint32{8, 9, 10} {
		require.Equal(t, want, idx(), "index")
	}
	destroy(9)
	require.EqualValues(t, 11, idx(), "index after freeing 9 (upwards first)")
	require.EqualValues(t, 9, idx(), "index (wrapped)")
	destroy(8)
	require.EqualValues(t, 8, idx(), "index (searched past 10 and 11, wrapped)")
	// A table smaller than the reserved indices still holds one key.
	small := newTbench(t, klm.Caps{MaxMkeys: 1, MinLogPageSize: 12, MaxLogPageSize: 12, MaxIndirection: 1, LogMaxKLMListSize: 1})
	k = small.create(paMkey(0, 1))
	require.EqualValues(t, klm.FirstIndex, k.Index(), "small table key %v", k)
	_, err = small.tbl.Create(paMkey(0, 1))
	require.ErrorIs(t, err, klm.ErrTableFull, "second key in a small table")
}

func TestTableDestroy(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	e.mapNew(0x1000, 0x100)
	k := e.create(paMkey(0x1000, 0x100))
	for _, i := range []uint32{0, 1, 7, 1 << 20, ^uint32(0)} {
		assert.ErrorIs(t, e.tbl.Destroy(i), klm.ErrIndex, "Destroy(%#x)", i)
	}
	assert.ErrorIs(t, e.tbl.Destroy(k.Index()+1), klm.ErrNoMkey, "Destroy(unused)")
	e.resolve(klm.Request{Key: k, PD: testPD, Addr: 0x1000, Len: 0x10, Access: klm.LocalRead})
	require.NoError(t, e.tbl.Destroy(k.Index()))
	require.Nil(t, e.tbl.Lookup(k.Index()), "Lookup after Destroy")
	e.wantFault(klm.Request{Key: k, PD: testPD, Addr: 0x1000, Len: 0x10, Access: klm.LocalRead}, klm.FaultBadIndex, k, 0)
	assert.ErrorIs(t, e.tbl.Destroy(k.Index()), klm.ErrNoMkey, "second Destroy")
}

func TestTableUpdate(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	e.mapNew(0x1000, 0x1000)
	k := e.create(klmMkey(0, 0x100, klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x1000}))
	req := klm.Request{Key: k, PD: testPD, Len: 0x100, Access: klm.LocalRead}
	wantRuns(t, e.resolve(req), []run{{0x1000, 0x100}})
	old := e.tbl.Lookup(k.Index())
	oldCopy := *old

	// A successful update publishes a new context; the old one is untouched.
	err := e.tbl.Update(k.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
		assert.EqualValues(t, old, cur, "build got a context other than the current one")
		n := cur.Clone()
		n.XLT = klmXLT(klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x1800})
		return n, nil
	})
	require.NoError(t, err)
	wantRuns(t, e.resolve(req), []run{{0x1800, 0x100}})
	require.NotSame(t, old, e.tbl.Lookup(k.Index()), "Update changed the context in place")
	require.Equal(t, oldCopy.StartAddr, old.StartAddr, "Update changed the old context: start")
	require.Equal(t, oldCopy.Len, old.Len, "Update changed the old context: length")
	require.Equal(t, oldCopy.Variant, old.Variant, "Update changed the old context: variant")
	require.Equal(t, oldCopy.XLT, old.XLT, "Update changed the old context: translation")

	// A build error is returned as is; the table is unchanged.
	published := e.tbl.Lookup(k.Index())
	errBuild := errors.New("no")
	require.ErrorIs(t, e.tbl.Update(k.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) { return nil, errBuild }), errBuild, "Update with a failing build")
	// An invalid next context is refused; the table is unchanged.
	for name, c := range map[string]struct {
		edit func(*klm.Mkey)
		want error
	}{
		"access":      {func(m *klm.Mkey) { m.Access = klm.RemoteWrite }, klm.ErrBadAccess},
		"mode":        {func(m *klm.Mkey) { m.Mode = 5 }, klm.ErrBadAccessMode},
		"XLT":         {func(m *klm.Mkey) { m.XLT = make([]byte, 17*16) }, klm.ErrTooManyEntries},
		"repeat":      {func(m *klm.Mkey) { m.XLT = repeatXLT(klm.RepeatCtrlFields{Op: klm.RepeatBlockOp, NumEntries: 1}) }, klm.ErrBadTranslation},
		"mode to mtt": {func(m *klm.Mkey) { m.Mode = klm.ModeMTT; m.LogPageSize = 40 }, klm.ErrBadAccessMode},
	} {
		err := e.tbl.Update(k.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
			n := cur.Clone()
			c.edit(n)
			return n, nil
		})
		assert.ErrorIs(t, err, c.want, "Update (%s)", name)
		require.Same(t, published, e.tbl.Lookup(k.Index()), "a failed Update (%s) changed the table", name)
		wantRuns(t, e.resolve(req), []run{{0x1800, 0x100}})
	}
	for _, i := range []uint32{0, 1, 7, 1 << 20} {
		assert.ErrorIs(t, e.tbl.Update(i, func(cur *klm.Mkey) (*klm.Mkey, error) { return cur.Clone(), nil }), klm.ErrIndex, "Update(%#x)", i)
	}
	called := false
	err = e.tbl.Update(k.Index()+1, func(cur *klm.Mkey) (*klm.Mkey, error) { called = true; return cur, nil })
	assert.ErrorIs(t, err, klm.ErrNoMkey, "Update(unused)")
	assert.False(t, called, "Update(unused) called build")

	// Bump the variant: the old key stops working, the new one works.
	err = e.tbl.Update(k.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
		n := cur.Clone()
		n.Variant++
		return n, nil
	})
	require.NoError(t, err, "Update bumping the variant")
	e.wantFault(req, klm.FaultVariant, k, 0)
	req2 := req
	req2.Key = klm.MakeKey(k.Index(), k.Variant()+1)
	wantRuns(t, e.resolve(req2), []run{{0x1800, 0x100}})

	// Invalidate, then register again.
	setFree := func(free bool) {
		t.Helper()
		err := e.tbl.Update(k.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
			n := cur.Clone()
			n.Free = free
			return n, nil
		})
		require.NoError(t, err, "Update setting Free %v", free)
	}
	setFree(true)
	e.wantFault(req2, klm.FaultFree, req2.Key, 0)
	setFree(false)
	wantRuns(t, e.resolve(req2), []run{{0x1800, 0x100}})
}

// ---------------------------------------------------------------------------
// Resolution, mode by mode.

func TestResolvePA(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	a := e.mapNew(0x10000, 0x1000)
	e.mapNew(0x11000, 0x1000) // adjacent
	e.mapNew(0x20000, 0x100)
	k := e.create(paMkey(0x10800, 0x1000))
	r := klm.Request{Key: k, PD: testPD, Addr: 0x10800, Len: 0x1000, Access: klm.LocalWrite}
	wantRuns(t, e.resolve(r), []run{{0x10800, 0x800}, {0x11000, 0x800}})
	// Segments are the mapped buffers themselves.
	segs, err := e.tbl.Resolve(nil, r)
	require.NoError(t, err)
	copy(segs[0], "written")
	require.Equal(t, "written", string(a[0x800:0x807]), "a write through a resolved segment is not in the buffer")
	// The reserved lkey is PA over all of memory, in any PD, local only.
	for _, pd := range []uint32{0, testPD, 0xFFFFFF} {
		wantRuns(t, e.resolve(klm.Request{Key: klm.ReservedLKey, PD: pd, Addr: 0x20010, Len: 0x20, Access: klm.LocalRead | klm.LocalWrite}), []run{{0x20010, 0x20}})
	}
	wantRuns(t, e.resolve(klm.Request{Key: klm.ReservedLKey, Addr: 0x10ff0, Len: 0x20, Access: klm.LocalRead}), []run{{0x10ff0, 0x10}, {0x11000, 0x10}})
	for _, need := range []klm.Access{klm.RemoteRead, klm.RemoteWrite, klm.Atomic} {
		e.wantFault(klm.Request{Key: klm.ReservedLKey, Addr: 0x20000, Len: 1, Access: need}, klm.FaultAccess, klm.ReservedLKey, 0)
	}
	e.wantFault(klm.Request{Key: klm.ReservedLKey, Addr: 0x200F0, Len: 0x20, Access: klm.LocalRead}, klm.FaultUnmapped, klm.ReservedLKey, 0)
	e.wantFault(klm.Request{Key: klm.MakeKey(2, 1), Addr: 0x20000, Len: 1, Access: klm.LocalRead}, klm.FaultVariant, klm.MakeKey(2, 1), 0)
}

func TestResolveMTT(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	e.mapNew(0x10000, 0x2000) // pages 0x10000 and 0x11000, one buffer
	e.mapNew(0x30000, 0x1000)
	e.mapNew(0x50000, 0x1000)
	e.mapNew(0x60000, 0x1000) // separate buffers, contiguous IOVAs
	e.mapNew(0x61000, 0x1000)
	const base = 0x7000_0000_0000
	const start = base + 0x800 // not page aligned: page 0 starts at base
	k := e.create(mttMkey(start, 6<<12-0x800, 12,
		rw(0x30000), rw(0x10000), rw(0x11000),
		klm.MTTFields{Addr: 0x50000, Read: true},
		rw(0x60000), rw(0x61000)))
	req := func(off, n uint64, need klm.Access) klm.Request {
		return klm.Request{Key: k, PD: testPD, Addr: start + off, Len: n, Access: need}
	}
	wantRuns(t, e.resolve(req(0, 0x800, klm.LocalRead)), []run{{0x30800, 0x800}})
	wantRuns(t, e.resolve(req(0x400, 0x1000, klm.LocalRead)), []run{{0x30c00, 0x400}, {0x10000, 0xc00}})
	// Pages 1 and 2 are contiguous in one buffer: one segment.
	wantRuns(t, e.resolve(req(0x900, 0x1e00, klm.LocalWrite)), []run{{0x10100, 0x1e00}})
	wantRuns(t, e.resolve(req(0x800, 0x2000, klm.LocalRead)), []run{{0x10000, 0x2000}})
	// Contiguous pages in two buffers: two segments (one per buffer).
	wantRuns(t, e.resolve(req(0x3800, 0x1800, klm.LocalRead)), []run{{0x60000, 0x1000}, {0x61000, 0x800}})
	// Page 3 is read only.
	wantRuns(t, e.resolve(req(0x2800, 0x1000, klm.LocalRead|klm.RemoteRead)), []run{{0x50000, 0x1000}})
	f := e.wantFault(req(0x2000, 0x1000, klm.LocalWrite), klm.FaultAccess, k, 0)
	assert.Equal(t, klm.LocalWrite, f.Need, "fault need")
	e.wantFault(req(0x2800, 0x1000, klm.RemoteWrite), klm.FaultAccess, k, 0)
	e.wantFault(req(0x2800, 1, klm.Atomic), klm.FaultAccess, k, 0)
	e.wantFault(req(0x2800, 0x1000, klm.LocalRead|klm.LocalWrite), klm.FaultAccess, k, 0)
	// Past the key's length.
	e.wantFault(req(6<<12-0x800-1, 2, klm.LocalRead), klm.FaultRange, k, 0)
	e.wantFault(klm.Request{Key: k, PD: testPD, Addr: start - 1, Len: 2, Access: klm.LocalRead}, klm.FaultRange, k, 0)

	// Write-only page, unmapped page, entry address with low bits set.
	k2 := e.create(mttMkey(base, 3<<12, 12,
		klm.MTTFields{Addr: 0x30000, Write: true},
		rw(0x40000),
		rw(0x50000|0x7f0)))
	r2 := func(off, n uint64, need klm.Access) klm.Request {
		return klm.Request{Key: k2, PD: testPD, Addr: base + off, Len: n, Access: need}
	}
	wantRuns(t, e.resolve(r2(0x10, 0x10, klm.LocalWrite)), []run{{0x30010, 0x10}})
	e.wantFault(r2(0x10, 0x10, klm.LocalRead), klm.FaultAccess, k2, 0)
	e.wantFault(r2(0x10, 0x10, klm.RemoteRead), klm.FaultAccess, k2, 0)
	e.wantFault(r2(0x1000, 0x10, klm.LocalRead), klm.FaultUnmapped, k2, 0)
	// With no access asked for, the enable bits are not checked.
	wantRuns(t, e.resolve(r2(0x10, 0x10, 0)), []run{{0x30010, 0x10}})
	wantRuns(t, e.resolve(r2(0x2010, 0x10, klm.LocalRead)), []run{{0x50010, 0x10}})

	// Length64: the key covers every address, the translation does not.
	m := mttMkey(base, 0, 12, rw(0x30000), rw(0x50000))
	m.Length64 = true
	k3 := e.create(m)
	wantRuns(t, e.resolve(klm.Request{Key: k3, PD: testPD, Addr: base + 0x1ff0, Len: 0x10, Access: klm.LocalRead}), []run{{0x51ff0 - 0x1000, 0x10}})
	e.wantFault(klm.Request{Key: k3, PD: testPD, Addr: base + 0x1ff0, Len: 0x11, Access: klm.LocalRead}, klm.FaultRange, k3, 0)
	e.wantFault(klm.Request{Key: k3, PD: testPD, Addr: base + 0x100000, Len: 1, Access: klm.LocalRead}, klm.FaultRange, k3, 0)

	// A larger page size.
	big := newTbench(t, klm.ConnectX5)
	big.mapNew(1<<21, 1<<21)
	k4 := big.create(mttMkey(0x4000_0000_0000+0x1234, 1<<21, 21, rw(1<<21), rw(1<<21)))
	wantRuns(t, big.resolve(klm.Request{Key: k4, PD: testPD, Addr: 0x4000_0000_0000 + 1<<21 - 0x10, Len: 0x20, Access: klm.LocalRead}), []run{{1<<22 - 0x10, 0x10}, {1 << 21, 0x10}})
}

func TestResolveKLM(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	e.mapNew(0x10000, 0x1000)
	e.mapNew(0x20000, 0x1000)
	e.mapNew(0x30000, 0x1000)
	pa := e.create(paMkey(0x20000, 0x1000))
	mtt := e.create(mttMkey(0x9000_0000, 0x2000, 12, rw(0x30000), rw(0x10000)))
	const start = 0x5000
	k := e.create(klmMkey(start, 0x380,
		klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x10f00},
		klm.KLMFields{ByteCount: 0x80, Key: pa, VA: 0x20040},
		klm.KLMFields{ByteCount: 0x200, Key: mtt, VA: 0x9000_0f00}))
	req := func(off, n uint64) klm.Request {
		return klm.Request{Key: k, PD: testPD, Addr: start + off, Len: n, Access: klm.LocalRead}
	}
	wantRuns(t, e.resolve(req(0, 0x380)), []run{{0x10f00, 0x100}, {0x20040, 0x80}, {0x30f00, 0x100}, {0x10000, 0x100}})
	wantRuns(t, e.resolve(req(0xf0, 0x20)), []run{{0x10ff0, 0x10}, {0x20040, 0x10}})
	wantRuns(t, e.resolve(req(0x100, 0x80)), []run{{0x20040, 0x80}})
	wantRuns(t, e.resolve(req(0x17f, 0x2)), []run{{0x200bf, 1}, {0x30f00, 1}})
	wantRuns(t, e.resolve(req(0x37f, 1)), []run{{0x100ff, 1}})
	e.wantFault(req(0x37f, 2), klm.FaultRange, k, 0)
	e.wantFault(klm.Request{Key: k, PD: testPD, Addr: start - 1, Len: 1, Access: klm.LocalRead}, klm.FaultRange, k, 0)

	// Entries are taken until they cover Len: later ones are not parsed.
	bogus := klm.KLMFields{ByteCount: 0x100, Key: klm.MakeKey(0x777, 0), VA: 0}
	k2 := e.create(klmMkey(0, 0x100, klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x10000}, bogus))
	wantRuns(t, e.resolve(klm.Request{Key: k2, PD: testPD, Len: 0x100, Access: klm.LocalRead}), []run{{0x10000, 0x100}})
	// With Length64, they are, until a zero byte count.
	m := klmMkey(0, 0, klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x10000}, bogus)
	m.Length64 = true
	k3 := e.create(m)
	e.wantFault(klm.Request{Key: k3, PD: testPD, Addr: 0xf0, Len: 0x20, Access: klm.LocalRead}, klm.FaultBadIndex, bogus.Key, 1)
	m = klmMkey(0, 0, klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x10000}, klm.KLMFields{}, bogus)
	m.Length64 = true
	k4 := e.create(m)
	wantRuns(t, e.resolve(klm.Request{Key: k4, PD: testPD, Addr: 0xf0, Len: 0x10, Access: klm.LocalRead}), []run{{0x100f0, 0x10}})
	e.wantFault(klm.Request{Key: k4, PD: testPD, Addr: 0xf0, Len: 0x11, Access: klm.LocalRead}, klm.FaultRange, k4, 0)
	// A zero byte count ends the list even before Len is covered.
	k5 := e.create(klmMkey(0, 0x300,
		klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x10000},
		klm.KLMFields{ByteCount: 0, Key: klm.ReservedLKey, VA: 0x20000},
		klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x30000}))
	wantRuns(t, e.resolve(klm.Request{Key: k5, PD: testPD, Len: 0x100, Access: klm.LocalRead}), []run{{0x10000, 0x100}})
	e.wantFault(klm.Request{Key: k5, PD: testPD, Addr: 0x100, Len: 1, Access: klm.LocalRead}, klm.FaultRange, k5, 0)
	// A translation padded with garbage after the entries that cover Len.
	xlt := append(klmXLT(klm.KLMFields{ByteCount: 0x40, Key: klm.ReservedLKey, VA: 0x10000}), bytes.Repeat([]byte{0xA5}, 48)...)
	k6 := e.create(withXLT(klmMkey(0, 0x40), xlt))
	wantRuns(t, e.resolve(klm.Request{Key: k6, PD: testPD, Len: 0x40, Access: klm.LocalRead}), []run{{0x10000, 0x40}})

	// Inner keys get the local form of the access, in the same PD.
	local := paMkey(0x10000, 0x1000)
	local.Access = klm.LocalRead
	lr := e.create(local)
	outer := e.create(klmMkey(0, 0x100, klm.KLMFields{ByteCount: 0x100, Key: lr, VA: 0x10000}))
	or := func(need klm.Access) klm.Request {
		return klm.Request{Key: outer, PD: testPD, Len: 0x100, Access: need}
	}
	wantRuns(t, e.resolve(or(klm.RemoteRead)), []run{{0x10000, 0x100}})
	wantRuns(t, e.resolve(or(klm.LocalRead)), []run{{0x10000, 0x100}})
	for _, need := range []klm.Access{klm.RemoteWrite, klm.Atomic, klm.LocalWrite, klm.RemoteRead | klm.RemoteWrite} {
		f := e.wantFault(or(need), klm.FaultAccess, lr, 1)
		assert.Equal(t, need.Local(), f.Need, "inner fault for %v needs", need)
		assert.EqualValues(t, 0x10000, f.Addr, "inner fault address, want the inner key's range")
		assert.EqualValues(t, 0x100, f.Len, "inner fault length, want the inner key's range")
	}
	other := paMkey(0x10000, 0x1000)
	other.PD = testPD + 1
	op := e.create(other)
	outer2 := e.create(klmMkey(0, 0x100, klm.KLMFields{ByteCount: 0x100, Key: op, VA: 0x10000}))
	e.wantFault(klm.Request{Key: outer2, PD: testPD, Len: 0x10, Access: klm.LocalRead}, klm.FaultPD, op, 1)
	e.wantFault(klm.Request{Key: outer2, PD: testPD + 1, Len: 0x10, Access: klm.LocalRead}, klm.FaultPD, outer2, 0)
	// An inner key with AnyPD is fine in any PD.
	other.AnyPD = true
	anyk := e.create(other)
	outer3 := e.create(klmMkey(0, 0x100, klm.KLMFields{ByteCount: 0x100, Key: anyk, VA: 0x10000}))
	wantRuns(t, e.resolve(klm.Request{Key: outer3, PD: testPD, Len: 0x10, Access: klm.LocalRead}), []run{{0x10000, 0x10}})
}

func TestResolveKSM(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	e.mapNew(0x100000, 0x4000)
	pa := e.create(paMkey(0x100000, 0x4000))
	mtt := e.create(mttMkey(0x8000_0000, 0x2000, 12, rw(0x103000), rw(0x100000)))
	const start = 0x3000_0000_0100 // entities count from StartAddr
	k := e.create(ksmMkey(start, 3<<12, 12,
		klm.KSMFields{Key: klm.ReservedLKey, VA: 0x101000},
		klm.KSMFields{Key: pa, VA: 0x100000},
		klm.KSMFields{Key: mtt, VA: 0x8000_0800}))
	req := func(off, n uint64) klm.Request {
		return klm.Request{Key: k, PD: testPD, Addr: start + off, Len: n, Access: klm.LocalRead}
	}
	wantRuns(t, e.resolve(req(0, 0x10)), []run{{0x101000, 0x10}})
	wantRuns(t, e.resolve(req(0xff0, 0x20)), []run{{0x101ff0, 0x10}, {0x100000, 0x10}})
	wantRuns(t, e.resolve(req(0x1ff0, 0x1010)), []run{{0x100ff0, 0x10}, {0x103800, 0x800}, {0x100000, 0x800}})
	e.wantFault(req(0x2ff0, 0x20), klm.FaultRange, k, 0)
	// Length64: past the last entity is out of the translation.
	m := ksmMkey(0, 0, 12, klm.KSMFields{Key: klm.ReservedLKey, VA: 0x101000})
	m.Length64 = true
	k2 := e.create(m)
	wantRuns(t, e.resolve(klm.Request{Key: k2, PD: testPD, Addr: 0xff0, Len: 0x10, Access: klm.LocalRead}), []run{{0x101ff0, 0x10}})
	e.wantFault(klm.Request{Key: k2, PD: testPD, Addr: 0xff0, Len: 0x11, Access: klm.LocalRead}, klm.FaultRange, k2, 0)
	// An entity beyond its inner key's range faults in the inner key.
	k3 := e.create(ksmMkey(0, 1<<12, 12, klm.KSMFields{Key: pa, VA: 0x103800}))
	wantRuns(t, e.resolve(klm.Request{Key: k3, PD: testPD, Len: 0x800, Access: klm.LocalRead}), []run{{0x103800, 0x800}})
	e.wantFault(klm.Request{Key: k3, PD: testPD, Len: 0x801, Access: klm.LocalRead}, klm.FaultRange, pa, 1)
}

func TestResolveRepeat(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	e.mapNew(0x10000, 0x10000)
	pa := e.create(paMkey(0x10000, 0x10000))
	// Three entries: a gap after each a-block (stride > bcount), a constant
	// b (stride 0) and an overlapping c (stride < bcount).
	k := e.create(repeatMkey(0, 5*(16+4+8), 5,
		klm.RepeatEntryFields{Stride: 32, ByteCount: 16, Key: klm.ReservedLKey, VA: 0x10000},
		klm.RepeatEntryFields{Stride: 0, ByteCount: 4, Key: pa, VA: 0x18000},
		klm.RepeatEntryFields{Stride: 4, ByteCount: 8, Key: klm.ReservedLKey, VA: 0x1c000}))
	var want []run
	for c := range uint64(5) {
		want = append(want, run{0x10000 + 32*c, 16}, run{0x18000, 4}, run{0x1c000 + 4*c, 8})
	}
	wantRuns(t, e.resolve(klm.Request{Key: k, PD: testPD, Len: 5 * 28, Access: klm.LocalRead}), want)
	// A part of the stream: the end of cycle 1's a-block to cycle 2's b.
	wantRuns(t, e.resolve(klm.Request{Key: k, PD: testPD, Addr: 28 + 10, Len: 6 + 4 + 8 + 16 + 2, Access: klm.LocalRead}),
		[]run{{0x10020 + 10, 6}, {0x18000, 4}, {0x1c004, 8}, {0x10040, 16}, {0x18000, 2}})
	wantRuns(t, e.resolve(klm.Request{Key: k, PD: testPD, Addr: 4*28 + 27, Len: 1, Access: klm.LocalRead}), []run{{0x1c010 + 7, 1}})
	e.wantFault(klm.Request{Key: k, PD: testPD, Addr: 4*28 + 27, Len: 2, Access: klm.LocalRead}, klm.FaultRange, k, 0)
	// Len may be shorter than the cycles; Length64 uses them all.
	m := repeatMkey(0x100, 0, 2, klm.RepeatEntryFields{Stride: 16, ByteCount: 16, Key: klm.ReservedLKey, VA: 0x10000})
	m.Length64 = true
	k2 := e.create(m)
	wantRuns(t, e.resolve(klm.Request{Key: k2, PD: testPD, Addr: 0x100, Len: 32, Access: klm.LocalRead}), []run{{0x10000, 16}, {0x10010, 16}})
	e.wantFault(klm.Request{Key: k2, PD: testPD, Addr: 0x100, Len: 33, Access: klm.LocalRead}, klm.FaultRange, k2, 0)
	// Zero cycles map nothing.
	k3 := e.create(repeatMkey(0, 16, 0, klm.RepeatEntryFields{Stride: 16, ByteCount: 16, Key: klm.ReservedLKey, VA: 0x10000}))
	e.wantFault(klm.Request{Key: k3, PD: testPD, Len: 1, Access: klm.LocalRead}, klm.FaultRange, k3, 0)
	// Zero-length entries are skipped.
	k4 := e.create(repeatMkey(0, 2*8, 2,
		klm.RepeatEntryFields{Stride: 0, ByteCount: 0, Key: klm.MakeKey(0x777, 0)},
		klm.RepeatEntryFields{Stride: 0x100, ByteCount: 4, Key: klm.ReservedLKey, VA: 0x10000},
		klm.RepeatEntryFields{Stride: 0, ByteCount: 0, Key: klm.MakeKey(0x777, 0)},
		klm.RepeatEntryFields{Stride: 0x100, ByteCount: 4, Key: klm.ReservedLKey, VA: 0x10080},
		klm.RepeatEntryFields{Stride: 0, ByteCount: 0, Key: klm.MakeKey(0x777, 0)}))
	wantRuns(t, e.resolve(klm.Request{Key: k4, PD: testPD, Len: 16, Access: klm.LocalRead}), []run{{0x10000, 4}, {0x10080, 4}, {0x10100, 4}, {0x10180, 4}})
	// An entry faulting in its inner key.
	k5 := e.create(repeatMkey(0, 3*8, 3,
		klm.RepeatEntryFields{Stride: 0x8000, ByteCount: 8, Key: pa, VA: 0x10000}))
	wantRuns(t, e.resolve(klm.Request{Key: k5, PD: testPD, Len: 16, Access: klm.LocalRead}), []run{{0x10000, 8}, {0x18000, 8}})
	e.wantFault(klm.Request{Key: k5, PD: testPD, Len: 17, Access: klm.LocalRead}, klm.FaultRange, pa, 1)
}

// ---------------------------------------------------------------------------
// The signature translation of mlx5-integrity.md §2.4 and the three PI-MR
// mapping modes of §2.1.

// sigMkey is a signature key as WQE 2 of REG_MR_INTEGRITY leaves it
// (§2.3): zero based, KLM mode, a 4-octoword translation, a BSF.
func sigMkey(length uint64, xlt []byte) klm.Mkey {
	x := make([]byte, 64)
	copy(x, xlt)
	return klm.Mkey{
		PD: testPD, Access: klm.LocalRead | klm.LocalWrite | klm.RemoteRead | klm.RemoteWrite,
		UMREnabled: true, Mode: klm.ModeKLM, StartAddr: 0, Len: length, QPN: 0xFFFFFF,
		RemoteInvalidate: true, BSFEnabled: true, BSF: make([]byte, 64), ExpectedSigErr: 1,
		XLTOctowords: 4, XLT: x,
	}
}

// sigXLT is the strided translation of §2.4 for 512-byte intervals.
func sigXLT(blocks uint32, dataKey klm.Key, dataVA uint64, protKey klm.Key, protVA uint64) []byte {
	return repeatXLT(klm.RepeatCtrlFields{BytesPerCycle: 512 + 8, Op: klm.RepeatBlockOp, RepeatCount: blocks, NumEntries: 2},
		klm.RepeatEntryFields{Stride: 512, ByteCount: 512, Key: dataKey, VA: dataVA},
		klm.RepeatEntryFields{Stride: 8, ByteCount: 8, Key: protKey, VA: protVA})
}

// interleaved returns the runs of a 520-byte interleaved stream of blocks
// whose data byte i is at data(i) and PI byte i at pi(i), coalesced.
func interleaved(blocks int, data, pi func(i uint64) uint64) []run {
	var rs []run
	add := func(a uint64) {
		if n := len(rs); n > 0 && rs[n-1].IOVA+rs[n-1].Len == a {
			rs[n-1].Len++
			return
		}
		rs = append(rs, run{a, 1})
	}
	for b := range uint64(blocks) {
		for i := range uint64(512) {
			add(data(b*512 + i))
		}
		for i := range uint64(8) {
			add(pi(b*8 + i))
		}
	}
	return rs
}

func TestWorkedExampleStrided(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	data := e.mapNew(0x10000, 8*512)
	meta := e.mapNew(0x20000, 64)
	// The PI MR: zero based, KLM, data then metadata through the reserved
	// lkey; its key must be 0x00001234.
	e.burnIndices(0x12)
	pimr := klm.Mkey{
		Variant: 0x34, PD: testPD, Access: klm.LocalRead | klm.LocalWrite | klm.RemoteRead | klm.RemoteWrite,
		UMREnabled: true, Mode: klm.ModeKLM, StartAddr: 0, Len: 4096 + 64, QPN: 0xFFFFFF, RemoteInvalidate: true,
		XLTOctowords: 8,
		XLT: klmXLT(
			klm.KLMFields{ByteCount: 4096, Key: klm.ReservedLKey, VA: 0x10000},
			klm.KLMFields{ByteCount: 64, Key: klm.ReservedLKey, VA: 0x20000}),
	}
	piKey := e.create(pimr)
	require.Equal(t, klm.Key(0x00001234), piKey, "PI MR key")
	xlt := sigXLT(8, piKey, 0, piKey, 4096)
	golden := unhex(t, `
		00 00 02 08  00 00 04 00  00 00 00 08  00 00 00 02
		02 00 02 00  00 00 12 34  00 00 00 00 00 00 00 00
		00 08 00 08  00 00 12 34  00 00 00 00 00 00 10 00`)
	require.Equal(t, golden, xlt, "signature translation")
	sig := sigMkey(4096+64, xlt)
	require.True(t, bytes.Equal(sig.XLT[48:], make([]byte, 16)), "pad is not zero")
	sigKey := e.create(sig)

	segs, err := e.tbl.Resolve(make([][]byte, 0, 16), klm.Request{Key: sigKey, PD: testPD, Len: 4160, Access: klm.LocalRead})
	require.NoError(t, err)
	require.Len(t, segs, 16, "segments (data block, PI, ...)")
	for i := range 8 {
		d, p := segs[2*i], segs[2*i+1]
		require.Same(t, &data[512*i], unsafe.SliceData(d), "segment %d is not data block %d", 2*i, i)
		require.Equal(t, 512, len(d), "segment %d is not data block %d", 2*i, i)
		require.Same(t, &meta[8*i], unsafe.SliceData(p), "segment %d is not PI %d", 2*i+1, i)
		require.Equal(t, 8, len(p), "segment %d is not PI %d", 2*i+1, i)
	}
	// The stream, gathered, is the 520-byte interleaved format.
	var stream []byte
	for _, s := range segs {
		stream = append(stream, s...)
	}
	for i := range 8 {
		require.True(t, bytes.Equal(stream[520*i:520*i+512], data[512*i:512*(i+1)]), "block %d of the gathered stream: data", i)
		require.Equal(t, meta[8*i:8*(i+1)], stream[520*i+512:520*(i+1)], "block %d of the gathered stream: PI", i)
	}
	// Scatter: writes through the segments land in the two buffers.
	segs, err = e.tbl.Resolve(segs[:0], klm.Request{Key: sigKey, PD: testPD, Addr: 520 + 510, Len: 12, Access: klm.RemoteWrite})
	require.NoError(t, err)
	wantRuns(t, e.runs(segs), []run{{0x10000 + 512 + 510, 2}, {0x20008, 8}, {0x10000 + 1024, 2}})
	n := 0
	for _, s := range segs {
		for j := range s {
			s[j] = byte(0xC0 + n)
			n++
		}
	}
	require.Equal(t, []byte{0xC0, 0xC1}, data[1022:1024], "scattered bytes are not in the data buffer (end of block 1)")
	require.Equal(t, byte(0xC2), meta[8], "scattered bytes are not in the metadata buffer (first PI byte of block 1)")
	require.Equal(t, byte(0xC9), meta[15], "scattered bytes are not in the metadata buffer (last PI byte of block 1)")
	require.Equal(t, []byte{0xCA, 0xCB}, data[1024:1026], "scattered bytes are not in the data buffer (start of block 2)")
	// The stream ends after 8 cycles (and the key's length).
	e.wantFault(klm.Request{Key: sigKey, PD: testPD, Addr: 4159, Len: 2, Access: klm.LocalRead}, klm.FaultRange, sigKey, 0)
}

// TestResolveEntries: the worked example's signature key taken by entries
// gives the data and PI buffers whole for an access of whole cycles, and
// Resolve's segments for any other access; its faults are Resolve's.
func TestResolveEntries(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	data := e.mapNew(0x10000, 8*512)
	meta := e.mapNew(0x20000, 64)
	pimr := klm.Mkey{
		Variant: 0x34, PD: testPD, Access: klm.LocalRead | klm.LocalWrite | klm.RemoteRead | klm.RemoteWrite,
		UMREnabled: true, Mode: klm.ModeKLM, StartAddr: 0, Len: 4096 + 64, QPN: 0xFFFFFF,
		XLTOctowords: 8,
		XLT: klmXLT(
			klm.KLMFields{ByteCount: 4096, Key: klm.ReservedLKey, VA: 0x10000},
			klm.KLMFields{ByteCount: 64, Key: klm.ReservedLKey, VA: 0x20000}),
	}
	piKey := e.create(pimr)
	sigKey := e.create(sigMkey(4096+64, sigXLT(8, piKey, 0, piKey, 4096)))
	var ent klm.Entries

	// Cycles 2..6 whole: the data of blocks 2..6, then their PI.
	segs, err := e.tbl.ResolveEntries(nil, klm.Request{Key: sigKey, PD: testPD, Addr: 2 * 520, Len: 5 * 520, Access: klm.LocalRead}, &ent)
	require.NoError(t, err)
	require.Equal(t, klm.Entries{N: 2, Cycles: 5, Len: [4]uint64{512, 8}}, ent)
	require.Len(t, segs, 2)
	require.Same(t, &data[2*512], unsafe.SliceData(segs[0]), "the data piece")
	require.Len(t, segs[0], 5*512)
	require.Same(t, &meta[2*8], unsafe.SliceData(segs[1]), "the PI piece")
	require.Len(t, segs[1], 5*8)

	// Not whole cycles, or too few of them: Resolve's segments.
	for _, r := range []klm.Request{
		{Key: sigKey, PD: testPD, Addr: 2*520 + 1, Len: 5 * 520, Access: klm.LocalRead},
		{Key: sigKey, PD: testPD, Addr: 0, Len: 5*520 - 8, Access: klm.LocalRead},
		{Key: sigKey, PD: testPD, Addr: 520, Len: 2 * 520, Access: klm.LocalRead},
		{Key: piKey, PD: testPD, Addr: 0, Len: 4096, Access: klm.LocalRead},
		{Key: sigKey, PD: testPD, Addr: 0, Len: 0, Access: klm.LocalRead},
	} {
		want, err := e.tbl.Resolve(nil, r)
		require.NoError(t, err, "%+v", r)
		ent = klm.Entries{N: 9}
		got, err := e.tbl.ResolveEntries(nil, r, &ent)
		require.NoError(t, err, "%+v", r)
		require.Zero(t, ent.N, "%+v", r)
		require.Equal(t, e.runs(want), e.runs(got), "%+v", r)
	}

	// Faults: the same as Resolve's, with nothing appended.
	for _, r := range []klm.Request{
		{Key: sigKey, PD: testPD + 1, Addr: 0, Len: 3 * 520, Access: klm.LocalRead},
		{Key: sigKey, PD: testPD, Addr: 4 * 520, Len: 5 * 520, Access: klm.LocalRead},
		{Key: sigKey + 1, PD: testPD, Addr: 0, Len: 3 * 520, Access: klm.LocalRead},
	} {
		_, want := e.tbl.Resolve(nil, r)
		require.Error(t, want, "%+v", r)
		got, err := e.tbl.ResolveEntries(make([][]byte, 1, 4), r, &ent)
		require.Equal(t, want, err, "%+v", r)
		require.Len(t, got, 1, "%+v: segments appended on a fault", r)
	}
}

func TestPIMRModes(t *testing.T) {
	const blocks = 8
	const dataLen, metaLen = blocks * 512, blocks * 8
	cases := []struct {
		name string
		// setup maps the buffers, creates the PI MR if any and returns the
		// signature translation's keys and addresses, and where data and
		// PI byte i are.
		setup func(e *tbench) (dk klm.Key, dva uint64, pk klm.Key, pva uint64, data, pi func(uint64) uint64)
		segs  int // segments of the whole stream, 0: not checked
	}{
		{"PA", func(e *tbench) (klm.Key, uint64, klm.Key, uint64, func(uint64) uint64, func(uint64) uint64) {
			// One data and one metadata SG entry: local_dma_lkey, DMA addresses.
			e.mapNew(0x10000, 0x3000)
			e.mapNew(0x20000, 0x1000)
			const d, m = 0x10100, 0x20040
			return klm.ReservedLKey, d, klm.ReservedLKey, m,
				func(i uint64) uint64 { return d + i }, func(i uint64) uint64 { return m + i }
		}, 2 * blocks},
		{"MTT", func(e *tbench) (klm.Key, uint64, klm.Key, uint64, func(uint64) uint64, func(uint64) uint64) {
			// Data spans two pages from an unaligned start; metadata is in
			// a third page. pi_iova follows the data pages (§2.1).
			const P = 0x1000
			e.mapNew(0x4000_0000, 2*P)
			e.mapNew(0x5000_0000, P)
			const d, m = 0x4000_0200, 0x5000_0040
			piIOVA := uint64(d&^(P-1)) + 2*P + m&(P-1)
			k := e.create(klm.Mkey{
				PD: testPD, Access: klm.LocalRead | klm.LocalWrite | klm.RemoteRead | klm.RemoteWrite, UMREnabled: true,
				Mode: klm.ModeMTT, StartAddr: d, Len: piIOVA + metaLen - d, LogPageSize: 12, QPN: 0xFFFFFF,
				XLTOctowords: 4, XLT: mttXLT(rw(0x4000_0000), rw(0x4000_1000), rw(0x5000_0000)),
			})
			return k, d, k, piIOVA, func(i uint64) uint64 { return d + i }, func(i uint64) uint64 { return m + i }
		}, 2 * blocks},
		{"KLM", func(e *tbench) (klm.Key, uint64, klm.Key, uint64, func(uint64) uint64, func(uint64) uint64) {
			// Two data and two metadata SG entries, not page aligned.
			e.mapNew(0x6000_0000, 1000)
			e.mapNew(0x6100_0000, dataLen-1000)
			e.mapNew(0x6200_0000, 20)
			e.mapNew(0x6300_0000, metaLen-20)
			k := e.create(klm.Mkey{
				PD: testPD, Access: klm.LocalRead | klm.LocalWrite | klm.RemoteRead | klm.RemoteWrite, UMREnabled: true,
				Mode: klm.ModeKLM, StartAddr: 0, Len: dataLen + metaLen, QPN: 0xFFFFFF, XLTOctowords: 8,
				XLT: klmXLT(
					klm.KLMFields{ByteCount: 1000, Key: klm.ReservedLKey, VA: 0x6000_0000},
					klm.KLMFields{ByteCount: dataLen - 1000, Key: klm.ReservedLKey, VA: 0x6100_0000},
					klm.KLMFields{ByteCount: 20, Key: klm.ReservedLKey, VA: 0x6200_0000},
					klm.KLMFields{ByteCount: metaLen - 20, Key: klm.ReservedLKey, VA: 0x6300_0000}),
			})
			data := func(i uint64) uint64 {
				if i < 1000 {
					return 0x6000_0000 + i
				}
				return 0x6100_0000 + i - 1000
			}
			pi := func(i uint64) uint64 {
				if i < 20 {
					return 0x6200_0000 + i
				}
				return 0x6300_0000 + i - 20
			}
			return k, 0, k, dataLen, data, pi
		}, 2*blocks + 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newTbench(t, klm.ConnectX5)
			dk, dva, pk, pva, data, pi := c.setup(e)
			sig := e.create(sigMkey(dataLen+metaLen, sigXLT(blocks, dk, dva, pk, pva)))
			for _, need := range []klm.Access{klm.LocalRead, klm.LocalWrite, klm.RemoteRead, klm.RemoteWrite} {
				got := e.resolve(klm.Request{Key: sig, PD: testPD, Len: dataLen + metaLen, Access: need})
				if c.segs != 0 {
					assert.Len(t, got, c.segs, "%v: segments", need)
				}
				wantRuns(t, coalesce(got), interleaved(blocks, data, pi))
			}
			// Every window of the stream.
			for _, w := range []struct{ off, n uint64 }{{0, 1}, {511, 2}, {512, 8}, {519, 1}, {1000, 600}, {3 * 520, 520}, {4159, 1}} {
				got := e.resolve(klm.Request{Key: sig, PD: testPD, Addr: w.off, Len: w.n, Access: klm.RemoteRead})
				var want []run
				for s := w.off; s < w.off+w.n; s++ {
					c, o := s/520, s%520
					a := pi(c*8 + o - 512)
					if o < 512 {
						a = data(c*512 + o)
					}
					want = append(want, run{a, 1})
				}
				wantRuns(t, coalesce(got), coalesce(want))
			}
			// Remote atomics are not granted by the signature key.
			e.wantFault(klm.Request{Key: sig, PD: testPD, Len: 8, Access: klm.Atomic}, klm.FaultAccess, sig, 0)
		})
	}
}

// ---------------------------------------------------------------------------
// Every fault kind.

func TestFaultKinds(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	e.mapNew(0x10000, 0x1000)
	e.mapNew(0x20000, 0x1000)
	pa := e.create(paMkey(0x10000, 0x1000))
	otherPD := paMkey(0x10000, 0x1000)
	otherPD.PD = testPD + 1
	pa2 := e.create(otherPD)
	localOnly := paMkey(0x10000, 0x1000)
	localOnly.Access = klm.LocalRead | klm.LocalWrite
	lo := e.create(localOnly)
	free := e.create(klm.Mkey{Free: true, PD: testPD, Access: klm.AccessMask, Mode: klm.ModeKLM, XLTOctowords: 4})
	whole := paMkey(0, 0)
	whole.Length64 = true
	pa64 := e.create(whole)
	mtt := e.create(mttMkey(0x100000, 0x3000, 12, rw(0x10000), klm.MTTFields{Addr: 0x20000, Read: true}, rw(0x30000)))
	short := e.create(klmMkey(0, 0x200, klm.KLMFields{ByteCount: 0x100, Key: pa, VA: 0x10000}))
	mttShort := e.create(mttMkey(0x200000, 0x2000, 12, rw(0x10000)))
	innerBad := e.create(klmMkey(0, 0x10, klm.KLMFields{ByteCount: 0x10, Key: klm.MakeKey(0x998, 0), VA: 0}))
	// A chain of indirect keys: c[0] → pa, c[i] → c[i-1].
	var chain []klm.Key
	prev := pa
	for i := range 5 {
		va := uint64(0x10000)
		if i > 0 {
			va = 0
		}
		prev = e.create(klmMkey(0, 0x100, klm.KLMFields{ByteCount: 0x100, Key: prev, VA: va}))
		chain = append(chain, prev)
	}
	// Cycles: a key that points to itself, and a → b → a.
	self := e.create(klm.Mkey{Free: true, PD: testPD, Access: klm.AccessMask, Mode: klm.ModeKLM, UMREnabled: true, XLTOctowords: 4})
	point := func(k klm.Key, to klm.Key) {
		t.Helper()
		err := e.tbl.Update(k.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
			n := cur.Clone()
			n.Free, n.Len = false, 0x100
			n.XLT = klmXLT(klm.KLMFields{ByteCount: 0x100, Key: to, VA: 0})
			return n, nil
		})
		require.NoError(t, err, "Update pointing %v to %v", k, to)
	}
	point(self, self)
	a := e.create(klm.Mkey{Free: true, PD: testPD, Access: klm.AccessMask, Mode: klm.ModeKLM, XLTOctowords: 4})
	b := e.create(klm.Mkey{Free: true, PD: testPD, Access: klm.AccessMask, Mode: klm.ModeKLM, XLTOctowords: 4})
	point(a, b)
	point(b, a)
	// A KSM key whose entity is a cycle through a KLM key.
	ksmCyc := e.create(klm.Mkey{Free: true, PD: testPD, Access: klm.AccessMask, Mode: klm.ModeKSM, LogPageSize: 12, XLTOctowords: 4})
	klmToKsm := e.create(klmMkey(0, 0x100, klm.KLMFields{ByteCount: 0x100, Key: ksmCyc, VA: 0}))
	err := e.tbl.Update(ksmCyc.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
		n := cur.Clone()
		n.Free, n.Len, n.XLT = false, 0x1000, ksmXLT(klm.KSMFields{Key: klmToKsm, VA: 0})
		return n, nil
	})
	require.NoError(t, err, "Update pointing the KSM key to the KLM key")

	lr := klm.LocalRead
	type req = klm.Request
	cases := []struct {
		name  string
		r     req
		kind  klm.FaultKind
		key   klm.Key
		depth int
	}{
		{"index 0", req{Key: 0x000000FF, PD: testPD, Len: 1, Access: lr}, klm.FaultBadIndex, 0xFF, 0},
		{"terminator key", req{Key: klm.TerminatorLKey, PD: testPD, Len: 1, Access: lr}, klm.FaultBadIndex, klm.TerminatorLKey, 0},
		{"reserved index 4 (repeat marker)", req{Key: 0x400, PD: testPD, Len: 1, Access: lr}, klm.FaultBadIndex, 0x400, 0},
		{"index never created", req{Key: klm.MakeKey(0x999, 0), PD: testPD, Len: 1, Access: lr}, klm.FaultBadIndex, klm.MakeKey(0x999, 0), 0},
		{"index past MaxMkeys", req{Key: klm.MakeKey(1<<20, 0), PD: testPD, Len: 1, Access: lr}, klm.FaultBadIndex, klm.MakeKey(1<<20, 0), 0},
		{"index max", req{Key: 0xFFFFFFFF, PD: testPD, Len: 1, Access: lr}, klm.FaultBadIndex, 0xFFFFFFFF, 0},
		{"free", req{Key: free, PD: testPD, Len: 1, Access: lr}, klm.FaultFree, free, 0},
		{"free, wrong variant", req{Key: free + 1, PD: testPD, Len: 1, Access: lr}, klm.FaultFree, free + 1, 0},
		{"variant", req{Key: pa ^ 0x80, PD: testPD, Addr: 0x10000, Len: 1, Access: lr}, klm.FaultVariant, pa ^ 0x80, 0},
		{"variant before PD", req{Key: pa ^ 1, PD: 99, Addr: 0x10000, Len: 1, Access: lr}, klm.FaultVariant, pa ^ 1, 0},
		{"PD", req{Key: pa2, PD: testPD, Addr: 0x10000, Len: 1, Access: lr}, klm.FaultPD, pa2, 0},
		{"PD before access", req{Key: lo, PD: 0, Addr: 0x10000, Len: 1, Access: klm.RemoteRead}, klm.FaultPD, lo, 0},
		{"access", req{Key: lo, PD: testPD, Addr: 0x10000, Len: 1, Access: klm.RemoteRead}, klm.FaultAccess, lo, 0},
		{"access atomic", req{Key: lo, PD: testPD, Addr: 0x10000, Len: 1, Access: klm.Atomic}, klm.FaultAccess, lo, 0},
		{"access unknown bit", req{Key: pa, PD: testPD, Addr: 0x10000, Len: 1, Access: 0x80}, klm.FaultAccess, pa, 0},
		{"access before range", req{Key: lo, PD: testPD, Addr: 0, Len: 1, Access: klm.RemoteWrite}, klm.FaultAccess, lo, 0},
		{"MTT write enable", req{Key: mtt, PD: testPD, Addr: 0x101000, Len: 1, Access: klm.LocalWrite}, klm.FaultAccess, mtt, 0},
		{"range below", req{Key: pa, PD: testPD, Addr: 0xFFFF, Len: 1, Access: lr}, klm.FaultRange, pa, 0},
		{"range above", req{Key: pa, PD: testPD, Addr: 0x10FFF, Len: 2, Access: lr}, klm.FaultRange, pa, 0},
		{"range after", req{Key: pa, PD: testPD, Addr: 0x11000, Len: 1, Access: lr}, klm.FaultRange, pa, 0},
		{"range huge", req{Key: pa, PD: testPD, Addr: 0x10000, Len: 1 << 63, Access: lr}, klm.FaultRange, pa, 0},
		{"range wraps", req{Key: pa64, PD: testPD, Addr: ^uint64(0) - 1, Len: 4, Access: lr}, klm.FaultRange, pa64, 0},
		{"range past translation (KLM)", req{Key: short, PD: testPD, Addr: 0xF0, Len: 0x20, Access: lr}, klm.FaultRange, short, 0},
		{"range past translation (MTT)", req{Key: mttShort, PD: testPD, Addr: 0x200FFF, Len: 2, Access: lr}, klm.FaultRange, mttShort, 0},
		{"inner index", req{Key: innerBad, PD: testPD, Len: 1, Access: lr}, klm.FaultBadIndex, klm.MakeKey(0x998, 0), 1},
		{"depth", req{Key: chain[4], PD: testPD, Len: 1, Access: lr}, klm.FaultDepth, chain[0], 4},
		{"cycle self", req{Key: self, PD: testPD, Len: 1, Access: lr}, klm.FaultCycle, self, 1},
		{"cycle a b a", req{Key: a, PD: testPD, Len: 1, Access: lr}, klm.FaultCycle, a, 2},
		{"cycle b a b", req{Key: b, PD: testPD, Len: 1, Access: lr}, klm.FaultCycle, b, 2},
		{"cycle through KSM", req{Key: ksmCyc, PD: testPD, Len: 1, Access: lr}, klm.FaultCycle, ksmCyc, 2},
		{"unmapped PA", req{Key: pa64, PD: testPD, Addr: 0x30000, Len: 1, Access: lr}, klm.FaultUnmapped, pa64, 0},
		{"unmapped PA straddle", req{Key: pa64, PD: testPD, Addr: 0x10FFF, Len: 2, Access: lr}, klm.FaultUnmapped, pa64, 0},
		{"unmapped MTT", req{Key: mtt, PD: testPD, Addr: 0x102000, Len: 1, Access: lr}, klm.FaultUnmapped, mtt, 0},
		{"unmapped reserved", req{Key: klm.ReservedLKey, PD: testPD, Addr: 0x40000, Len: 1, Access: lr}, klm.FaultUnmapped, klm.ReservedLKey, 0},
	}
	for _, c := range cases {
		f := e.wantFault(c.r, c.kind, c.key, c.depth)
		if c.depth == 0 {
			assert.Equal(t, c.r.Access, f.Need, "%s: fault need", c.name)
		}
		assert.Contains(t, f.Error(), c.kind.String(), "%s: the error lacks the kind", c.name)
	}
	// Exactly MaxIndirection indirect keys are fine.
	wantRuns(t, e.resolve(klm.Request{Key: chain[3], PD: testPD, Len: 0x100, Access: lr}), []run{{0x10000, 0x100}})
	// With MaxIndirection 1 the same chain faults earlier.
	caps := klm.ConnectX5
	caps.MaxIndirection = 1
	e1 := newTbench(t, caps)
	e1.mapNew(0x10000, 0x100)
	k1 := e1.create(klmMkey(0, 0x100, klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x10000}))
	k2 := e1.create(klmMkey(0, 0x100, klm.KLMFields{ByteCount: 0x100, Key: k1, VA: 0}))
	wantRuns(t, e1.resolve(klm.Request{Key: k1, PD: testPD, Len: 0x100, Access: lr}), []run{{0x10000, 0x100}})
	e1.wantFault(klm.Request{Key: k2, PD: testPD, Len: 1, Access: lr}, klm.FaultDepth, k1, 1)
	// A PA or MTT key below the indirect keys does not count.
	caps.MaxIndirection = 0
	e0 := newTbench(t, caps)
	e0.mapNew(0x10000, 0x100)
	k0 := e0.create(klmMkey(0, 0x100, klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x10000}))
	wantRuns(t, e0.resolve(klm.Request{Key: klm.ReservedLKey, PD: testPD, Addr: 0x10000, Len: 0x100, Access: lr}), []run{{0x10000, 0x100}})
	e0.wantFault(klm.Request{Key: k0, PD: testPD, Len: 1, Access: lr}, klm.FaultDepth, k0, 0)
}

// TestFaultTranslation reaches FaultTranslation the only way the API
// allows: a published key whose translation was never parsed (a free key)
// made not free behind the table's back. Create and Update refuse a
// translation that does not parse, so a table never publishes one.
func TestFaultTranslation(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	k := e.create(klm.Mkey{Free: true, PD: testPD, Access: klm.AccessMask, Mode: klm.ModeKLM, Len: 0x100, XLTOctowords: 1})
	e.tbl.Lookup(k.Index()).Free = false
	e.wantFault(klm.Request{Key: k, PD: testPD, Len: 1, Access: klm.LocalRead}, klm.FaultTranslation, k, 0)
	e.wantFault(klm.Request{Key: k, PD: testPD, Len: 0, Access: klm.LocalRead}, klm.FaultTranslation, k, 0)
	// And as an inner key.
	outer := e.create(klmMkey(0, 0x10, klm.KLMFields{ByteCount: 0x10, Key: k, VA: 0}))
	e.wantFault(klm.Request{Key: outer, PD: testPD, Len: 1, Access: klm.LocalRead}, klm.FaultTranslation, k, 1)
}

func TestZeroLength(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	pa := e.create(paMkey(0x10000, 0x1000)) // nothing mapped
	short := e.create(klmMkey(0, 0x200, klm.KLMFields{ByteCount: 0x100, Key: klm.MakeKey(0x999, 0), VA: 0}))
	free := e.create(klm.Mkey{Free: true, PD: testPD})
	lo := paMkey(0, 0x10)
	lo.Access = klm.LocalRead
	lok := e.create(lo)
	z := func(k klm.Key, pd uint32, addr uint64, need klm.Access) klm.Request {
		return klm.Request{Key: k, PD: pd, Addr: addr, Len: 0, Access: need}
	}
	// Fine: the key checks pass; nothing is translated.
	for _, r := range []klm.Request{
		z(pa, testPD, 0x10000, klm.LocalRead),
		z(pa, testPD, 0x11000, klm.LocalRead), // the end of the key
		z(short, testPD, 0x150, klm.LocalRead),
		z(klm.ReservedLKey, 0, 0x999, klm.LocalWrite),
		z(lok, testPD, 0x10, klm.LocalRead),
	} {
		assert.Empty(t, e.resolve(r), "zero-length %+v gave segments", r)
	}
	// The key is still checked.
	e.wantFault(z(klm.MakeKey(0x999, 0), testPD, 0, klm.LocalRead), klm.FaultBadIndex, klm.MakeKey(0x999, 0), 0)
	e.wantFault(z(free, testPD, 0, klm.LocalRead), klm.FaultFree, free, 0)
	e.wantFault(z(pa+1, testPD, 0x10000, klm.LocalRead), klm.FaultVariant, pa+1, 0)
	e.wantFault(z(pa, testPD+1, 0x10000, klm.LocalRead), klm.FaultPD, pa, 0)
	e.wantFault(z(lok, testPD, 0, klm.LocalWrite), klm.FaultAccess, lok, 0)
	e.wantFault(z(klm.ReservedLKey, 0, 0, klm.RemoteRead), klm.FaultAccess, klm.ReservedLKey, 0)
	e.wantFault(z(pa, testPD, 0xFFFF, klm.LocalRead), klm.FaultRange, pa, 0)
	e.wantFault(z(pa, testPD, 0x11001, klm.LocalRead), klm.FaultRange, pa, 0)
}

// TestSegsUnchangedOnFault: a fault deep in a translation, after earlier
// parts resolved, still returns the caller's segs as they were.
func TestSegsUnchangedOnFault(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	e.mapNew(0x10000, 0x1000)
	e.mapNew(0x30000, 0x1000)
	mtt := e.create(mttMkey(0x100000, 0x3000, 12, rw(0x10000), rw(0x30000), rw(0x20000)))
	k := e.create(klmMkey(0, 0x400,
		klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x10000},
		klm.KLMFields{ByteCount: 0x100, Key: mtt, VA: 0x100F80},
		klm.KLMFields{ByteCount: 0x100, Key: mtt, VA: 0x101F80}, // into the unmapped page
		klm.KLMFields{ByteCount: 0x100, Key: klm.ReservedLKey, VA: 0x10000}))
	for _, capacity := range []int{2, 3, 5, 64} {
		segs := make([][]byte, 2, capacity)
		copy(segs, sentinel)
		out, err := e.tbl.Resolve(segs, klm.Request{Key: k, PD: testPD, Len: 0x400, Access: klm.LocalRead})
		var f *klm.Fault
		require.ErrorAs(t, err, &f, "cap %d", capacity)
		require.Equal(t, klm.FaultUnmapped, f.Kind, "cap %d: %v", capacity, err)
		require.Equal(t, mtt, f.Key, "cap %d: %v", capacity, err)
		require.Equal(t, 1, f.Depth, "cap %d: %v", capacity, err)
		require.Len(t, out, 2, "cap %d: segments back", capacity)
		if capacity == 64 {
			require.Same(t, unsafe.SliceData(segs), unsafe.SliceData(out), "cap %d: segments back not in the caller's array", capacity)
		}
		checkSentinel(t, out)
	}
}

// ---------------------------------------------------------------------------
// No allocations, concurrency.

func TestResolveDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	e := newTbench(t, klm.ConnectX5)
	e.mapNew(0x10000, 0x10000)
	pa := e.create(paMkey(0x10000, 0x10000))
	mtt := e.create(mttMkey(0x100000, 0x4000, 12, rw(0x13000), rw(0x11000), rw(0x12000), rw(0x10000)))
	kl := e.create(klmMkey(0, 0x4000,
		klm.KLMFields{ByteCount: 0x1000, Key: pa, VA: 0x10000},
		klm.KLMFields{ByteCount: 0x1000, Key: mtt, VA: 0x100000},
		klm.KLMFields{ByteCount: 0x2000, Key: klm.ReservedLKey, VA: 0x14000}))
	ks := e.create(ksmMkey(0, 0x3000, 12,
		klm.KSMFields{Key: kl, VA: 0x800}, klm.KSMFields{Key: mtt, VA: 0x101000}, klm.KSMFields{Key: klm.ReservedLKey, VA: 0x18000}))
	rep := e.create(repeatMkey(0, 8*520, 8,
		klm.RepeatEntryFields{Stride: 512, ByteCount: 512, Key: kl, VA: 0},
		klm.RepeatEntryFields{Stride: 8, ByteCount: 8, Key: klm.ReservedLKey, VA: 0x1F000}))
	segs := make([][]byte, 0, 64)
	for name, r := range map[string]klm.Request{
		"PA":     {Key: pa, PD: testPD, Addr: 0x10100, Len: 0x1000, Access: klm.LocalRead},
		"MTT":    {Key: mtt, PD: testPD, Addr: 0x100100, Len: 0x3000, Access: klm.LocalRead},
		"KLM":    {Key: kl, PD: testPD, Addr: 0x800, Len: 0x3000, Access: klm.RemoteRead},
		"KSM":    {Key: ks, PD: testPD, Addr: 0x800, Len: 0x2000, Access: klm.RemoteWrite},
		"repeat": {Key: rep, PD: testPD, Addr: 100, Len: 4000, Access: klm.RemoteRead},
		"zero":   {Key: kl, PD: testPD, Len: 0, Access: klm.LocalRead},
	} {
		var err error
		allocs := testing.AllocsPerRun(50, func() {
			_, err = e.tbl.Resolve(segs[:0], r)
		})
		require.NoError(t, err, "%s", name)
		assert.Zero(t, allocs, "%s: allocations per Resolve", name)
	}
}

func TestConcurrentResolveUpdate(t *testing.T) {
	e := newTbench(t, klm.ConnectX5)
	a := e.mapNew(0x10000, 0x1000)
	mem, tbl := e.mem, e.tbl
	toggled := make([]byte, 0x100)
	require.NoError(t, mem.Map(0x20000, toggled))
	xlt := [2][]byte{
		klmXLT(klm.KLMFields{ByteCount: 0x80, Key: klm.ReservedLKey, VA: 0x10000}, klm.KLMFields{ByteCount: 0x80, Key: klm.ReservedLKey, VA: 0x10400}),
		klmXLT(klm.KLMFields{ByteCount: 0x80, Key: klm.ReservedLKey, VA: 0x10800}, klm.KLMFields{ByteCount: 0x80, Key: klm.ReservedLKey, VA: 0x10C00}),
	}
	upd := e.create(withXLT(klmMkey(0, 0x100), xlt[0]))
	mtt := e.create(mttMkey(0x100000, 0x2000, 12, rw(0x10000), rw(0x20000)))
	paB := e.create(paMkey(0x20000, 0x100))
	var churn atomic.Uint32
	churn.Store(uint32(e.create(paMkey(0x10000, 0x1000))))

	iters := 3000
	if raceEnabled {
		iters = 500
	}
	var writers, readers sync.WaitGroup
	var done atomic.Bool
	writers.Add(3)
	go func() { // Update: swap translations, invalidate and re-register.
		defer writers.Done()
		for i := range iters {
			err := tbl.Update(upd.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
				n := cur.Clone()
				n.XLT = xlt[i&1]
				n.Free = i%7 == 3
				return n, nil
			})
			if !assert.NoError(t, err, "Update") { // assert, not require: not the test's goroutine
				return
			}
		}
	}()
	go func() { // Map and Unmap.
		defer writers.Done()
		for range iters {
			if !assert.NoError(t, mem.Unmap(0x20000), "Unmap") {
				return
			}
			if !assert.NoError(t, mem.Map(0x20000, toggled), "Map") {
				return
			}
		}
	}()
	go func() { // Destroy and Create.
		defer writers.Done()
		for range iters {
			k := klm.Key(churn.Load())
			if !assert.NoError(t, tbl.Destroy(k.Index()), "Destroy") {
				return
			}
			m := paMkey(0x10000, 0x1000)
			m.Variant = uint8(k.Variant() + 1)
			nk, err := tbl.Create(m)
			if !assert.NoError(t, err, "Create") {
				return
			}
			churn.Store(uint32(nk))
		}
	}()
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			segs := make([][]byte, 0, 8)
			kindOf := func(err error) klm.FaultKind {
				var f *klm.Fault
				if !assert.ErrorAs(t, err, &f, "error %v is not a fault", err) {
					return 0
				}
				return f.Kind
			}
			for n := 0; !done.Load() || n < 100; n++ {
				out, err := tbl.Resolve(segs[:0], klm.Request{Key: upd, PD: testPD, Len: 0x100, Access: klm.RemoteRead})
				if err == nil {
					// One translation or the other, never a mix.
					ok := len(out) == 2 && len(out[0]) == 0x80 && len(out[1]) == 0x80 &&
						((&out[0][0] == &a[0] && &out[1][0] == &a[0x400]) || (&out[0][0] == &a[0x800] && &out[1][0] == &a[0xC00]))
					if !assert.True(t, ok, "update: torn or wrong translation (%d segments)", len(out)) {
						return
					}
				} else if !assert.Equal(t, klm.FaultFree, kindOf(err), "update: fault %v", err) {
					return
				}
				out, err = tbl.Resolve(segs[:0], klm.Request{Key: paB, PD: testPD, Addr: 0x20000, Len: 0x100, Access: klm.LocalWrite})
				if err == nil {
					if !assert.True(t, len(out) == 1 && &out[0][0] == &toggled[0] && len(out[0]) == 0x100, "paB: wrong segments") {
						return
					}
					_ = out[0][0xFF]
				} else if !assert.Equal(t, klm.FaultUnmapped, kindOf(err), "paB: fault %v", err) {
					return
				}
				out, err = tbl.Resolve(segs[:0], klm.Request{Key: mtt, PD: testPD, Addr: 0x100F80, Len: 0x100, Access: klm.LocalRead})
				if err == nil {
					if !assert.True(t, len(out) == 2 && &out[0][0] == &a[0xF80] && len(out[0]) == 0x80 && &out[1][0] == &toggled[0] && len(out[1]) == 0x80, "mtt: wrong segments") {
						return
					}
				} else if !assert.Equal(t, klm.FaultUnmapped, kindOf(err), "mtt: fault %v", err) {
					return
				}
				ck := klm.Key(churn.Load())
				out, err = tbl.Resolve(segs[:0], klm.Request{Key: ck, PD: testPD, Addr: 0x10000, Len: 0x10, Access: klm.LocalRead})
				if err == nil {
					if !assert.True(t, len(out) == 1 && &out[0][0] == &a[0], "churn: wrong segments") {
						return
					}
				} else if !assert.Contains(t, []klm.FaultKind{klm.FaultBadIndex, klm.FaultVariant}, kindOf(err), "churn: fault %v", err) {
					return
				}
			}
		}()
	}
	writers.Wait()
	done.Store(true)
	readers.Wait()
}
