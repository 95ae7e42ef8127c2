//go:build !purego

package t10dif

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The assembly addresses foldKeys by the offsets fixed in asm_gen.go.
func TestFoldKeysLayout(t *testing.T) {
	var k foldKeys
	for _, c := range []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"shuf", unsafe.Offsetof(k.shuf), 0},
		{"k2048", unsafe.Offsetof(k.k2048), 64},
		{"k1536", unsafe.Offsetof(k.k1536), 80},
		{"k1024", unsafe.Offsetof(k.k1024), 96},
		{"k896", unsafe.Offsetof(k.k896), 112},
		{"k768", unsafe.Offsetof(k.k768), 128},
		{"k640", unsafe.Offsetof(k.k640), 144},
		{"k512", unsafe.Offsetof(k.k512), 160},
		{"k384", unsafe.Offsetof(k.k384), 176},
		{"k256", unsafe.Offsetof(k.k256), 192},
		{"k128", unsafe.Offsetof(k.k128), 208},
		{"lanes", unsafe.Offsetof(k.lanes), 224},
		{"barrett", unsafe.Offsetof(k.barrett), 288},
		{"poly", unsafe.Offsetof(k.poly), 304},
		{"lane16", unsafe.Offsetof(k.lane16), 320},
	} {
		assert.Equal(t, c.want, c.got, "foldKeys.%s offset (expected: asm_gen.go's)", c.name)
	}
}

// barrettMu is floor(x^(64+w)/P) - x^64: check q·P + r == x^(64+w).
func TestBarrettMu(t *testing.T) {
	mu := barrettMu(16, crc16Poly)
	// Multiply (x^64 + mu) by P = x^16 + 0x8BB7 and compare with x^80
	// modulo a remainder of degree < 16: the product's bits 16 and up
	// must be exactly x^80.
	var hi, lo uint64 // 128-bit product of (mu) and P, plus x^64·P
	for i := range 64 {
		if mu>>i&1 != 0 {
			p := uint64(1)<<16 | crc16Poly
			lo ^= p << i
			if i > 0 {
				hi ^= p >> (64 - i)
			}
		}
	}
	hi ^= uint64(1)<<16 | crc16Poly // x^64·P
	require.Equal(t, uint64(1<<16), hi, "(x^64+mu)·P = %#x:%#x, want x^80 plus a remainder below x^16", hi, lo)
	require.Zero(t, lo>>16, "(x^64+mu)·P = %#x:%#x, want x^80 plus a remainder below x^16", hi, lo)
}
