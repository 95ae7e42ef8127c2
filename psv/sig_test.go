package psv

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hcasim/hcasim/t10dif"
)

// inl is a T10-DIF inline section as mlx5_set_bsf writes it.
func inl(sigType uint8, ref uint32, app uint16) InlineFields {
	return InlineFields{Valid: true, Refresh: true, AppTag: app, RefTag: ref, SigType: sigType, RepeatBlock: true,
		IncRefTag: true, Escape: EscapeApp, AppTagMask: 0xFFFF}
}

func encodeBSF(f BSFFields) []byte {
	f.Size = BSFWithInline
	b := make(BSF, BSFSize)
	b.Encode(&f)
	return b
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + i>>9)
	}
	return b
}

func generate(t *testing.T, d t10dif.Domain, data []byte) []byte {
	t.Helper()
	if !d.HasPI() {
		return append([]byte(nil), data...)
	}
	out := make([]byte, len(data)/d.Interval*(d.Interval+8))
	if _, err := t10dif.Generate(d, t10dif.Buf{Data: out}, data); err != nil {
		t.Fatal(err)
	}
	return out
}

// stream runs data through a Sig's transform as the device does.
func stream(t *testing.T, s *Sig, toWire bool, first uint64, src []byte, outLen int) ([]byte, *t10dif.Error) {
	t.Helper()
	cfg := s.Config(toWire, first)
	st, err := t10dif.NewStream(&cfg)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	out := make([]byte, outLen)
	nd, ns, err := st.Process(out, src)
	if err != nil || nd != outLen || ns != len(src) {
		t.Fatalf("process: %d of %d out, %d of %d in, %v", nd, outLen, ns, len(src), err)
	}
	st.Close()
	return out, st.FirstError()
}

// The recipes of mlx5-integrity.md §1.5 as BSFs: each decodes to domains
// whose transform, from any unit of the key, turns the memory image of the
// data into the wire image t10dif generates (and back).
func TestDecodeRecipes(t *testing.T) {
	const ref = 0x1000
	crc512 := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Guard: t10dif.GuardCRC16, Interval: 512,
		RefTag: ref, Ref: t10dif.RefIncrement, Escape: t10dif.EscapeApp, AppTag: 7, AppTagMask: 0xFFFF}
	csum512 := crc512
	csum512.Guard = t10dif.GuardIPChecksum
	crc4096 := crc512
	crc4096.Interval = 4096
	for _, tc := range []struct {
		name      string
		f         BSFFields
		mem, wire t10dif.Domain
		unit      int
	}{
		{"insert/strip (memory none)", BSFFields{CheckMask: 0xCF, WireByte: 1, Wire: inl(SigTypeCRC, ref, 7)},
			t10dif.Domain{}, crc512, 512},
		{"pass (sbs, copy all)", BSFFields{SBS: true, CheckMask: 0xCF, WireByte: 0xFF, MemSelector: 1,
			Wire: inl(SigTypeCRC, ref, 7), Mem: inl(SigTypeCRC, ref, 7)}, crc512, crc512, 512},
		{"iSER (memory IP checksum, wire CRC)", BSFFields{SBS: true, CheckMask: 0xCF, WireByte: 0x3F, MemSelector: 1,
			Wire: inl(SigTypeCRC, ref, 7), Mem: inl(SigTypeIPCS, ref, 7)}, csum512, crc512, 512},
		{"memory PI, wire none", BSFFields{CheckMask: 0xCF, MemSelector: 3, Mem: inl(SigTypeCRC, ref, 7)},
			crc4096, t10dif.Domain{}, 4096},
		{"re-block 512 to 4096", BSFFields{CheckMask: 0xCF, WireByte: 3, MemSelector: 1,
			Wire: inl(SigTypeCRC, ref, 7), Mem: inl(SigTypeCRC, ref, 7)}, crc512, crc4096, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Decode(encodeBSF(tc.f), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if s.Unit != tc.unit {
				t.Fatalf("unit %d, want %d", s.Unit, tc.unit)
			}
			const units = 3
			data := pattern(units * tc.unit)
			mem, wire := generate(t, tc.mem, data), generate(t, tc.wire, data)
			if uint64(len(mem)) != units*s.MemBlock() || uint64(len(wire)) != units*s.WireBlock() {
				t.Fatalf("unit sizes %d/%d, images %d/%d", s.MemBlock(), s.WireBlock(), len(mem), len(wire))
			}
			// The whole key, then the last unit alone (ref tags continue).
			for _, first := range []uint64{0, units - 1} {
				mo, ml, err := s.MemRange(first*s.WireBlock(), (units-first)*s.WireBlock())
				if err != nil || mo != first*s.MemBlock() || ml != (units-first)*s.MemBlock() {
					t.Fatalf("MemRange from unit %d = %d+%d, %v", first, mo, ml, err)
				}
				w := wire[first*s.WireBlock():]
				m := mem[mo:]
				got, e := stream(t, s, true, first, m, len(w))
				if e != nil || !bytes.Equal(got, w) {
					t.Fatalf("memory to wire from unit %d: error %v, equal %v", first, e, bytes.Equal(got, w))
				}
				got, e = stream(t, s, false, first, w, len(m))
				if e != nil || !bytes.Equal(got, m) {
					t.Fatalf("wire to memory from unit %d: error %v, equal %v", first, e, bytes.Equal(got, m))
				}
			}
			if _, _, err := s.MemRange(1, s.WireBlock()); !errors.Is(err, ErrUnaligned) {
				t.Errorf("unaligned range: %v", err)
			}
			// A range ending inside its last unit: refused when the HCA
			// re-blocks, else the tail's data (and tuple bytes) only.
			reblock := (s.Mem.HasPI() && s.Mem.Interval != s.Unit) || (s.Wire.HasPI() && s.Wire.Interval != s.Unit)
			for _, tail := range []uint64{1, uint64(s.Unit) - 1, uint64(s.Unit), s.WireBlock() - 1} {
				if tail == 0 || tail >= s.WireBlock() {
					continue
				}
				_, ml, err := s.MemRange(0, s.WireBlock()+tail)
				if reblock {
					if !errors.Is(err, ErrUnaligned) {
						t.Errorf("partial re-blocked unit: %v", err)
					}
					continue
				}
				want := s.MemBlock() + min(tail, uint64(s.Unit))
				if s.Mem.HasPI() {
					want += tail - min(tail, uint64(s.Unit))
				}
				if err != nil || ml != want {
					t.Errorf("unit + %d wire bytes: memory %d (%v), want %d", tail, ml, err, want)
				}
			}
		})
	}
}

