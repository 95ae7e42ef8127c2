// Package dma has the few accessors the device and the driver need on
// shared host memory: 32-bit big-endian words read and written atomically.
//
// The driver and the device touch the same rings from different goroutines
// (and, over the socket, from different processes). Like hardware and a
// driver with memory barriers, they hand a ring entry over with one
// atomic word: the writer fills the entry, then stores the word that
// publishes it (a doorbell-record counter, a CQE's owner word); the reader
// loads that word, then reads the entry. The atomic operations give Go's
// memory model (and the race detector) the happens-before edge that the
// hardware's ordering gives.
package dma

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"unsafe"
)

// ErrAlign reports a buffer that cannot hold atomic words.
var ErrAlign = errors.New("dma: word not 4-byte aligned")

// Aligned reports whether b starts on a 4-byte boundary and holds a word.
func Aligned(b []byte) bool {
	return len(b) >= 4 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 == 0
}

func word(b []byte) *uint32 {
	if !Aligned(b) {
		panic(ErrAlign)
	}
	return (*uint32)(unsafe.Pointer(unsafe.SliceData(b)))
}

// LoadBE32 atomically loads the big-endian word at b, which must be
// Aligned (checked by the caller when the buffer was set up).
func LoadBE32(b []byte) uint32 {
	v := atomic.LoadUint32(word(b))
	var x [4]byte
	binary.NativeEndian.PutUint32(x[:], v)
	return binary.BigEndian.Uint32(x[:])
}

// StoreBE32 atomically stores v big-endian at b, which must be Aligned.
func StoreBE32(b []byte, v uint32) {
	var x [4]byte
	binary.BigEndian.PutUint32(x[:], v)
	atomic.StoreUint32(word(b), binary.NativeEndian.Uint32(x[:]))
}

// StoreBytes atomically stores the 4 bytes w at b (in memory order), which
// must be Aligned: the last word of a CQE or WQE, say, that publishes it.
func StoreBytes(b []byte, w [4]byte) {
	atomic.StoreUint32(word(b), binary.NativeEndian.Uint32(w[:]))
}

// LoadBytes atomically loads the 4 bytes at b (in memory order).
func LoadBytes(b []byte) [4]byte {
	var x [4]byte
	binary.NativeEndian.PutUint32(x[:], atomic.LoadUint32(word(b)))
	return x
}
