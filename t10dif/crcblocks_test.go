package t10dif

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestCopyCRC16Blocks: the run-of-blocks kernel copies every block to its
// place and gives each block's CRC, as one CopyCRC16 call per block does,
// for block sizes, strides, counts, seeds and destination alignments
// around the kernel's limits (its copy stores from the first 64-byte
// aligned byte of each destination block); bytes between the output
// blocks, before the first and after the last are left alone.
func TestCopyCRC16Blocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 7))
	const slack = 128
	for _, n := range []int{64, 80, 240, 256, 272, 496, 512, 528, 4048, 4096, 4160} {
		for _, pad := range []int{0, 8, 16, 72} {
			for _, nb := range []int{1, 2, 3, 17} {
				for _, at := range []int{0, 1, 8, 40, 63} {
					t.Run(fmt.Sprintf("n=%d/pad=%d/nb=%d/at=%d", n, pad, nb, at), func(t *testing.T) {
						srcStride, dstStride := n+pad, n+(pad*3)%64
						src := randBytes(rng, (nb-1)*srcStride+n)
						whole := make([]byte, slack+(nb-1)*dstStride+n+slack)
						for i := range whole {
							whole[i] = 0xA5
						}
						// The destination starts at byte at of a 64-byte line.
						base := 64 + (at-int(uintptr(unsafe.Pointer(&whole[0]))))&63
						dst := whole[base : base+(nb-1)*dstStride+n]
						seed := uint16(rng.Uint32())
						got := make([]uint16, nb)
						if !copyCRC16Blocks(seed, dst, src, n, dstStride, srcStride, got) {
							t.Skip("no run-of-blocks kernel in the active implementation")
						}
						for i := range nb {
							blk := src[i*srcStride : i*srcStride+n]
							require.Equal(t, crc16Generic(seed, blk), got[i], "block %d CRC", i)
							require.Equal(t, blk, dst[i*dstStride:i*dstStride+n], "block %d copy", i)
							if i+1 < nb {
								for j := i*dstStride + n; j < (i+1)*dstStride; j++ {
									require.Equal(t, byte(0xA5), dst[j], "gap byte %d after block %d", j, i)
								}
							}
						}
						for j := range whole {
							if j < base || j >= base+len(dst) {
								require.Equal(t, byte(0xA5), whole[j], "byte %d outside the run", j-base)
							}
						}
					})
				}
			}
		}
	}
}

// TestCopyCRC16BlocksRefuses: sizes the kernel does not take, and buffers
// too short for the run, are refused with nothing written.
func TestCopyCRC16BlocksRefuses(t *testing.T) {
	src, dst := make([]byte, 4096), make([]byte, 4096)
	out := make([]uint16, 2)
	for _, c := range []struct {
		n, stride int
	}{{48, 48}, {72, 72}, {512, 4096}} {
		require.False(t, copyCRC16Blocks(0, dst, src, c.n, c.stride, c.stride, out), "n %d stride %d", c.n, c.stride)
	}
	require.False(t, copyCRC16Blocks(0, dst, src, 512, 512, 512, nil), "no blocks")
	require.Equal(t, make([]byte, 4096), dst)
}

// BenchmarkCopyCRC16Blocks measures the run-of-blocks kernel over 32
// blocks of 4 KiB (a 128 KiB message) for the strides the PI paths give
// it: insert (plain source, 8 bytes of PI after each destination block),
// pass (PI on both sides), aligned strides, and Go's copy of the same
// bytes as the ceiling. GB/s counts data bytes; the buffers hold data, so
// no read hits the kernel's shared zero page.
func BenchmarkCopyCRC16Blocks(b *testing.B) {
	const n, nb = 4096, 32
	for _, c := range []struct {
		name           string
		dstStr, srcStr int
	}{{"insert", n + 8, n}, {"pass", n + 8, n + 8}, {"aligned", n, n}, {"copy", 0, 0}} {
		b.Run("layout="+c.name, func(b *testing.B) {
			ds, ss := max(c.dstStr, n), max(c.srcStr, n)
			src := randBytes(rand.New(rand.NewPCG(1, 2)), nb*ss)
			dst := randBytes(rand.New(rand.NewPCG(3, 4)), nb*ds)
			var g [nb]uint16
			b.SetBytes(nb * n)
			for b.Loop() {
				if c.dstStr == 0 {
					copy(dst, src)
				} else if !copyCRC16Blocks(0, dst, src, n, ds, ss, g[:]) {
					b.Skip("no run-of-blocks kernel in the active implementation")
				}
			}
		})
	}
}
