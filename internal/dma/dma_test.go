package dma

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWords(t *testing.T) {
	b := make([]byte, 16)
	StoreBE32(b[4:], 0x11223344)
	require.Equal(t, []byte{0x11, 0x22, 0x33, 0x44}, b[4:8], "StoreBE32")
	require.Equal(t, uint32(0x11223344), LoadBE32(b[4:]), "LoadBE32")
	StoreBytes(b[8:], [4]byte{1, 2, 3, 4})
	require.Equal(t, []byte{1, 2, 3, 4}, b[8:12], "StoreBytes")
	require.Equal(t, [4]byte{1, 2, 3, 4}, LoadBytes(b[8:]), "LoadBytes")
	require.False(t, Aligned(b[1:]), "Aligned(b[1:])")
	require.False(t, Aligned(b[14:]), "Aligned(b[14:])")
	require.True(t, Aligned(b[12:]), "Aligned(b[12:])")
	require.Panics(t, func() { LoadBE32(b[1:]) }, "misaligned access")
}

// A publish/consume hand-off is race-free under the race detector.
func TestHandOff(t *testing.T) {
	buf := make([]byte, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 60 {
			buf[i] = byte(i)
		}
		StoreBE32(buf[60:], 1)
	}()
	for LoadBE32(buf[60:]) != 1 {
	}
	for i := range 60 {
		require.Equal(t, byte(i), buf[i], "payload byte %d not visible after the publishing word", i)
	}
	wg.Wait()
}
