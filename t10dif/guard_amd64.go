//go:build !purego

package t10dif

import (
	"encoding/binary"
	"math/bits"

	"golang.org/x/sys/cpu"
)

//go:generate go run asm_gen.go

// Carry-less-multiply folding (Intel, "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ", 2009), in the generated fold_amd64.s.
//
// A kernel keeps 128-bit accumulators congruent, modulo the CRC polynomial
// P, to the message folded so far, and folds an accumulator forward by D
// bits with two 64×64 carry-less products: for an accumulator H·x^64 + L,
// H·(x^(D+64) mod P) + L·(x^D mod P) ≡ (H·x^64 + L)·x^D. The kernels take
// whole 16-byte chunks and return one 128-bit accumulator; the Go side
// reduces it to a CRC with one slicing-by-16 step of the table code, which
// is exact: the CRC register after bytes B from zero is B(x)·x^w mod P. The
// non-reflected kernels instead finish with a Barrett reduction (exact for
// polynomials): for Z of degree < 64, with μ = floor(x^(64+w)/P),
// q = floor(Z·μ/x^64) = Z + floor(Z·(μ-x^64)/x^64) and the CRC of Z·x^w
// is the low w bits of q·(P - x^w) (asm_gen.go has the details).
//
// Non-reflected CRCs (CRC-16/T10-DIF) reverse the bytes of each chunk so
// that bit i of the register is the coefficient of x^i; a constant for a
// qword is x^k mod P itself. Reflected CRCs (CRC-64/NVME) load chunks as
// they are, bit i being the coefficient of x^(127-i); the product of two
// reflected qwords is the reflected product times x, so a constant is
// bit-reversed x^(k-1) mod P, and the high-degree qword is the low one.
//
// The initial CRC value is XORed into the first chunk (init), which is what
// a CRC register's initial value means for messages of at least w bits.

// foldKeys are a kernel's constants; the offsets are fixed in asm_gen.go.
// Each pair is {multiplier of the low qword, multiplier of the high qword}
// of an accumulator, for a fold distance of the given number of bits.
type foldKeys struct {
	shuf  [64]byte // byte reversal within each 16-byte lane (non-reflected)
	k2048 [2]uint64
	k1536 [2]uint64
	k1024 [2]uint64
	k896  [2]uint64
	k768  [2]uint64
	k640  [2]uint64
	k512  [2]uint64
	k384  [2]uint64
	k256  [2]uint64
	k128  [2]uint64
	lanes [4][2]uint64 // x^384, x^256, x^128 and zero, for the four lanes of a ZMM
	// Barrett reduction of a non-reflected accumulator to the CRC:
	// {x^(64+w) mod P, floor(x^(64+w)/P) - x^64} and {P - x^w, 0}.
	barrett [2]uint64
	poly    [2]uint64
	// lane16[r][l] folds lane l of accumulator r of the 256-byte loop onto
	// the last lane: x^(128·(15-4r-l)), zero for the last lane itself.
	lane16 [4][4][2]uint64
}

// xPowMod returns x^k mod P for a polynomial of degree deg whose low
// coefficients are poly (normal form: bit i is the coefficient of x^i).
func xPowMod(k, deg int, poly uint64) uint64 {
	r := uint64(1)
	top := uint64(1) << (deg - 1)
	mask := top<<1 - 1
	for range k {
		carry := r & top
		r = r << 1 & mask
		if carry != 0 {
			r ^= poly
		}
	}
	return r
}

// barrettMu returns floor(x^(64+deg)/P) without its x^64 term, for P of
// degree deg <= 32 with low coefficients poly.
func barrettMu(deg int, poly uint64) uint64 {
	// Long division of x^(64+deg) by P, one quotient bit at a time.
	var q uint64
	r := uint64(1) << deg // the running remainder's top deg+1 bits
	full := uint64(1)<<deg | poly
	for i := 64; i >= 0; i-- {
		if r&(1<<deg) != 0 {
			if i < 64 {
				q |= 1 << i
			}
			r ^= full
		}
		r <<= 1
	}
	return q
}

