//go:build ignore

// asm_gen writes fold_amd64.s, the carry-less-multiply folding kernels:
//
//	go run asm_gen.go
//
// One template yields eight functions: {AVX-512 VPCLMULQDQ, SSE PCLMULQDQ} ×
// {non-reflected with byte reversal (CRC-16/T10-DIF), reflected
// (CRC-64/NVME)} × {fold only, fold while copying}. The constants and the
// arithmetic behind them are in fold_amd64.go.
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

type gen struct {
	b      bytes.Buffer
	nr     bool // non-reflected: reverse the bytes of each 16-byte chunk
	copy   bool // store every loaded chunk to DI as well
	blocks bool // a run of blocks: one CRC-16 per block (avx512 only); the copy is its own aligned stream (copyStream)
	head   bool // blocks: the next load512 is a block's first chunk, stored as it is loaded
}

// stores reports whether the fold's loads store what they load: the
// one-block kernels copy that way; the blocks kernel copies in a stream of
// its own with aligned stores, and stores only its first chunk.
func (g *gen) stores() bool { return g.copy && !g.blocks }

func (g *gen) p(format string, args ...any) {
	fmt.Fprintf(&g.b, "\t"+format+"\n", args...)
}

func (g *gen) label(l string) { fmt.Fprintf(&g.b, "%s:\n", l) }

// Offsets in foldKeys (fold_amd64.go).
const (
	offShuf   = 0
	offK2048  = 64
	offK1536  = 80
	offK1024  = 96
	offK896   = 112
	offK768   = 128
	offK640   = 144
	offK512   = 160
	offK384   = 176
	offK256   = 192
	offK128   = 208
	offLanes  = 224
	offBarr   = 288
	offPoly   = 304
	offLane16 = 320 // four ZMMs of per-lane constants for x^1920 ... x^128, 0
)

// load512 loads 64 bytes at off(SI) into z, storing them to off(DI) first
// when copying, and reverses each chunk when non-reflected.
func (g *gen) load512(off int, z string) {
	g.p("VMOVDQU64 %d(SI), %s", off, z)
	if g.stores() || (g.blocks && g.head) {
		g.p("VMOVDQU64 %s, %d(DI)", z, off)
		g.head = false
	}
	if g.nr {
		g.p("VPSHUFB Z31, %s, %s", z, z)
	}
}

// fold512 sets acc = acc·K + data, K broadcast in k.
func (g *gen) fold512(acc, k, data, tmp string) {
	g.p("VPCLMULQDQ $0x00, %s, %s, %s", k, acc, tmp)
	g.p("VPCLMULQDQ $0x11, %s, %s, %s", k, acc, acc)
	g.p("VPTERNLOGQ $0x96, %s, %s, %s", tmp, data, acc)
}

func (g *gen) advance(n int) {
	g.p("ADDQ $%d, SI", n)
	if g.stores() {
		g.p("ADDQ $%d, DI", n)
	}
	g.p("SUBQ $%d, CX", n)
}

func (g *gen) header(name string) {
	fmt.Fprintf(&g.b, "\n// func %s(", name)
	if g.copy {
		g.b.WriteString("dst, ")
	}
	g.b.WriteString("src *byte, n int, k *foldKeys, init, out *[2]uint64)\n")
	size := 40
	if g.copy {
		size = 48
	}
	fmt.Fprintf(&g.b, "TEXT ·%s(SB), NOSPLIT, $0-%d\n", name, size)
	off := 0
	if g.copy {
		g.p("MOVQ dst+0(FP), DI")
		off = 8
	}
	g.p("MOVQ src+%d(FP), SI", off)
	g.p("MOVQ n+%d(FP), CX", off+8)
	g.p("MOVQ k+%d(FP), AX", off+16)
	g.p("MOVQ init+%d(FP), BX", off+24)
	g.p("MOVQ out+%d(FP), DX", off+32)
}

