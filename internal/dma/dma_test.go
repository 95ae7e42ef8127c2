package dma

import (
	"sync"
	"testing"
)

func TestWords(t *testing.T) {
	b := make([]byte, 16)
	StoreBE32(b[4:], 0x11223344)
	if b[4] != 0x11 || b[7] != 0x44 || LoadBE32(b[4:]) != 0x11223344 {
		t.Fatalf("StoreBE32 wrote % x", b)
	}
	StoreBytes(b[8:], [4]byte{1, 2, 3, 4})
	if b[8] != 1 || b[11] != 4 || LoadBytes(b[8:]) != [4]byte{1, 2, 3, 4} {
		t.Fatalf("StoreBytes wrote % x", b)
	}
	if Aligned(b[1:]) || Aligned(b[14:]) || !Aligned(b[12:]) {
		t.Fatal("Aligned")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("misaligned access did not panic")
		}
	}()
	LoadBE32(b[1:])
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
		if buf[i] != byte(i) {
			t.Fatal("payload not visible after the publishing word")
		}
	}
	wg.Wait()
}
