package t10dif

import (
	"hash/crc32"
)

// Dispatch contract with the architecture files.
//
// Each architecture file (guard_amd64.go; guard_other.go for everything
// else and for the purego tag) defines
//
//	func archImpls() []Impl
//	func archCRC16(id implID, crc uint16, p []byte) uint16
//	func archCopyCRC16(id implID, crc uint16, dst, src []byte) uint16
//	func archCRC64(id implID, crc uint64, p []byte) uint64
//	func archCopyCRC64(id implID, crc uint64, dst, src []byte) uint64
//	func archCopyCRC16Blocks(id implID, crc uint16, dst, src []byte, n, dstStride, srcStride int, out []uint16) bool
//
// archImpls returns the assembly implementations this CPU can run, fastest
// first, each with every function set and a non-zero id; it is called once,
// at package initialisation. init puts them in front of the generic
// implementation, and the first entry becomes the one the package uses.
// archCopyCRC16Blocks runs a whole run of blocks in one call where the
// implementation can, and reports false otherwise.
// The arch* functions run the implementation with that id; they are only
// called with ids archImpls returned. The package calls them, not the
// function values of Impl, because a call through a function value makes
// escape analysis move every buffer passed to the heap. Implementations must
// give results identical to the generic one for every input (the tests
// cross-check them against the bitwise reference).

// Impl is one implementation of the CRC kernels. [Impls] lists those this
// machine can run; tests and benchmarks use it to exercise each one.
type Impl struct {
	// Name identifies the implementation: "generic", "pclmul", "avx512".
	Name string
	// CRC16 is [CRC16] in this implementation.
	CRC16 func(crc uint16, p []byte) uint16
	// CopyCRC16 copies src to dst (len(dst) >= len(src)) and returns
	// CRC16(crc, src), in one pass over the data.
	CopyCRC16 func(crc uint16, dst, src []byte) uint16
	// CRC64NVMe is [CRC64NVMe] in this implementation.
	CRC64NVMe func(crc uint64, p []byte) uint64
	// CopyCRC64NVMe copies src to dst (len(dst) >= len(src)) and returns
	// CRC64NVMe(crc, src), in one pass over the data.
	CopyCRC64NVMe func(crc uint64, dst, src []byte) uint64

	id implID // 0 for the generic implementation
}

// implID identifies an implementation for the arch* dispatch functions.
type implID uint8

var (
	impls  []Impl
	active Impl
	useID  implID // active.id
)

func init() {
	impls = append(archImpls(), genericImpl)
	active = impls[0]
	useID = active.id
}

var genericImpl = Impl{
	Name:          "generic",
	CRC16:         crc16Generic,
	CopyCRC16:     copyCRC16Generic,
	CRC64NVMe:     crc64Generic,
	CopyCRC64NVMe: copyCRC64Generic,
}

// Impls returns the CRC implementations this machine can run, the one the
// package uses first. The slice is a copy.
func Impls() []Impl { return append([]Impl(nil), impls...) }

// ActiveImpl returns the name of the implementation the package uses.
func ActiveImpl() string { return active.Name }

// CRC16 returns the CRC-16/T10-DIF of p (polynomial 0x8BB7, initial value
// 0, no reflection, no final XOR), continuing from crc, the result of a
// previous call (0 to start). CRC16(0, []byte("123456789")) == 0xD0DB.
func CRC16(crc uint16, p []byte) uint16 {
	if useID == 0 {
		return crc16Generic(crc, p)
	}
	return archCRC16(useID, crc, p)
}

// CRC64NVMe returns the CRC-64/NVME of p (the NVMe 64b guard: reflected
// polynomial 0x9A6C9329AC4BC9B5, initial value and final XOR all ones),
// continuing from crc, the result of a previous call (0 to start), as
// hash/crc64 does. CRC64NVMe(0, []byte("123456789")) == 0xAE8B14860A799888.
func CRC64NVMe(crc uint64, p []byte) uint64 {
	if useID == 0 {
		return crc64Generic(crc, p)
	}
	return archCRC64(useID, crc, p)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the CRC-32C (Castagnoli, CRC-32/ISCSI) of p, continuing
// from crc, the result of a previous call (0 to start), as hash/crc32 does.
// The standard library's implementation is used; it has its own assembly.
func CRC32C(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }

// IPChecksum returns the IP-checksum guard of p: the ones' complement of the
// ones' complement sum of p taken as big-endian 16-bit words (an odd last
// byte is paired with 0x00), as Linux ip_compute_csum stores it. The guard
// of an all-zero block is 0xFFFF.
func IPChecksum(p []byte) uint16 {
	var s ipSum
	s.update(p)
	return s.guard()
}

// copyCRC16 copies src to dst and returns CRC16(crc, src).
func copyCRC16(crc uint16, dst, src []byte) uint16 {
	if useID == 0 {
		return copyCRC16Generic(crc, dst, src)
	}
	return archCopyCRC16(useID, crc, dst, src)
}

// copyCRC16Blocks copies len(out) blocks of n bytes, block i from
// src[i·srcStride:] to dst[i·dstStride:], and stores CRC16(crc, block i)
// in out[i], in one call to the kernel; false (nothing done) where the
// active implementation has none.
func copyCRC16Blocks(crc uint16, dst, src []byte, n, dstStride, srcStride int, out []uint16) bool {
	if useID == 0 {
		return false
	}
	return archCopyCRC16Blocks(useID, crc, dst, src, n, dstStride, srcStride, out)
}

// copyCRC64NVMe copies src to dst and returns CRC64NVMe(crc, src).
func copyCRC64NVMe(crc uint64, dst, src []byte) uint64 {
	if useID == 0 {
		return copyCRC64Generic(crc, dst, src)
	}
	return archCopyCRC64(useID, crc, dst, src)
}
