package t10dif

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The slow bitwise references. They stay here forever: every implementation
// is checked against them.

func refCRC16(crc uint16, p []byte) uint16 {
	for _, b := range p {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x8BB7
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func refCRC64NVMe(crc uint64, p []byte) uint64 {
	crc = ^crc
	for _, b := range p {
		crc ^= uint64(b)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x9A6C9329AC4BC9B5
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

// refIPChecksum is the word-by-word IP checksum (modelIPChecksum in
// pi_test.go, with no initial sum).
func refIPChecksum(p []byte) uint16 { return modelIPChecksum(0, p) }

func TestGoldenGuards(t *testing.T) {
	check := []byte("123456789")
	pattern := func(f func(i int) byte) []byte {
		b := make([]byte, 4096)
		for i := range b {
			b[i] = f(i)
		}
		return b
	}
	zeros := pattern(func(int) byte { return 0 })
	ones := pattern(func(int) byte { return 0xFF })
	inc := pattern(func(i int) byte { return byte(i) })
	dec := pattern(func(i int) byte { return 255 - byte(i) })
	for _, tc := range []struct {
		name  string
		in    []byte
		crc16 uint16
		crc64 uint64
		crc32 uint32
	}{
		// Catalogue check values (reveng), then the NVMe 1.0c 4 KiB vectors
		// cited by SPDK; CRC-16 values for those computed by the reference.
		{"check", check, 0xD0DB, 0xAE8B14860A799888, 0xE3069283},
		{"zeros4k", zeros, 0x0000, 0x6482D367EB22B64E, 0x98F94189},
		{"ones4k", ones, 0x8B5D, 0xC0DDBA7302ECA3AC, 0x25C1FE13},
		{"inc4k", inc, 0x8F6D, 0x3E729F5F6750449C, 0x9C71FE32},
		{"dec4k", dec, 0x0430, 0x9A2DF64B8E9E517E, 0x214941A8},
		{"empty", nil, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, im := range Impls() {
				assert.Equal(t, tc.crc16, im.CRC16(0, tc.in), "%s CRC16", im.Name)
				assert.Equal(t, tc.crc64, im.CRC64NVMe(0, tc.in), "%s CRC64NVMe", im.Name)
			}
			assert.Equal(t, tc.crc32, CRC32C(0, tc.in), "CRC32C")
		})
	}
	// T10/03-365 codewords.
	for _, tc := range []struct {
		in   []byte
		want uint16
	}{
		{bytes.Repeat([]byte{0}, 32), 0x0000},
		{bytes.Repeat([]byte{0xFF}, 32), 0xA293},
		{append([]byte{0xFF, 0xFF}, make([]byte, 30)...), 0x21B8},
	} {
		assert.Equal(t, tc.want, CRC16(0, tc.in), "CRC16(% x)", tc.in[:4])
	}
	// IP checksum: RFC 1071 example words and edge cases of FORMAT.md §4.1.
	for _, tc := range []struct {
		in   []byte
		want uint16
	}{
		{[]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, ^uint16(0xddf2)},
		{make([]byte, 512), 0xFFFF},
		{bytes.Repeat([]byte{0xFF}, 512), 0x0000},
		{[]byte{0x12}, ^uint16(0x1200)},
		{nil, 0xFFFF},
	} {
		assert.Equal(t, tc.want, IPChecksum(tc.in), "IPChecksum(% x)", tc.in[:min(len(tc.in), 8)])
	}
}

// The standard library agrees with our reading of CRC-64/NVME and CRC-32C.
func TestStdlibAgrees(t *testing.T) {
	tab := crc64.MakeTable(0x9A6C9329AC4BC9B5)
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 300 {
		p := randBytes(rng, n)
		c := rng.Uint64()
		require.Equal(t, crc64.Update(c, tab, p), CRC64NVMe(c, p), "n=%d CRC64NVMe vs hash/crc64", n)
		c32 := rng.Uint32()
		require.Equal(t, crc32.Update(c32, crc32.MakeTable(crc32.Castagnoli), p), CRC32C(c32, p), "n=%d CRC32C vs hash/crc32", n)
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// crossLengths bracket every cut-off of the implementations.
var crossLengths = func() []int {
	var l []int
	for n := 0; n <= 17; n++ {
		l = append(l, n)
	}
	for _, c := range []int{64, 128, 256, 512, 4096, 65536} {
		l = append(l, c-1, c, c+1)
	}
	// Lengths around the fold widths of the vector loops.
	for _, c := range []int{16, 32, 48, 80, 192, 240, 272, 320, 448, 1024} {
		l = append(l, c-1, c, c+1)
	}
	return l
}()

// TestCrossCheck runs every implementation against the bitwise reference
// at every length of crossLengths, misalignments 0–7 and random initial
// values.
func TestCrossCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	buf := randBytes(rng, 65537+8)
	dst := make([]byte, 65537+8)
	lengths := crossLengths
	if testing.Short() {
		lengths = lengths[:40]
	}
	for _, im := range Impls() {
		t.Run(im.Name, func(t *testing.T) {
			for _, n := range lengths {
				for align := range 8 {
					p := buf[align : align+n]
					c16 := uint16(rng.Uint32())
					c64 := rng.Uint64()
					want16, want64 := refCRC16(c16, p), refCRC64NVMe(c64, p)
					require.Equal(t, want16, im.CRC16(c16, p), "CRC16(%#x, len %d align %d)", c16, n, align)
					require.Equal(t, want64, im.CRC64NVMe(c64, p), "CRC64NVMe(%#x, len %d align %d)", c64, n, align)
					d := dst[(align+3)%8:][:n]
					clear(d)
					require.Equal(t, want16, im.CopyCRC16(c16, d, p), "CopyCRC16(len %d align %d)", n, align)
					require.True(t, bytes.Equal(d, p), "CopyCRC16(len %d align %d) copy", n, align)
					clear(d)
					require.Equal(t, want64, im.CopyCRC64NVMe(c64, d, p), "CopyCRC64NVMe(len %d align %d)", n, align)
					require.True(t, bytes.Equal(d, p), "CopyCRC64NVMe(len %d align %d) copy", n, align)
				}
			}
		})
	}
	t.Run("ipcsum", func(t *testing.T) {
		for _, n := range lengths {
			for align := range 8 {
				p := buf[align : align+n]
				require.Equal(t, refIPChecksum(p), IPChecksum(p), "IPChecksum(len %d align %d)", n, align)
			}
		}
	})
}

// The copy kernels leave the bytes around the destination alone and accept
// an exactly overlapping destination (operations in place).
func TestCopyKernelsBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, im := range Impls() {
		for _, n := range []int{0, 1, 15, 16, 17, 255, 256, 257, 4096, 4103} {
			src := randBytes(rng, n)
			guard := bytes.Repeat([]byte{0xA5}, n+64)
			d := guard[32 : 32+n]
			im.CopyCRC16(0, d, src)
			im.CopyCRC64NVMe(0, d, src)
			pad := bytes.Repeat([]byte{0xA5}, 32)
			require.Equal(t, pad, guard[:32], "%s n=%d wrote bytes before the destination", im.Name, n)
			require.Equal(t, pad, guard[32+n:], "%s n=%d wrote bytes after the destination", im.Name, n)
			same := append([]byte(nil), src...)
			require.Equal(t, refCRC16(0, src), im.CopyCRC16(0, same, same), "%s n=%d in-place CopyCRC16", im.Name, n)
			require.True(t, bytes.Equal(same, src), "%s n=%d in-place CopyCRC16 changed the data", im.Name, n)
		}
	}
}

// Chaining: CRC(CRC(0,a),b) == CRC(0,a‖b) at every split of a buffer.
func TestChaining(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	p := randBytes(rng, 700)
	for _, im := range Impls() {
		w16, w64 := im.CRC16(0, p), im.CRC64NVMe(0, p)
		for cut := 0; cut <= len(p); cut++ {
			require.Equal(t, w16, im.CRC16(im.CRC16(0, p[:cut]), p[cut:]), "%s CRC16 split at %d", im.Name, cut)
			require.Equal(t, w64, im.CRC64NVMe(im.CRC64NVMe(0, p[:cut]), p[cut:]), "%s CRC64 split at %d", im.Name, cut)
		}
	}
	wip := IPChecksum(p)
	for cut := 0; cut <= len(p); cut++ {
		var s ipSum
		s.update(p[:cut])
		s.update(p[cut:])
		require.Equal(t, wip, s.guard(), "ipSum split at %d", cut)
	}
}

func FuzzGuards(f *testing.F) {
	f.Add([]byte("123456789"), uint64(0), uint8(0))
	f.Add(make([]byte, 300), uint64(0xFFFF), uint8(3))
	f.Fuzz(func(t *testing.T, p []byte, seed uint64, cut uint8) {
		want16, want64, wantIP := refCRC16(uint16(seed), p), refCRC64NVMe(seed, p), refIPChecksum(p)
		c := min(int(cut), len(p))
		for _, im := range Impls() {
			require.Equal(t, want16, im.CRC16(uint16(seed), p), "%s CRC16", im.Name)
			require.Equal(t, want64, im.CRC64NVMe(seed, p), "%s CRC64", im.Name)
			require.Equal(t, want16, im.CRC16(im.CRC16(uint16(seed), p[:c]), p[c:]), "%s CRC16 chained at %d", im.Name, c)
			d := make([]byte, len(p))
			require.Equal(t, want64, im.CopyCRC64NVMe(seed, d, p), "%s CopyCRC64", im.Name)
			require.True(t, bytes.Equal(d, p), "%s CopyCRC64 copy", im.Name)
		}
		require.Equal(t, wantIP, IPChecksum(p), "IPChecksum")
	})
}

var sink uint64

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

func BenchmarkCRC16(b *testing.B) {
	buf := randBytes(rand.New(rand.NewPCG(1, 1)), 1<<20)
	for _, im := range Impls() {
		for _, n := range []int{512, 4096, 65536, 1 << 20} {
			b.Run(fmt.Sprintf("impl=%s/size=%s", im.Name, sizeName(n)), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					sink += uint64(im.CRC16(0, buf[:n]))
				}
			})
		}
	}
}

func BenchmarkCopyCRC16(b *testing.B) {
	buf := randBytes(rand.New(rand.NewPCG(1, 1)), 1<<20)
	dst := make([]byte, 1<<20)
	for _, im := range Impls() {
		for _, n := range []int{512, 4096, 65536} {
			b.Run(fmt.Sprintf("impl=%s/size=%s", im.Name, sizeName(n)), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					sink += uint64(im.CopyCRC16(0, dst[:n], buf[:n]))
				}
			})
		}
	}
}

