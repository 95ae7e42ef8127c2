package sq

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/internal/dma"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	require.NoError(t, err, "hex %q", s)
	return b
}

// Golden bytes from mlx5dv.h's inline helpers (external-tools.md): the
// helper stores imm as given, so on a little-endian host 0x11223344 reads
// back big-endian as 0x44332211; every other field is big-endian.
func TestCtrlSegGolden(t *testing.T) {
	for _, tc := range []struct {
		hex string
		f   CtrlFields
	}{
		{"00 12 34 08 ab cd ef 03 5a 00 00 08 44 33 22 11",
			CtrlFields{WQEIndex: 0x1234, Opcode: OpRDMAWrite, QPN: 0xabcdef, DS: 3, Signature: 0x5a, CE: CECQUpdate, Imm: 0x44332211}},
		{"01 ff ff 25 00 01 23 0c 00 00 00 88 01 cd ab 00",
			CtrlFields{OpMod: 1, WQEIndex: 0xffff, Opcode: OpUMR, QPN: 0x123, DS: 12, Fence: FenceSmallAndFence, CE: CECQUpdate, Imm: 0x01cdab00}},
	} {
		b := unhex(t, tc.hex)
		assert.Equal(t, tc.f, CtrlSeg(b).Fields(), "% x decodes", b)
		enc := make(CtrlSeg, CtrlSegSize)
		enc.Encode(&tc.f)
		assert.Equal(t, b, []byte(enc), "%+v encodes", tc.f)
	}
	d := unhex(t, "00 00 10 40 00 c0 ff ee 00 00 7f 00 12 34 50 00")
	want := DataFields{ByteCount: 4160, LKey: 0xc0ffee, Addr: 0x7f0012345000}
	assert.Equal(t, want, DataSeg(d).Fields(), "data seg decodes")
	enc := make(DataSeg, DataSegSize)
	enc.Encode(&want)
	assert.Equal(t, d, []byte(enc), "data seg encodes")
}

func TestSegmentsRoundTrip(t *testing.T) {
	r := RaddrFields{Addr: 0x0102030405060708, RKey: 0x090a0b0c}
	rb := make(RaddrSeg, RaddrSegSize)
	rb.Encode(&r)
	assert.Equal(t, r, rb.Fields(), "raddr round trip")
	assert.Equal(t, unhex(t, "0102030405060708 090a0b0c 00000000"), []byte(rb), "raddr bytes")
	a := AtomicFields{SwapAdd: 1, Compare: 2}
	ab := make(AtomicSeg, AtomicSize)
	ab.Encode(&a)
	assert.Equal(t, a, ab.Fields(), "atomic round trip")
	for ds, want := range map[uint8]int{3: 1, 4: 1, 5: 2, 16: 4} {
		assert.Equal(t, want, WQEBBs(ds), "WQEBBs(%d)", ds)
	}
}

// WQEs wrap at the end of the ring; malformed ones advance one WQEBB.
func TestRingFetchWrap(t *testing.T) {
	buf := make([]byte, 4*WQEBBSize)
	db := make([]byte, 8)
	r, err := NewRing(buf, db[4:], 2)
	require.NoError(t, err)
	put := func(pi uint16, ds uint8, fill byte) {
		w := make([]byte, max(int(ds), 1)*SegSize)
		CtrlSeg(w).Encode(&CtrlFields{WQEIndex: pi, Opcode: OpSend, DS: ds})
		for i := CtrlSegSize; i < len(w); i++ {
			w[i] = fill
		}
		off := int(pi&3) * WQEBBSize
		k := copy(buf[off:], w)
		copy(buf, w[k:])
	}
	var scratch [MaxWQEBBs * WQEBBSize]byte
	put(0, 4, 0xA0) // one WQEBB
	put(1, 8, 0xA1) // two
	dma.StoreBE32(db[4:], 3)
	for i, want := range []struct {
		idx uint16
		ds  uint8
	}{{0, 4}, {1, 8}} {
		w, f, err := r.Fetch(scratch[:])
		require.NoError(t, err, "fetch %d", i)
		require.Equal(t, want.idx, f.WQEIndex, "fetch %d: WQE index", i)
		require.Len(t, w, int(want.ds)*SegSize, "fetch %d", i)
	}
	// A three-WQEBB WQE at index 3 wraps to 0 and 1.
	put(3, 12, 0xA3)
	dma.StoreBE32(db[4:], 6)
	w, f, err := r.Fetch(scratch[:])
	require.NoError(t, err, "wrapped fetch")
	require.Equal(t, uint16(3), f.WQEIndex, "wrapped fetch: WQE index")
	require.Len(t, w, 192, "wrapped fetch")
	require.Equal(t, byte(0xA3), w[191], "wrapped fetch: last byte")
	require.Equal(t, byte(0xA3), w[70], "wrapped fetch: byte 70")
	require.False(t, r.Pending(), "pending after the last WQE")
	// DS 0 and a WQE longer than what was posted are malformed.
	put(6, 0, 0)
	dma.StoreBE32(db[4:], 7)
	_, _, err = r.Fetch(scratch[:])
	require.ErrorIs(t, err, ErrBadWQE, "ds 0")
	require.Equal(t, uint16(7), r.Consumer(), "ds 0: consumer")
	put(7, 16, 0)
	dma.StoreBE32(db[4:], 8)
	_, _, err = r.Fetch(scratch[:])
	require.ErrorIs(t, err, ErrBadWQE, "overlong WQE")
	_, err = NewRing(make([]byte, 100), db[4:], 2)
	require.ErrorIs(t, err, ErrGeometry, "bad geometry accepted")
}

// Peek then Take consumes the WQE Peek saw, with Fetch's checks; a Take
// for more WQEBBs than Peek saw posted is malformed.
func TestRingPeekTake(t *testing.T) {
	buf := make([]byte, 4*WQEBBSize)
	db := make([]byte, 8)
	r, err := NewRing(buf, db[4:], 2)
	require.NoError(t, err)
	var scratch [MaxWQEBBs * WQEBBSize]byte
	_, ok := r.Peek()
	require.False(t, ok, "peek of an empty ring")
	CtrlSeg(buf).Encode(&CtrlFields{WQEIndex: 0, Opcode: OpRDMAWrite, DS: 3})
	buf[47] = 0x5A
	CtrlSeg(buf[WQEBBSize:]).Encode(&CtrlFields{WQEIndex: 1, Opcode: OpSend, DS: 8})
	dma.StoreBE32(db[4:], 2) // the second WQE needs two WQEBBs: only one posted
	f, ok := r.Peek()
	require.True(t, ok)
	require.Equal(t, OpRDMAWrite, f.Opcode)
	w, err := r.Take(scratch[:], &f)
	require.NoError(t, err)
	require.Len(t, w, 48)
	require.Equal(t, byte(0x5A), w[47])
	require.Equal(t, uint16(1), r.Consumer())
	f, ok = r.Peek()
	require.True(t, ok)
	_, err = r.Take(scratch[:], &f)
	require.ErrorIs(t, err, ErrBadWQE, "a WQE longer than what was posted")
	require.Equal(t, uint16(2), r.Consumer(), "a malformed WQE moves the counter by one")
}