// blocksHeader starts a kernel over a run of blocks:
//
//	func name(dst, src *byte, n, dstStride, srcStride, nb int, k *foldKeys, init *[2]uint64, out *uint16)
//
// nb ≥ 1 blocks of n bytes (n ≥ 64, a multiple of 16), block i at
// src + i·srcStride, copied to dst + i·dstStride; the CRC of each, from
// the register in init, goes to out[i]. R8..R13 hold n, the strides, the
// count and the next block's addresses; each block runs the one-block
// body with CX, SI and DI set.
func (g *gen) blocksHeader(name string) {
	fmt.Fprintf(&g.b, "\n// func %s(dst, src *byte, n, dstStride, srcStride, nb int, k *foldKeys, init *[2]uint64, out *uint16)\n", name)
	fmt.Fprintf(&g.b, "TEXT ·%s(SB), NOSPLIT, $0-72\n", name)
	g.p("MOVQ dst+0(FP), R12")
	g.p("MOVQ src+8(FP), R11")
	g.p("MOVQ n+16(FP), R8")
	g.p("MOVQ dstStride+24(FP), R9")
	g.p("MOVQ srcStride+32(FP), DX")
	g.p("MOVQ nb+40(FP), R10")
	g.p("MOVQ k+48(FP), AX")
	g.p("MOVQ init+56(FP), BX")
	g.p("MOVQ out+64(FP), R13")
	g.label(name + "_block")
	g.p("MOVQ R8, CX")
	g.p("MOVQ R11, SI")
	g.p("MOVQ R12, DI")
	// R14: the copy stream's offset in the block, from the first
	// 64-byte-aligned byte of the destination (copyStream).
	g.p("MOVQ R12, R14")
	g.p("NEGQ R14")
	g.p("ANDQ $63, R14")
}

// copyStream is the blocks kernel's copy, apart from the fold so that its
// stores are aligned: the destinations of PI blocks (4096 data bytes and 8
// of PI) are 8-byte aligned only, and a 64-byte store that straddles two
// cache lines costs as much as two. The block's first 64 bytes are stored
// as they are loaded (the head, unaligned); from the first aligned byte of
// the destination, at offset R14, each round of the 256-byte fold loop
// copies the 256 bytes one round behind the fold (so never past the
// block's end, and from lines the fold has just loaded); at the block's end
// copyRest copies what is left in 64-byte chunks and stores its last 64
// bytes (the tail, unaligned). Together: [0,64) ∪ [R14, n-64] ∪ [n-64, n),
// all of the block as R14 < 64.
func (g *gen) copyStream() {
	for i := range 4 {
		g.p("VMOVDQU64 %d(R11)(R14*1), Z%d", 64*i, 12+i)
	}
	for i := range 4 {
		g.p("VMOVDQA64 Z%d, %d(R12)(R14*1)", 12+i, 64*i)
	}
	g.p("ADDQ $256, R14")
}

// copyRest ends a block's copy stream (copyStream); it may use SI, DI and
// CX, the fold being done.
func (g *gen) copyRest(name string) {
	L := func(s string) string { return name + "_" + s }
	g.p("LEAQ (R11)(R14*1), SI")
	g.p("LEAQ (R12)(R14*1), DI")
	g.p("MOVQ R8, CX")
	g.p("SUBQ R14, CX")
	g.label(L("copy64"))
	g.p("CMPQ CX, $64")
	g.p("JB %s", L("copytail"))
	g.p("VMOVDQU64 (SI), Z16")
	g.p("VMOVDQA64 Z16, (DI)")
	g.p("ADDQ $64, SI")
	g.p("ADDQ $64, DI")
	g.p("SUBQ $64, CX")
	g.p("JMP %s", L("copy64"))
	g.label(L("copytail"))
	g.p("VMOVDQU64 -64(R11)(R8*1), Z16")
	g.p("VMOVDQU64 Z16, -64(R12)(R8*1)")
}

