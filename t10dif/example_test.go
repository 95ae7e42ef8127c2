package t10dif_test

import (
	"bytes"
	"errors"
	"fmt"
	"log"

	"github.com/hcasim/hcasim/t10dif"
)

// Insert T10 PI: four 512-byte blocks become four 520-byte blocks, each
// with its tuple (guard, app tag, ref tag) after its data.
func ExampleGenerate() {
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: 512, RefTag: 0x1000, AppTag: 0x42}
	data := bytes.Repeat([]byte("hcasim! "), 4*512/8)
	prot := make([]byte, 4*d.BlockSize())
	n, err := t10dif.Generate(d, t10dif.Buf{Data: prot}, data)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "bytes")
	for b := range 4 {
		tuple := prot[b*d.BlockSize()+512 : (b+1)*d.BlockSize()]
		fmt.Printf("block %d: % x\n", b, tuple)
	}
	// Output:
	// 2080 bytes
	// block 0: c5 6a 00 42 00 00 10 00
	// block 1: c5 6a 00 42 00 00 10 01
	// block 2: c5 6a 00 42 00 00 10 02
	// block 3: c5 6a 00 42 00 00 10 03
}

// Verify protected data, then corrupt one byte: the mismatch is an *Error
// that says which block and what was expected, and matches ErrGuard.
func ExampleVerify() {
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: 512}
	prot := make([]byte, 4*d.BlockSize())
	if _, err := t10dif.Generate(d, t10dif.Buf{Data: prot}, make([]byte, 4*512)); err != nil {
		log.Fatal(err)
	}
	fmt.Println(t10dif.Verify(d, t10dif.CheckAll, t10dif.Buf{Data: prot}))

	prot[2*d.BlockSize()+7] ^= 0x80 // a data byte of block 2
	err := t10dif.Verify(d, t10dif.CheckAll, t10dif.Buf{Data: prot})
	fmt.Println(err)
	var e *t10dif.Error
	if errors.As(err, &e) {
		fmt.Println(e.Type, e.Block, e.ProtectedOffset, errors.Is(err, t10dif.ErrGuard))
	}
	// Output:
	// <nil>
	// t10dif: guard check failed at block 2 (offset 1024): expected 0x8f3b, actual 0x0
	// guard 2 1040 true
}

// A Stream gives the one-shot result for input and output in pieces split
// anywhere, here 100 bytes of input at a time into 64-byte output pieces.
func ExampleStream() {
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: 512}
	data := bytes.Repeat([]byte{0xA5}, 3*512)

	s, err := t10dif.NewStream(&t10dif.Config{Out: d}) // generate
	if err != nil {
		log.Fatal(err)
	}
	var out []byte
	piece := make([]byte, 64)
	for src := data; ; {
		nd, ns, err := s.Process(piece, src[:min(100, len(src))])
		if err != nil {
			log.Fatal(err)
		}
		out = append(out, piece[:nd]...)
		src = src[ns:]
		if nd == 0 && ns == 0 {
			break // all input consumed and all output taken
		}
	}
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}

	oneShot := make([]byte, 3*d.BlockSize())
	if _, err := t10dif.Generate(d, t10dif.Buf{Data: oneShot}, data); err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(out), bytes.Equal(out, oneShot))
	// Output:
	// 1560 true
}
