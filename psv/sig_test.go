package psv

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hcasim/hcasim/t10dif"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	_, err := t10dif.Generate(d, t10dif.Buf{Data: out}, data)
	require.NoError(t, err)
	return out
}

// stream runs data through a Sig's transform as the device does.
func stream(t *testing.T, s *Sig, toWire bool, first uint64, src []byte, outLen int) ([]byte, *t10dif.Error) {
	t.Helper()
	cfg := s.Config(toWire, first)
	st, err := t10dif.NewStream(&cfg)
	require.NoError(t, err, "stream")
	out := make([]byte, outLen)
	nd, ns, err := st.Process(out, src)
	require.NoError(t, err, "process")
	require.Equal(t, outLen, nd, "process: bytes out")
	require.Equal(t, len(src), ns, "process: bytes in")
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
			require.NoError(t, err)
			require.Equal(t, tc.unit, s.Unit, "unit")
			const units = 3
			data := pattern(units * tc.unit)
			mem, wire := generate(t, tc.mem, data), generate(t, tc.wire, data)
			require.Len(t, mem, int(units*s.MemBlock()), "memory image")
			require.Len(t, wire, int(units*s.WireBlock()), "wire image")
			// The whole key, then the last unit alone (ref tags continue).
			for _, first := range []uint64{0, units - 1} {
				mo, ml, err := s.MemRange(first*s.WireBlock(), (units-first)*s.WireBlock())
				require.NoError(t, err, "MemRange from unit %d", first)
				require.Equal(t, first*s.MemBlock(), mo, "MemRange offset from unit %d", first)
				require.Equal(t, (units-first)*s.MemBlock(), ml, "MemRange length from unit %d", first)
				w := wire[first*s.WireBlock():]
				m := mem[mo:]
				got, e := stream(t, s, true, first, m, len(w))
				require.Nil(t, e, "memory to wire from unit %d", first)
				require.True(t, bytes.Equal(got, w), "memory to wire from unit %d: output differs", first)
				got, e = stream(t, s, false, first, w, len(m))
				require.Nil(t, e, "wire to memory from unit %d", first)
				require.True(t, bytes.Equal(got, m), "wire to memory from unit %d: output differs", first)
			}
			_, _, err = s.MemRange(1, s.WireBlock())
			assert.ErrorIs(t, err, ErrUnaligned, "unaligned range")
			// A range ending inside its last unit: refused when the HCA
			// re-blocks, else the tail's data (and tuple bytes) only.
			reblock := (s.Mem.HasPI() && s.Mem.Interval != s.Unit) || (s.Wire.HasPI() && s.Wire.Interval != s.Unit)
			for _, tail := range []uint64{1, uint64(s.Unit) - 1, uint64(s.Unit), s.WireBlock() - 1} {
				if tail == 0 || tail >= s.WireBlock() {
					continue
				}
				_, ml, err := s.MemRange(0, s.WireBlock()+tail)
				if reblock {
					assert.ErrorIs(t, err, ErrUnaligned, "partial re-blocked unit")
					continue
				}
				want := s.MemBlock() + min(tail, uint64(s.Unit))
				if s.Mem.HasPI() {
					want += tail - min(tail, uint64(s.Unit))
				}
				if assert.NoError(t, err, "unit + %d wire bytes", tail) {
					assert.Equal(t, want, ml, "unit + %d wire bytes: memory", tail)
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
	require.NoError(t, err)
	data := pattern(2 * 4096)
	mem := generate(t, s.Mem, data)
	mem[13*520+3] ^= 1 // memory block 5 of the second unit = block 13 of the key
	_, e := stream(t, s, true, 1, mem[s.MemBlock():], int(s.WireBlock()))
	require.NotNil(t, e, "want a guard error in block 5")
	require.Equal(t, t10dif.ErrorGuard, e.Type, "error %+v", e)
	require.EqualValues(t, 5, e.Block, "error %+v", e)
	assert.EqualValues(t, 13*520, s.ErrOffset(true, 1, e.Block), "offset")
	assert.EqualValues(t, 1*4104, s.ErrOffset(false, 1, 0), "wire input offset")
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
		_, err := Decode(encodeBSF(tc.f), 0, 0)
		assert.ErrorIs(t, err, ErrBadBSF, tc.name)
	}
	b := encodeBSF(BSFFields{WireByte: 1, Wire: inl(SigTypeCRC, 0, 0)})
	b[0] = 0
	_, err := Decode(b, 0, 0)
	assert.Error(t, err, "a BSF without inline sections decoded")
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
		require.False(t, s.Unit <= 0 || (s.Mem.HasPI() && s.Unit%s.Mem.Interval != 0) || (s.Wire.HasPI() && s.Unit%s.Wire.Interval != 0),
			"unit %d for intervals %d/%d", s.Unit, s.Mem.Interval, s.Wire.Interval)
		mo, ml, err := s.MemRange(2*s.WireBlock(), 3*s.WireBlock())
		require.NoError(t, err, "MemRange of whole units")
		require.Equal(t, 2*s.MemBlock(), mo, "MemRange offset of whole units")
		require.Equal(t, 3*s.MemBlock(), ml, "MemRange length of whole units")
		for _, toWire := range []bool{true, false} {
			cfg := s.Config(toWire, 5)
			_, err := t10dif.NewStream(&cfg)
			require.NoError(t, err, "decoded configuration refused by t10dif (toWire %v)", toWire)
		}
	})
}