// avx512 emits a kernel for n >= 64, n a multiple of 16.
func (g *gen) avx512(name string) {
	if g.blocks {
		g.blocksHeader(name)
	} else {
		g.header(name)
	}
	L := func(s string) string { return name + "_" + s }
	if g.nr {
		g.p("VMOVDQU64 %d(AX), Z31", offShuf)
	}
	g.p("VMOVDQU64 (BX), X30") // EVEX load zeroes the upper lanes
	g.p("CMPQ CX, $256")
	g.p("JB %s", L("small"))

	// Four accumulators, 256 bytes per round.
	g.head = g.blocks
	for i := range 4 {
		g.load512(64*i, fmt.Sprintf("Z%d", i))
	}
	g.p("VPXORQ Z30, Z0, Z0")
	g.advance(256)
	g.p("VBROADCASTI32X4 %d(AX), Z29", offK2048)
	g.label(L("loop256"))
	g.p("CMPQ CX, $256")
	g.p("JB %s", L("reduce4"))
	for i := range 4 {
		g.load512(64*i, fmt.Sprintf("Z%d", 4+i))
	}
	for i := range 4 {
		g.fold512(fmt.Sprintf("Z%d", i), "Z29", fmt.Sprintf("Z%d", 4+i), fmt.Sprintf("Z%d", 8+i))
	}
	if g.blocks {
		g.copyStream()
	}
	g.advance(256)
	g.p("JMP %s", L("loop256"))

	// With fewer than 64 bytes left, fold all sixteen lanes straight onto
	// the last one: lane j of the four accumulators by x^(128·(15-j)).
	g.label(L("reduce4"))
	g.p("CMPQ CX, $64")
	g.p("JAE %s", L("reduce4wide"))
	for i := range 4 {
		g.p("VMOVDQU64 %d(AX), Z%d", offLane16+64*i, 24+i)
	}
	for i := range 4 {
		g.p("VPCLMULQDQ $0x00, Z%d, Z%d, Z%d", 24+i, i, 8+2*i)
		g.p("VPCLMULQDQ $0x11, Z%d, Z%d, Z%d", 24+i, i, 9+2*i)
	}
	g.p("VPTERNLOGQ $0x96, Z8, Z9, Z10")
	g.p("VPTERNLOGQ $0x96, Z11, Z12, Z13")
	g.p("VPTERNLOGQ $0x96, Z14, Z15, Z10")
	g.p("VPXORQ Z13, Z10, Z8")
	g.p("JMP %s", L("hsum"))

	// Otherwise Z3 += Z0·x^1536 + Z1·x^1024 + Z2·x^512, then 64-byte folds.
	g.label(L("reduce4wide"))
	g.p("VBROADCASTI32X4 %d(AX), Z28", offK1536)
	g.p("VBROADCASTI32X4 %d(AX), Z27", offK1024)
	g.p("VBROADCASTI32X4 %d(AX), Z26", offK512)
	for i, k := range []string{"Z28", "Z27", "Z26"} {
		g.p("VPCLMULQDQ $0x00, %s, Z%d, Z%d", k, i, 8+2*i)
		g.p("VPCLMULQDQ $0x11, %s, Z%d, Z%d", k, i, 9+2*i)
	}
	g.p("VPTERNLOGQ $0x96, Z8, Z9, Z10")
	g.p("VPTERNLOGQ $0x96, Z11, Z12, Z13")
	g.p("VPTERNLOGQ $0x96, Z10, Z13, Z3")
	g.p("VMOVDQA64 Z3, Z0")
	g.p("JMP %s", L("loop64"))

	// 64 <= n < 256: one accumulator from the start.
	g.label(L("small"))
	g.head = g.blocks
	g.load512(0, "Z0")
	g.p("VPXORQ Z30, Z0, Z0")
	g.advance(64)
	g.p("VBROADCASTI32X4 %d(AX), Z26", offK512)
	g.label(L("loop64"))
	g.p("CMPQ CX, $64")
	g.p("JB %s", L("lanes"))
	g.load512(0, "Z4")
	g.fold512("Z0", "Z26", "Z4", "Z8")
	g.advance(64)
	g.p("JMP %s", L("loop64"))

	// Fold lanes 0..2 onto lane 3 (x^384, x^256, x^128) and add them up.
	g.label(L("lanes"))
	g.p("VMOVDQU64 %d(AX), Z25", offLanes)
	g.p("VPCLMULQDQ $0x00, Z25, Z0, Z8")
	g.p("VPCLMULQDQ $0x11, Z25, Z0, Z9")
	g.p("VPXORQ Z8, Z9, Z8")
	g.p("VMOVDQA64 Z0, Z3")
	// Z8 holds folded lanes, lane 3 of Z3 the unfolded last chunk.
	g.label(L("hsum"))
	g.p("VEXTRACTI64X4 $1, Z8, Y9")
	g.p("VPXORQ Y9, Y8, Y8")
	g.p("VEXTRACTI32X4 $1, Y8, X9")
	g.p("VEXTRACTI32X4 $3, Z3, X10")
	g.p("VPTERNLOGQ $0x96, X9, X10, X8")
	g.p("VMOVDQA64 X8, X0")

	// Remaining 16-byte chunks.
	g.p("VMOVDQU64 %d(AX), X24", offK128)
	g.label(L("loop16"))
	g.p("CMPQ CX, $16")
	g.p("JB %s", L("done"))
	g.p("VMOVDQU64 (SI), X4")
	if g.stores() {
		g.p("VMOVDQU64 X4, (DI)")
	}
	if g.nr {
		g.p("VPSHUFB X31, X4, X4")
	}
	g.fold512("X0", "X24", "X4", "X8")
	g.advance(16)
	g.p("JMP %s", L("loop16"))
	g.label(L("done"))
	if g.nr {
		g.barrettAVX()
	}
	if g.blocks {
		// The block's CRC-16 to out[i]; on to the next block.
		g.p("VMOVQ X0, CX")
		g.p("MOVW CX, (R13)")
		g.p("ADDQ $2, R13")
		g.copyRest(name)
		g.p("ADDQ DX, R11")
		g.p("ADDQ R9, R12")
		g.p("DECQ R10")
		g.p("JNZ %s", L("block"))
	} else {
		g.p("VMOVDQU64 X0, (DX)")
	}
	g.p("VZEROUPPER")
	g.p("RET")
}