func makeKeys(nr bool, deg int, poly uint64) *foldKeys {
	k := new(foldKeys)
	pair := func(d int) [2]uint64 {
		if nr {
			return [2]uint64{xPowMod(d, deg, poly), xPowMod(d+64, deg, poly)}
		}
		return [2]uint64{bits.Reverse64(xPowMod(d+63, deg, poly)), bits.Reverse64(xPowMod(d-1, deg, poly))}
	}
	k.k2048, k.k1536, k.k1024, k.k896 = pair(2048), pair(1536), pair(1024), pair(896)
	k.k768, k.k640, k.k512, k.k384 = pair(768), pair(640), pair(512), pair(384)
	k.k256, k.k128 = pair(256), pair(128)
	k.lanes = [4][2]uint64{k.k384, k.k256, k.k128, {}}
	for r := range 4 {
		for l := range 4 {
			if d := 128 * (15 - 4*r - l); d > 0 {
				k.lane16[r][l] = pair(d)
			}
		}
	}
	if nr {
		k.barrett = [2]uint64{xPowMod(64+deg, deg, poly), barrettMu(deg, poly)}
		k.poly = [2]uint64{poly, 0}
	}
	for i := range k.shuf {
		k.shuf[i] = byte(15 - i%16)
	}
	return k
}

var (
	keys16 = makeKeys(true, 16, crc16Poly)
	// CRC-64/NVME in normal form: the bit reversal of the reflected polynomial.
	keys64 = makeKeys(false, 64, bits.Reverse64(crc64NVMePoly))
)

//go:noescape
func fold16AVX512(src *byte, n int, k *foldKeys, init, out *[2]uint64)

//go:noescape
func fold16CopyAVX512(dst, src *byte, n int, k *foldKeys, init, out *[2]uint64)

//go:noescape
func fold64AVX512(src *byte, n int, k *foldKeys, init, out *[2]uint64)

//go:noescape
func fold64CopyAVX512(dst, src *byte, n int, k *foldKeys, init, out *[2]uint64)

//go:noescape
func fold16PCLMUL(src *byte, n int, k *foldKeys, init, out *[2]uint64)

//go:noescape
func fold16CopyPCLMUL(dst, src *byte, n int, k *foldKeys, init, out *[2]uint64)

//go:noescape
func fold64PCLMUL(src *byte, n int, k *foldKeys, init, out *[2]uint64)

//go:noescape
func fold64CopyPCLMUL(dst, src *byte, n int, k *foldKeys, init, out *[2]uint64)

//go:noescape
func fold16CopyBlocksAVX512(dst, src *byte, n, dstStride, srcStride, nb int, k *foldKeys, init *[2]uint64, out *uint16)

// archCopyCRC16Blocks copies nb blocks of n bytes, block i from
// src[i·srcStride:] to dst[i·dstStride:], and stores the CRC-16 of each,
// from crc, in out[i]. It reports false, having done nothing, when the
// implementation has no kernel for it (n must be at least 64 and a
// multiple of 16); the caller then goes block by block.
func archCopyCRC16Blocks(id implID, crc uint16, dst, src []byte, n, dstStride, srcStride int, out []uint16) bool {
	nb := len(out)
	if isa(id-1) != isaAVX512 || n < minAVX512 || n%16 != 0 || nb == 0 ||
		len(src) < (nb-1)*srcStride+n || len(dst) < (nb-1)*dstStride+n {
		return false
	}
	init := [2]uint64{0, uint64(crc) << 48}
	fold16CopyBlocksAVX512(&dst[0], &src[0], n, dstStride, srcStride, nb, keys16, &init, &out[0])
	return true
}

// Below these lengths the table code is as fast as setting up the vectors.
const (
	minAVX512 = 64
	minPCLMUL = 32
)

// crc64Acc reduces a reflected accumulator to the (uninverted) register.
func crc64Acc(acc *[2]uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], acc[0])
	binary.LittleEndian.PutUint64(b[8:], acc[1])
	return crc64Update(0, b[:])
}

// isa selects a family of kernels.
type isa uint8

const (
	isaAVX512 isa = iota
	isaPCLMUL
)

// The kernels are called directly, not through function values, so that
// escape analysis sees //go:noescape and init and out stay on the stack.

