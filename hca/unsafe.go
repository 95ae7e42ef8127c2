package hca

import "unsafe"

// addrOf returns the address of b's first byte (for alignment only).
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