func BenchmarkCRC64NVMe(b *testing.B) {
	buf := randBytes(rand.New(rand.NewPCG(1, 1)), 1<<20)
	for _, im := range Impls() {
		for _, n := range []int{512, 4096, 65536, 1 << 20} {
			b.Run(fmt.Sprintf("impl=%s/size=%s", im.Name, sizeName(n)), func(b *testing.B) {
				b.SetBytes(int64(n))
				for b.Loop() {
					sink += im.CRC64NVMe(0, buf[:n])
				}
			})
		}
	}
}

func BenchmarkCRC32C(b *testing.B) {
	buf := randBytes(rand.New(rand.NewPCG(1, 1)), 65536)
	for _, n := range []int{512, 4096, 65536} {
		b.Run(fmt.Sprintf("impl=stdlib/size=%s", sizeName(n)), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sink += uint64(CRC32C(0, buf[:n]))
			}
		})
	}
}

func BenchmarkIPChecksum(b *testing.B) {
	buf := randBytes(rand.New(rand.NewPCG(1, 1)), 65536)
	for _, n := range []int{512, 4096, 65536} {
		b.Run(fmt.Sprintf("impl=generic/size=%s", sizeName(n)), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sink += uint64(IPChecksum(buf[:n]))
			}
		})
	}
}