// barrettAVX reduces the non-reflected accumulator X0 = H·x^64 + L to the
// CRC register X0·x^w mod P, left in the low w bits of X0: S = H·(x^(64+w)
// mod P) + L·x^w has degree < 64+w and the same remainder; with S1 =
// floor(S/x^w), S0 = S mod x^w and μ = floor(x^(64+w)/P),
// q = S1 + floor(S1·(μ - x^64)/x^64) is floor(S1·x^w/P) and the CRC is
// S0 + (q·(P - x^w) mod x^w). w = 16, so shifts by 2 bytes.
func (g *gen) barrettAVX() {
	g.p("VMOVDQU64 %d(AX), X23", offBarr) // {x^(64+w) mod P, μ - x^64}
	g.p("VMOVDQU64 %d(AX), X22", offPoly) // {P - x^w, 0}
	g.p("VPCLMULQDQ $0x01, X23, X0, X1")  // H·(x^80 mod P)
	g.p("VMOVQ X0, X2")
	g.p("VPSLLDQ $2, X2, X2")            // L·x^16
	g.p("VPXORQ X2, X1, X1")             // S
	g.p("VPSRLDQ $2, X1, X3")            // S1
	g.p("VPCLMULQDQ $0x10, X23, X3, X4") // S1·μ'
	g.p("VPSRLDQ $8, X4, X4")
	g.p("VPXORQ X3, X4, X4")             // q
	g.p("VPCLMULQDQ $0x00, X22, X4, X5") // q·(P - x^w)
	g.p("VPXORQ X5, X1, X0")             // low 16 bits: the CRC
}

// barrettSSE is barrettAVX in legacy SSE encodings, on X8.
func (g *gen) barrettSSE() {
	g.p("MOVOU %d(AX), X2", offBarr)
	g.p("MOVOU %d(AX), X3", offPoly)
	g.p("MOVOA X8, X1")
	g.p("PCLMULQDQ $0x01, X2, X1") // H·(x^80 mod P)
	g.p("MOVQ X8, X0")
	g.p("PSLLDQ $2, X0")
	g.p("PXOR X0, X1") // S
	g.p("MOVOA X1, X4")
	g.p("PSRLDQ $2, X4") // S1
	g.p("MOVOA X4, X5")
	g.p("PCLMULQDQ $0x10, X2, X5") // S1·μ'
	g.p("PSRLDQ $8, X5")
	g.p("PXOR X4, X5")             // q
	g.p("PCLMULQDQ $0x00, X3, X5") // q·(P - x^w)
	g.p("PXOR X1, X5")
	g.p("MOVOA X5, X8")
}

