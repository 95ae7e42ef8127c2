package t10dif

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"hash/crc64"
	"testing"
)

// The CRC block-signature formats (mlx5dv MLX5DV_SIG_TYPE_CRC): a CRC of
// each block after it, seeded with the register's initial value.
func TestCRCBlockGuards(t *testing.T) {
	check := []byte("123456789")
	// Seed all ones: the standard CRCs and their check values.
	for _, c := range []struct {
		g    GuardType
		f    Format
		want uint64
	}{
		{GuardCRC32, FormatCRC32, 0xCBF43926},
		{GuardCRC32C, FormatCRC32, 0xE3069283},
		{GuardCRC64XP10, FormatCRC64, 0x995DC9BBDF1939FA},
	} {
		var a guardAcc
		a.reset(c.g, 1<<(8*c.f.TupleSize())-1)
		a.update(check[:4])
		a.update(check[4:])
		if c.f == FormatCRC64 {
			a.reset(c.g, ^uint64(0))
			a.update(check)
		}
		if got := a.value(); got != c.want {
			t.Errorf("%v seed all ones: %#x, want %#x", c.g, got, c.want)
		}
	}
	// Seed 0: init 0, still the final complement.
	var a guardAcc
	a.reset(GuardCRC32, 0)
	a.update(check)
	if want := uint64(crc32.Update(0xFFFFFFFF, crc32.IEEETable, check)); a.value() != want {
		t.Errorf("crc32 seed 0: %#x, want %#x", a.value(), want)
	}
	a.reset(GuardCRC64XP10, 0)
	a.update(check)
	if want := crc64.Update(^uint64(0), crc64.MakeTable(crc64.ECMA), check); a.value() != want {
		t.Errorf("crc64xp10 seed 0: %#x, want %#x", a.value(), want)
	}
}

func TestCRCBlockOps(t *testing.T) {
	const iv, blocks = 512, 4
	data := make([]byte, iv*blocks)
	for i := range data {
		data[i] = byte(i*13 + i/iv)
	}
	for _, d := range []Domain{
		{Format: FormatCRC32, Interval: iv, Seed: 0xFFFFFFFF},
		{Format: FormatCRC32, Guard: GuardCRC32C, Interval: iv},
		{Format: FormatCRC64, Interval: 4096 / 8, Seed: ^uint64(0)},
	} {
		t.Run(d.Format.String()+"/"+d.Guard.String(), func(t *testing.T) {
			tuple := d.Format.TupleSize()
			prot := make([]byte, blocks*(d.Interval+tuple))
			if _, err := Generate(d, Buf{Data: prot}, data); err != nil {
				t.Fatal(err)
			}
			for b := range blocks {
				blk := data[b*d.Interval : (b+1)*d.Interval]
				var want uint64
				switch d.Guard {
				case GuardCRC32C:
					want = uint64(crc32.Update(^uint32(d.Seed), crc32.MakeTable(crc32.Castagnoli), blk))
				case GuardDefault:
					if d.Format == FormatCRC32 {
						want = uint64(crc32.Update(^uint32(d.Seed), crc32.IEEETable, blk))
					} else {
						want = crc64.Update(^d.Seed, crc64.MakeTable(crc64.ECMA), blk)
					}
				}
				off := b*(d.Interval+tuple) + d.Interval
				got := uint64(binary.BigEndian.Uint32(prot[off:]))
				if tuple == 8 {
					got = binary.BigEndian.Uint64(prot[off:])
				}
				if got != want {
					t.Fatalf("block %d: CRC %#x, want %#x", b, got, want)
				}
			}
			mask := d.Format.GuardMask()
			if err := Verify(d, mask, Buf{Data: prot}); err != nil {
				t.Fatalf("verify: %v", err)
			}
			out := make([]byte, len(data))
			if _, err := Strip(d, mask, out, Buf{Data: prot}); err != nil || string(out) != string(data) {
				t.Fatalf("strip: %v", err)
			}
			bad := append([]byte(nil), prot...)
			bad[2*(d.Interval+tuple)+7] ^= 1
			var e *Error
			if err := Verify(d, mask, Buf{Data: bad}); !errors.As(err, &e) || e.Type != ErrorGuard || e.Block != 2 {
				t.Fatalf("corrupted block 2: %v", err)
			}
			if err := Verify(d, 0, Buf{Data: bad}); err != nil {
				t.Fatalf("check mask 0 checks nothing: %v", err)
			}
			// Through a stream split everywhere in a tuple.
			for cut := d.Interval - 1; cut <= d.Interval+tuple+1; cut++ {
				cfg := Config{In: d, Out: Domain{}, Check: mask}
				st, err := NewStream(&cfg)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(data))
				n1, m1, _ := st.Process(got, prot[:cut])
				n2, m2, _ := st.Process(got[n1:], prot[m1:])
				if err := st.Close(); err != nil || m1+m2 != len(prot) || n1+n2 != len(data) || string(got) != string(data) {
					t.Fatalf("cut %d: %v", cut, err)
				}
			}
		})
	}
}

func TestCRCBlockParams(t *testing.T) {
	for _, c := range []struct {
		name string
		d    Domain
		want error
	}{
		{"crc16 on crc32", Domain{Format: FormatCRC32, Guard: GuardCRC16, Interval: 512}, ErrBadGuard},
		{"crc32 on pi8", Domain{Format: FormatPI8, Guard: GuardCRC32, Type: Type1, Interval: 512}, ErrBadGuard},
		{"crc32c on crc64", Domain{Format: FormatCRC64, Guard: GuardCRC32C, Interval: 512}, ErrBadGuard},
		{"type", Domain{Format: FormatCRC32, Type: Type1, Interval: 512}, ErrBadTag},
		{"ref tag", Domain{Format: FormatCRC32, RefTag: 1, Interval: 512}, ErrBadTag},
		{"escape", Domain{Format: FormatCRC64, Escape: EscapeApp, Interval: 512}, ErrBadTag},
		{"seed", Domain{Format: FormatCRC32, Seed: 1 << 32, Interval: 512}, ErrBadTag},
		{"interval", Domain{Format: FormatCRC32, Interval: 500}, ErrBadInterval},
	} {
		if err := c.d.Validate(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	d := Domain{Format: FormatCRC32, Interval: 512}
	if err := (&Config{In: d, Check: 0x0F}).Validate(); !errors.Is(err, ErrBadMask) {
		t.Errorf("check mask 0x0F on crc32: %v", err)
	}
	// Copy between equal CRC domains: the CRC passes through.
	if err := (&Config{In: d, Out: d, Check: 0xF0, Copy: 0xF0}).Validate(); err != nil {
		t.Errorf("copy mask on crc32: %v", err)
	}
}
