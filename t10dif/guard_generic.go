package t10dif

import (
	"encoding/binary"
	"math/bits"
)

// Portable implementations: slicing-by-16 tables indexed by bytes, built
// once at initialisation, and a 64-bit end-around-carry IP checksum.

const (
	crc16Poly     = 0x8BB7             // CRC-16/T10-DIF, normal form
	crc64NVMePoly = 0x9A6C9329AC4BC9B5 // CRC-64/NVME, reflected form
)

// crc16Tab[k][b] is the CRC-16 register after byte b followed by k zero
// bytes, starting from 0.
var crc16Tab = func() *[16][256]uint16 {
	t := new([16][256]uint16)
	for b := range 256 {
		r := uint16(b) << 8
		for range 8 {
			if r&0x8000 != 0 {
				r = r<<1 ^ crc16Poly
			} else {
				r <<= 1
			}
		}
		t[0][b] = r
	}
	for k := 1; k < 16; k++ {
		for b := range 256 {
			v := t[k-1][b]
			t[k][b] = v<<8 ^ t[0][v>>8]
		}
	}
	return t
}()

// crc64Tab[k][b] is the reflected CRC-64/NVME register after byte b followed
// by k zero bytes, starting from 0.
var crc64Tab = func() *[16][256]uint64 {
	t := new([16][256]uint64)
	for b := range 256 {
		r := uint64(b)
		for range 8 {
			if r&1 != 0 {
				r = r>>1 ^ crc64NVMePoly
			} else {
				r >>= 1
			}
		}
		t[0][b] = r
	}
	for k := 1; k < 16; k++ {
		for b := range 256 {
			v := t[k-1][b]
			t[k][b] = v>>8 ^ t[0][byte(v)]
		}
	}
	return t
}()

func crc16Generic(crc uint16, p []byte) uint16 {
	t := crc16Tab
	for len(p) >= 16 {
		// Only the first two bytes depend on crc: XOR the other fourteen
		// first, in a shallow tree, so the loop-carried chain stays short.
		a := binary.BigEndian.Uint64(p)
		b := binary.BigEndian.Uint64(p[8:])
		x := (t[13][byte(a>>40)] ^ t[12][byte(a>>32)]) ^ (t[11][byte(a>>24)] ^ t[10][byte(a>>16)]) ^
			(t[9][byte(a>>8)] ^ t[8][byte(a)]) ^ (t[7][b>>56] ^ t[6][byte(b>>48)]) ^
			(t[5][byte(b>>40)] ^ t[4][byte(b>>32)]) ^ (t[3][byte(b>>24)] ^ t[2][byte(b>>16)]) ^
			(t[1][byte(b>>8)] ^ t[0][byte(b)])
		a ^= uint64(crc) << 48
		crc = x ^ t[15][a>>56] ^ t[14][byte(a>>48)]
		p = p[16:]
	}
	for _, b := range p {
		crc = crc<<8 ^ t[0][byte(crc>>8)^b]
	}
	return crc
}

func crc64Generic(crc uint64, p []byte) uint64 { return ^crc64Update(^crc, p) }

// crc64Update advances the reflected CRC-64/NVME register crc over p,
// without the initial and final inversions.
func crc64Update(crc uint64, p []byte) uint64 {
	t := crc64Tab
	for len(p) >= 16 {
		// The second word does not depend on crc: XOR its lookups first.
		b := binary.LittleEndian.Uint64(p[8:])
		x := (t[7][byte(b)] ^ t[6][byte(b>>8)]) ^ (t[5][byte(b>>16)] ^ t[4][byte(b>>24)]) ^
			(t[3][byte(b>>32)] ^ t[2][byte(b>>40)]) ^ (t[1][byte(b>>48)] ^ t[0][b>>56])
		a := binary.LittleEndian.Uint64(p) ^ crc
		crc = x ^ (t[15][byte(a)] ^ t[14][byte(a>>8)]) ^ (t[13][byte(a>>16)] ^ t[12][byte(a>>24)]) ^
			(t[11][byte(a>>32)] ^ t[10][byte(a>>40)]) ^ (t[9][byte(a>>48)] ^ t[8][a>>56])
		p = p[16:]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return crc
}

func copyCRC16Generic(crc uint16, dst, src []byte) uint16 {
	copy(dst, src)
	return crc16Generic(crc, src)
}

func copyCRC64Generic(crc uint64, dst, src []byte) uint64 {
	copy(dst, src)
	return crc64Generic(crc, src)
}

// ipSum is a running ones' complement sum of big-endian 16-bit words that
// can be fed bytes split anywhere. The zero value is an empty sum.
type ipSum struct {
	s   uint64 // 64-bit ones' complement accumulator
	odd bool   // an odd number of bytes has been added
}

// update adds p to the sum.
func (x *ipSum) update(p []byte) {
	if len(p) == 0 {
		return
	}
	if x.odd {
		// p[0] is the low byte of a word whose high byte came before.
		x.add(uint64(p[0]))
		p = p[1:]
		x.odd = false
	}
	n := len(p) &^ 1
	x.s = ipSumWords(x.s, p[:n])
	if n < len(p) {
		x.add(uint64(p[n]) << 8)
		x.odd = true
	}
}

func (x *ipSum) add(v uint64) {
	var c uint64
	x.s, c = bits.Add64(x.s, v, 0)
	x.s += c
}

// fold returns the 16-bit ones' complement sum.
func (x *ipSum) fold() uint16 { return foldSum(x.s) }

// guard returns the IP-checksum guard: the complemented sum.
func (x *ipSum) guard() uint16 { return ^x.fold() }

func foldSum(s uint64) uint16 {
	s = s>>32 + s&0xFFFFFFFF // at most 33 bits
	s = s>>32 + s&0xFFFFFFFF // at most 32 bits
	s = s>>16 + s&0xFFFF     // at most 17 bits
	s = s>>16 + s&0xFFFF     // 16 bits
	return uint16(s)
}

// ipSumWords adds p (even length, starting on a word boundary) to the 64-bit
// ones' complement accumulator s. Summing 64-bit big-endian words with
// end-around carry and folding at the end gives the same 16-bit sum as
// summing 16-bit words (RFC 1071).
func ipSumWords(s uint64, p []byte) uint64 {
	var c uint64
	for len(p) >= 32 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(p), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(p[8:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(p[16:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(p[24:]), c)
		p = p[32:]
	}
	for len(p) >= 8 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(p), c)
		p = p[8:]
	}
	for len(p) >= 2 {
		s, c = bits.Add64(s, uint64(binary.BigEndian.Uint16(p)), c)
		p = p[2:]
	}
	s, c = bits.Add64(s, c, 0)
	return s + c
}
