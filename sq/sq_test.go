package sq

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/hcasim/hcasim/internal/dma"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
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
		if got := CtrlSeg(b).Fields(); got != tc.f {
			t.Errorf("% x decodes as %+v, want %+v", b, got, tc.f)
		}
		enc := make(CtrlSeg, CtrlSegSize)
		enc.Encode(&tc.f)
		if !bytes.Equal(enc, b) {
			t.Errorf("%+v encodes as % x, want % x", tc.f, []byte(enc), b)
		}
	}
	d := unhex(t, "00 00 10 40 00 c0 ff ee 00 00 7f 00 12 34 50 00")
	want := DataFields{ByteCount: 4160, LKey: 0xc0ffee, Addr: 0x7f0012345000}
	if got := DataSeg(d).Fields(); got != want {
		t.Errorf("data seg %+v", got)
	}
	enc := make(DataSeg, DataSegSize)
	enc.Encode(&want)
	if !bytes.Equal(enc, d) {
		t.Errorf("data seg encodes as % x", []byte(enc))
	}
}

func TestSegmentsRoundTrip(t *testing.T) {
	r := RaddrFields{Addr: 0x0102030405060708, RKey: 0x090a0b0c}
	rb := make(RaddrSeg, RaddrSegSize)
	rb.Encode(&r)
	if rb.Fields() != r || !bytes.Equal(rb, unhex(t, "0102030405060708 090a0b0c 00000000")) {
		t.Errorf("raddr % x", []byte(rb))
	}
	a := AtomicFields{SwapAdd: 1, Compare: 2}
	ab := make(AtomicSeg, AtomicSize)
	ab.Encode(&a)
	if ab.Fields() != a {
		t.Error("atomic")
	}
	p := PSVFields{Index: 0x123456, Syndrome: 0, Guard: 0xFFFF, AppTag: 0x1234, RefTag: 0xdeadbeef}
	pb := make(PSVSeg, PSVSegSize)
	pb.Encode(&p)
	if pb.Fields() != p || !bytes.Equal(pb, unhex(t, "00123456 0000 0000 ffff1234 deadbeef")) {
		t.Errorf("psv % x", []byte(pb))
	}
	if WQEBBs(3) != 1 || WQEBBs(4) != 1 || WQEBBs(5) != 2 || WQEBBs(16) != 4 {
		t.Error("WQEBBs")
	}
}

// WQEs wrap at the end of the ring; malformed ones advance one WQEBB.
func TestRingFetchWrap(t *testing.T) {
	buf := make([]byte, 4*WQEBBSize)
	db := make([]byte, 8)
	r, err := NewRing(buf, db[4:], 2)
	if err != nil {
		t.Fatal(err)
	}
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
		if err != nil || f.WQEIndex != want.idx || len(w) != int(want.ds)*SegSize {
			t.Fatalf("fetch %d: %+v len %d %v", i, f, len(w), err)
		}
	}
	// A three-WQEBB WQE at index 3 wraps to 0 and 1.
	put(3, 12, 0xA3)
	dma.StoreBE32(db[4:], 6)
	w, f, err := r.Fetch(scratch[:])
	if err != nil || f.WQEIndex != 3 || len(w) != 192 || w[191] != 0xA3 || w[70] != 0xA3 {
		t.Fatalf("wrapped fetch %+v %v", f, err)
	}
	if r.Pending() {
		t.Fatal("pending after the last WQE")
	}
	// DS 0 and a WQE longer than what was posted are malformed.
	put(6, 0, 0)
	dma.StoreBE32(db[4:], 7)
	if _, _, err := r.Fetch(scratch[:]); !errors.Is(err, ErrBadWQE) || r.Consumer() != 7 {
		t.Fatalf("ds 0: %v, consumer %d", err, r.Consumer())
	}
	put(7, 16, 0)
	dma.StoreBE32(db[4:], 8)
	if _, _, err := r.Fetch(scratch[:]); !errors.Is(err, ErrBadWQE) {
		t.Fatalf("overlong WQE: %v", err)
	}
	if _, err := NewRing(make([]byte, 100), db[4:], 2); !errors.Is(err, ErrGeometry) {
		t.Fatal("bad geometry accepted")
	}
}