func fold16(k isa, src *byte, n int, init, out *[2]uint64) {
	if k == isaAVX512 {
		fold16AVX512(src, n, keys16, init, out)
	} else {
		fold16PCLMUL(src, n, keys16, init, out)
	}
}

func fold16Copy(k isa, dst, src *byte, n int, init, out *[2]uint64) {
	if k == isaAVX512 {
		fold16CopyAVX512(dst, src, n, keys16, init, out)
	} else {
		fold16CopyPCLMUL(dst, src, n, keys16, init, out)
	}
}

func fold64(k isa, src *byte, n int, init, out *[2]uint64) {
	if k == isaAVX512 {
		fold64AVX512(src, n, keys64, init, out)
	} else {
		fold64PCLMUL(src, n, keys64, init, out)
	}
}

func fold64Copy(k isa, dst, src *byte, n int, init, out *[2]uint64) {
	if k == isaAVX512 {
		fold64CopyAVX512(dst, src, n, keys64, init, out)
	} else {
		fold64CopyPCLMUL(dst, src, n, keys64, init, out)
	}
}

// minLen returns the length below which the table code is used.
func minLen(k isa) int {
	if k == isaAVX512 {
		return minAVX512
	}
	return minPCLMUL
}

func archCRC16(id implID, crc uint16, p []byte) uint16 {
	k := isa(id - 1)
	if len(p) < minLen(k) {
		return crc16Generic(crc, p)
	}
	n := len(p) &^ 15
	init, acc := [2]uint64{0, uint64(crc) << 48}, [2]uint64{}
	fold16(k, &p[0], n, &init, &acc)
	return crc16Generic(uint16(acc[0]), p[n:])
}

func archCopyCRC16(id implID, crc uint16, dst, src []byte) uint16 {
	k := isa(id - 1)
	if len(src) < minLen(k) {
		return copyCRC16Generic(crc, dst, src)
	}
	n := len(src) &^ 15
	dst = dst[:len(src)]
	init, acc := [2]uint64{0, uint64(crc) << 48}, [2]uint64{}
	fold16Copy(k, &dst[0], &src[0], n, &init, &acc)
	copy(dst[n:], src[n:])
	return crc16Generic(uint16(acc[0]), src[n:])
}

func archCRC64(id implID, crc uint64, p []byte) uint64 {
	k := isa(id - 1)
	if len(p) < minLen(k) {
		return crc64Generic(crc, p)
	}
	n := len(p) &^ 15
	init, acc := [2]uint64{^crc, 0}, [2]uint64{}
	fold64(k, &p[0], n, &init, &acc)
	return ^crc64Update(crc64Acc(&acc), p[n:])
}

func archCopyCRC64(id implID, crc uint64, dst, src []byte) uint64 {
	k := isa(id - 1)
	if len(src) < minLen(k) {
		return copyCRC64Generic(crc, dst, src)
	}
	n := len(src) &^ 15
	dst = dst[:len(src)]
	init, acc := [2]uint64{^crc, 0}, [2]uint64{}
	fold64Copy(k, &dst[0], &src[0], n, &init, &acc)
	copy(dst[n:], src[n:])
	return ^crc64Update(crc64Acc(&acc), src[n:])
}

func newImpl(name string, k isa) Impl {
	id := implID(k) + 1
	return Impl{
		Name:          name,
		id:            id,
		CRC16:         func(crc uint16, p []byte) uint16 { return archCRC16(id, crc, p) },
		CopyCRC16:     func(crc uint16, dst, src []byte) uint16 { return archCopyCRC16(id, crc, dst, src) },
		CRC64NVMe:     func(crc uint64, p []byte) uint64 { return archCRC64(id, crc, p) },
		CopyCRC64NVMe: func(crc uint64, dst, src []byte) uint64 { return archCopyCRC64(id, crc, dst, src) },
	}
}

var (
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
		cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasPCLMULQDQ
	hasPCLMUL = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSSE3 && cpu.X86.HasSSE41
)

// archImpls implements the dispatch contract in guard.go.
func archImpls() []Impl {
	var l []Impl
	if hasAVX512 {
		l = append(l, newImpl("avx512", isaAVX512))
	}
	if hasPCLMUL {
		l = append(l, newImpl("pclmul", isaPCLMUL))
	}
	return l
}
