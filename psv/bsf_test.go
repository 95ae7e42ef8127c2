package psv

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The worked example of mlx5-integrity.md §2.5: PASS, 512 B blocks, 4096 B
// data, PSVs 0x10/0x11, ref 0x1000, app 0, mask 0xFFFF, ref_remap and
// app_escape, check_mask 0xCF.
func TestBSFWorkedExample(t *testing.T) {
	b, _ := hex.DecodeString(strings.Join(strings.Fields(`
		90 CF FF 01  00 00 10 00  00 00 00 11  00 00 00 10
		00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00
		C0 00 00 00  00 00 10 00  01 80 00 00  00 41 FF FF
		C0 00 00 00  00 00 10 00  01 80 00 00  00 41 FF FF`), ""))
	dom := InlineFields{Valid: true, Refresh: true, AppTag: 0, RefTag: 0x1000, SigType: SigTypeCRC,
		RepeatBlock: true, IncRefTag: true, Escape: EscapeApp, AppTagMask: 0xFFFF}
	want := BSFFields{Size: BSFWithInline, SBS: true, CheckMask: 0xCF, WireByte: 0xFF, MemSelector: 1,
		RawDataSize: 4096, WirePSV: 0x11, MemPSV: 0x10, Wire: dom, Mem: dom}
	require.NoError(t, BSF(b).Validate())
	require.Equal(t, want, BSF(b).Fields(), "decoded")
	n, ok := BlockSize(want.MemSelector)
	require.True(t, ok, "selector 1")
	require.Equal(t, 512, n, "selector 1")
	enc := make(BSF, BSFSize)
	enc.Encode(&want)
	require.Equal(t, b, []byte(enc), "encoded")
}

func TestSelectors(t *testing.T) {
	for iv, sel := range map[int]uint8{512: 1, 520: 2, 4096: 3, 4160: 4, 1 << 30: 5, 4048: 6, 1024: 0} {
		assert.Equal(t, sel, Selector(iv), "Selector(%d)", iv)
		if n, ok := BlockSize(sel); sel != 0 {
			assert.True(t, ok, "BlockSize(%d)", sel)
			assert.Equal(t, iv, n, "BlockSize(%d)", sel)
		}
	}
}

func TestBSFRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	inl := func() InlineFields {
		return InlineFields{Valid: rng.IntN(2) == 0, Refresh: rng.IntN(2) == 0, AppTag: uint16(rng.Uint32()), RefTag: rng.Uint32(),
			SigType: uint8(rng.Uint32()), RepeatBlock: rng.IntN(2) == 0, Seed: rng.IntN(2) == 0, IncRefTag: rng.IntN(2) == 0,
			Escape: uint8(rng.IntN(4)), AppTagMask: uint16(rng.Uint32())}
	}
	for range 1000 {
		f := BSFFields{Size: uint8(rng.IntN(4)), SBS: rng.IntN(2) == 0, CheckMask: uint8(rng.Uint32()), WireByte: uint8(rng.Uint32()),
			MemSelector: uint8(rng.Uint32()), RawDataSize: rng.Uint32(), WireBFS: uint8(rng.Uint32()), WirePSV: rng.Uint32() & 0xFFFFFF,
			MemBFS: uint8(rng.Uint32()), MemPSV: rng.Uint32() & 0xFFFFFF,
			Ext: [4]uint32{rng.Uint32(), rng.Uint32(), rng.Uint32(), rng.Uint32()}, Wire: inl(), Mem: inl()}
		b := make(BSF, BSFSize)
		b.Encode(&f)
		require.Equal(t, f, b.Fields(), "round trip")
	}
}

func FuzzBSF(f *testing.F) {
	f.Add(bytes.Repeat([]byte{0x90}, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < BSFSize {
			return
		}
		v := BSF(b[:BSFSize])
		fl := v.Fields()
		enc := make(BSF, BSFSize)
		enc.Encode(&fl)
		require.Equal(t, fl, enc.Fields(), "decode∘encode∘decode changed the fields")
		_ = v.Validate()
	})
}
