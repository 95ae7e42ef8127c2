package t10dif

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCopyCRC16Blocks: the run-of-blocks kernel copies every block to its
// place and gives each block's CRC, as one CopyCRC16 call per block does,
// for block sizes, strides, counts and seeds around the kernel's limits;
// bytes between the output blocks are left alone.
func TestCopyCRC16Blocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 7))
	for _, n := range []int{64, 80, 512, 528, 4096} {
		for _, pad := range []int{0, 8, 16, 72} {
			for _, nb := range []int{1, 2, 3, 17} {
				t.Run(fmt.Sprintf("n=%d/pad=%d/nb=%d", n, pad, nb), func(t *testing.T) {
					srcStride, dstStride := n+pad, n+(pad*3)%64
					src := randBytes(rng, (nb-1)*srcStride+n)
					dst := make([]byte, (nb-1)*dstStride+n)
					for i := range dst {
						dst[i] = 0xA5
					}
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
				})
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