// Error offsets count input-domain blocks from the key's start, in units
// of interval + 8, whichever domain is the input and however the access
// started.
func TestErrOffset(t *testing.T) {
	s, err := Decode(encodeBSF(BSFFields{CheckMask: 0xCF, WireByte: 3, MemSelector: 1,
		Wire: inl(SigTypeCRC, 0, 0), Mem: inl(SigTypeCRC, 0, 0)}), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(2 * 4096)
	mem := generate(t, s.Mem, data)
	mem[13*520+3] ^= 1 // memory block 5 of the second unit = block 13 of the key
	_, e := stream(t, s, true, 1, mem[s.MemBlock():], int(s.WireBlock()))
	if e == nil || e.Type != t10dif.ErrorGuard || e.Block != 5 {
		t.Fatalf("error %+v, want a guard error in block 5", e)
	}
	if off := s.ErrOffset(true, 1, e.Block); off != 13*520 {
		t.Errorf("offset %d, want %d", off, 13*520)
	}
	if off := s.ErrOffset(false, 1, 0); off != 1*4104 {
		t.Errorf("wire input offset %d, want %d", off, 4104)
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    BSFFields
	}{
		{"no PI in either domain", BSFFields{CheckMask: 0xCF}},
		{"unknown selector", BSFFields{MemSelector: 9, Mem: inl(SigTypeCRC, 0, 0)}},
		{"unknown guard type", BSFFields{WireByte: 1, Wire: inl(7, 0, 0)}},
		{"unknown escape", BSFFields{WireByte: 1, Wire: InlineFields{SigType: SigTypeCRC, Escape: 3}}},
	} {
		if _, err := Decode(encodeBSF(tc.f), 0, 0); !errors.Is(err, ErrBadBSF) {
			t.Errorf("%s: %v, want ErrBadBSF", tc.name, err)
		}
	}
	b := encodeBSF(BSFFields{WireByte: 1, Wire: inl(SigTypeCRC, 0, 0)})
	b[0] = 0
	if _, err := Decode(b, 0, 0); err == nil {
		t.Error("a BSF without inline sections decoded")
	}
}

// FuzzDecode: any BSF bytes and seeds either fail to decode with an error
// or give a configuration the device can use: whole units map between
// domains and the transform is one t10dif accepts.
func FuzzDecode(f *testing.F) {
	f.Add(encodeBSF(BSFFields{CheckMask: 0xCF, WireByte: 1, Wire: inl(SigTypeCRC, 1, 2)}), uint16(0), uint16(0))
	f.Add(encodeBSF(BSFFields{SBS: true, CheckMask: 0xCF, WireByte: 0x3F, MemSelector: 1,
		Wire: inl(SigTypeCRC, 1, 2), Mem: inl(SigTypeIPCS, 1, 2)}), uint16(0xFFFF), uint16(1))
	f.Add(encodeBSF(BSFFields{CheckMask: 0xCF, WireByte: 3, MemSelector: 2,
		Wire: inl(SigTypeCRC, 1, 2), Mem: inl(SigTypeCRC, 1, 2)}), uint16(0), uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, memSeed, wireSeed uint16) {
		if len(b) < BSFSize {
			return
		}
		s, err := Decode(b[:BSFSize], memSeed, wireSeed)
		if err != nil {
			if !errors.Is(err, ErrBadBSF) && BSF(b[:BSFSize]).Validate() == nil {
				t.Fatalf("error %v not ErrBadBSF", err)
			}
			return
		}
		if s.Unit <= 0 || (s.Mem.HasPI() && s.Unit%s.Mem.Interval != 0) || (s.Wire.HasPI() && s.Unit%s.Wire.Interval != 0) {
			t.Fatalf("unit %d for intervals %d/%d", s.Unit, s.Mem.Interval, s.Wire.Interval)
		}
		mo, ml, err := s.MemRange(2*s.WireBlock(), 3*s.WireBlock())
		if err != nil || mo != 2*s.MemBlock() || ml != 3*s.MemBlock() {
			t.Fatalf("MemRange of whole units = %d+%d, %v", mo, ml, err)
		}
		for _, toWire := range []bool{true, false} {
			cfg := s.Config(toWire, 5)
			if _, err := t10dif.NewStream(&cfg); err != nil {
				t.Fatalf("decoded configuration refused by t10dif (toWire %v): %v", toWire, err)
			}
		}
	})
}