// sse emits a PCLMULQDQ kernel for n >= 16, n a multiple of 16, using
// legacy SSE encodings only (SSSE3 PSHUFB, PCLMULQDQ).
func (g *gen) sse(name string) {
	g.header(name)
	L := func(s string) string { return name + "_" + s }
	// X8..X15 are accumulators 0..7, X0 data, X1 temp, X2 constants,
	// X3 shuffle mask, X4 init.
	load := func(off int, x string) {
		g.p("MOVOU %d(SI), %s", off, x)
		if g.copy {
			g.p("MOVOU %s, %d(DI)", x, off)
		}
		if g.nr {
			g.p("PSHUFB X3, %s", x)
		}
	}
	fold := func(acc, k, data string) {
		g.p("MOVOA %s, X1", acc)
		g.p("PCLMULQDQ $0x00, %s, %s", k, acc)
		g.p("PCLMULQDQ $0x11, %s, X1", k)
		g.p("PXOR X1, %s", acc)
		g.p("PXOR %s, %s", data, acc)
	}
	if g.nr {
		g.p("MOVOU %d(AX), X3", offShuf)
	}
	g.p("MOVOU (BX), X4")
	g.p("CMPQ CX, $128")
	g.p("JB %s", L("small"))
	for i := range 8 {
		load(16*i, fmt.Sprintf("X%d", 8+i))
	}
	g.p("PXOR X4, X8")
	g.advance(128)
	g.p("MOVOU %d(AX), X2", offK1024)
	g.label(L("loop128"))
	g.p("CMPQ CX, $128")
	g.p("JB %s", L("reduce8"))
	for i := range 8 {
		load(16*i, "X0")
		fold(fmt.Sprintf("X%d", 8+i), "X2", "X0")
	}
	g.advance(128)
	g.p("JMP %s", L("loop128"))

	// X15 += X8·x^896 + X9·x^768 + ... + X14·x^128.
	g.label(L("reduce8"))
	for i, off := range []int{offK896, offK768, offK640, offK512, offK384, offK256, offK128} {
		acc := fmt.Sprintf("X%d", 8+i)
		g.p("MOVOU %d(AX), X2", off)
		g.p("MOVOA %s, X1", acc)
		g.p("PCLMULQDQ $0x00, X2, %s", acc)
		g.p("PCLMULQDQ $0x11, X2, X1")
		g.p("PXOR X1, X15")
		g.p("PXOR %s, X15", acc)
	}
	g.p("MOVOA X15, X8")
	g.p("JMP %s", L("tail"))

	g.label(L("small"))
	load(0, "X8")
	g.p("PXOR X4, X8")
	g.advance(16)
	g.label(L("tail"))
	g.p("MOVOU %d(AX), X2", offK128)
	g.label(L("loop16"))
	g.p("CMPQ CX, $16")
	g.p("JB %s", L("done"))
	load(0, "X0")
	fold("X8", "X2", "X0")
	g.advance(16)
	g.p("JMP %s", L("loop16"))
	g.label(L("done"))
	if g.nr {
		g.barrettSSE()
	}
	g.p("MOVOU X8, (DX)")
	g.p("RET")
}

func main() {
	var out bytes.Buffer
	out.WriteString(`// Code generated by asm_gen.go; DO NOT EDIT.

//go:build !purego

#include "textflag.h"
`)
	for _, isa := range []string{"AVX512", "PCLMUL"} {
		for _, kind := range []struct {
			name string
			nr   bool
		}{{"fold16", true}, {"fold64", false}} {
			for _, cp := range []bool{false, true} {
				g := &gen{nr: kind.nr, copy: cp}
				name := kind.name
				if cp {
					name += "Copy"
				}
				name += isa
				if isa == "AVX512" {
					g.avx512(name)
				} else {
					g.sse(name)
				}
				out.Write(g.b.Bytes())
			}
		}
	}
	// CRC-16 over runs of blocks, copying them (the PI paths' whole blocks).
	g := &gen{nr: true, copy: true, blocks: true}
	g.avx512("fold16CopyBlocksAVX512")
	out.Write(g.b.Bytes())
	if err := os.WriteFile("fold_amd64.s", []byte(strings.ReplaceAll(out.String(), "\t\n", "\n")), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
