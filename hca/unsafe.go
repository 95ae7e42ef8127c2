package hca

import "unsafe"

// addrOf returns the address of b's first byte (for alignment only).
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// privateWords returns n zeroed bytes of the device's own, aligned for
// 32- and 64-bit access (dma.Aligned), for a queue's doorbell words that no
// driver may write.
func privateWords(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n)
}
