package t10dif

import (
	"encoding/binary"
	"hash/crc32"
	"hash/crc64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		assert.Equal(t, c.want, a.value(), "%v seed all ones", c.g)
	}
	// Seed 0: init 0, still the final complement.
	var a guardAcc
	a.reset(GuardCRC32, 0)
	a.update(check)
	assert.Equal(t, uint64(crc32.Update(0xFFFFFFFF, crc32.IEEETable, check)), a.value(), "crc32 seed 0")
	a.reset(GuardCRC64XP10, 0)
	a.update(check)
	assert.Equal(t, crc64.Update(^uint64(0), crc64.MakeTable(crc64.ECMA), check), a.value(), "crc64xp10 seed 0")
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
			_, err := Generate(d, Buf{Data: prot}, data)
			require.NoError(t, err)
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
				require.Equal(t, want, got, "block %d: CRC", b)
			}
			mask := d.Format.GuardMask()
			require.NoError(t, Verify(d, mask, Buf{Data: prot}), "verify")
			out := make([]byte, len(data))
			_, err = Strip(d, mask, out, Buf{Data: prot})
			require.NoError(t, err, "strip")
			require.True(t, string(out) == string(data), "strip: output differs from the data")
			bad := append([]byte(nil), prot...)
			bad[2*(d.Interval+tuple)+7] ^= 1
			var e *Error
			err = Verify(d, mask, Buf{Data: bad})
			require.ErrorAs(t, err, &e, "corrupted block 2")
			require.Equal(t, ErrorGuard, e.Type, "corrupted block 2: %v", err)
			require.EqualValues(t, 2, e.Block, "corrupted block 2: %v", err)
			require.NoError(t, Verify(d, 0, Buf{Data: bad}), "check mask 0 checks nothing")
			// Through a stream split everywhere in a tuple.
			for cut := d.Interval - 1; cut <= d.Interval+tuple+1; cut++ {
				cfg := Config{In: d, Out: Domain{}, Check: mask}
				st, err := NewStream(&cfg)
				require.NoError(t, err)
				got := make([]byte, len(data))
				n1, m1, _ := st.Process(got, prot[:cut])
				n2, m2, _ := st.Process(got[n1:], prot[m1:])
				require.NoError(t, st.Close(), "cut %d", cut)
				require.Equal(t, len(prot), m1+m2, "cut %d: bytes in", cut)
				require.Equal(t, len(data), n1+n2, "cut %d: bytes out", cut)
				require.True(t, string(got) == string(data), "cut %d: output differs from the data", cut)
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
		assert.ErrorIs(t, c.d.Validate(), c.want, c.name)
	}
	d := Domain{Format: FormatCRC32, Interval: 512}
	assert.ErrorIs(t, (&Config{In: d, Check: 0x0F}).Validate(), ErrBadMask, "check mask 0x0F on crc32")
	// Copy between equal CRC domains: the CRC passes through.
	assert.NoError(t, (&Config{In: d, Out: d, Check: 0xF0, Copy: 0xF0}).Validate(), "copy mask on crc32")
}
