package t10dif

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// Fuzz targets of the PI engine. Each iteration is kept cheap: a few blocks
// of at most a few KiB, because every result is also computed by the
// bitwise reference model.

// fuzzData repeats (or cuts) b to n bytes.
func fuzzData(b []byte, n int) []byte {
	d := make([]byte, n)
	if len(b) == 0 {
		return d
	}
	for i := 0; i < n; i += len(b) {
		copy(d[i:], b)
	}
	return d
}

// FuzzGenerateVerify: a domain drawn from the fuzzer's bytes; verifying
// the output of Generate finds nothing under any check mask, stripping it
// gives the data back, Pass copies it unchanged, GenerateInPlace
// reproduces it, and it is what the model generates.
func FuzzGenerateVerify(f *testing.F) {
	f.Add([]byte{}, []byte("123456789"))
	f.Add([]byte{1, 4, 0, 1, 0, 0}, []byte{0xAB, 0xAC, 0xAD})
	f.Fuzz(func(t *testing.T, params, data []byte) {
		ch := &byteChooser{b: params}
		fm := randFormat(ch)
		iv := pick(ch, 8, 16, 24, 64, 512, 520, 4096)
		d := randDomain(ch, fm, iv)
		nb := ch.intn(4)
		if iv >= 4096 {
			nb = min(nb, 1)
		}
		require.NoError(t, d.Validate(), "domain %+v", d)
		data = fuzzData(data, nb*iv)
		s := mkSide(d)
		want := modelBuild(d, data, nil)
		gen := Buf{Data: make([]byte, len(want.Data))}
		if d.Separate {
			gen.Meta = make([]byte, len(want.Meta))
		}
		fillJunk(gen.Data)
		fillJunk(gen.Meta)
		n, err := Generate(d, gen, data)
		require.NoError(t, err, "Generate")
		require.Equal(t, len(want.Data), n, "Generate length")
		require.True(t, bytes.Equal(gen.Data, want.Data), "Generate data differs from the model")
		require.True(t, bytes.Equal(gen.Meta, want.Meta), "Generate metadata differs from the model")
		for _, m := range []CheckMask{CheckAll, randMask(ch, fm), CheckGuard, CheckAppTag | CheckRefTag} {
			require.NoError(t, Verify(d, m, gen), "Verify(%#02x) of generated PI", uint8(m))
		}
		back := make([]byte, len(data))
		n, err = Strip(d, CheckAll, back, gen)
		require.NoError(t, err, "Strip")
		require.Equal(t, len(data), n, "Strip length")
		require.True(t, bytes.Equal(back, data), "Strip does not give the data back")
		pass := cloneBuf(gen)
		clear(pass.Data)
		clear(pass.Meta)
		n, err = Pass(d, CheckAll, pass, gen)
		require.NoError(t, err, "Pass")
		require.Equal(t, len(gen.Data), n, "Pass length")
		require.True(t, bytes.Equal(pass.Data, gen.Data), "Pass changed the data")
		require.True(t, bytes.Equal(pass.Meta, gen.Meta), "Pass changed the metadata")
		// Junk in the tuples (only), then generate in place.
		inPlace := cloneBuf(gen)
		for b := range nb {
			var m []byte
			if d.Separate {
				m = inPlace.Meta[b*s.meta:][:s.meta]
			} else {
				m = inPlace.Data[b*s.unit()+iv:][:s.meta]
			}
			fillJunk(m[s.piOff : s.piOff+s.tuple])
		}
		require.NoError(t, GenerateInPlace(d, inPlace), "GenerateInPlace")
		require.True(t, bytes.Equal(inPlace.Data, gen.Data), "GenerateInPlace data differs from Generate")
		require.True(t, bytes.Equal(inPlace.Meta, gen.Meta), "GenerateInPlace metadata differs from Generate")
		// A flipped data bit is a guard error at its block, unless the
		// block is escaped.
		if nb > 0 {
			bad := cloneBuf(gen)
			blk := ch.intn(nb)
			bad.Data[blk*s.unit()+ch.intn(iv)] ^= 1 << ch.intn(8)
			c := Config{In: d, Check: CheckAll, Discard: true}
			require.Empty(t, sameErr(Verify(d, CheckAll, bad), modelApply(&c, bad).err), "flipped data bit in block %d", blk)
		}
	})
}

// FuzzStreamSplits: a configuration and input drawn from the fuzzer's
// bytes, input and output offered in the piece sizes of splits; the stream
// gives exactly the one-shot result.
func FuzzStreamSplits(f *testing.F) {
	f.Add([]byte{}, []byte{}, []byte{1})
	f.Add([]byte{3, 1, 4, 1, 5, 9, 2, 6}, []byte("data"), []byte{1, 7, 0, 200})
	f.Fuzz(func(t *testing.T, cfg, data, splits []byte) {
		ch := &byteChooser{b: cfg}
		c, n := genConfig(ch, 2048)
		src := buildInput(ch, &c, fuzzData(data, n))
		sizes := func(odd int) pieces {
			k := odd
			return func() int {
				if len(splits) == 0 {
					return 1
				}
				v := int(splits[k%len(splits)])
				k += 2
				switch {
				case v == 0:
					return 1 << 20
				case v >= 0xF0:
					return (v - 0xEF) * 512 // whole blocks
				}
				return v
			}
		}
		streamVsApply(t, &c, src, sizes(0), sizes(1), "fuzz")
	})
}

// fuzzDomain decodes a domain from the fuzzer's bytes without keeping it
// valid: every field may be out of range.
func fuzzDomain(ch *byteChooser) Domain {
	var d Domain
	d.Format = Format(pick(ch, 0, 1, 2, 1, 2, 3, 4, 5, 255))
	if d.Format == FormatNone && ch.intn(4) != 0 {
		d.Separate = ch.intn(8) == 0
		return d
	}
	d.Guard = GuardType(ch.intn(6))
	d.Type = DIFType(ch.intn(5))
	d.Interval = pick(ch, 8, 16, 24, 64, 512, 520, 0, -8, 4, 12, 4100, MaxInterval, MaxInterval+8, 8*ch.intn(300))
	d.MetaSize = pick(ch, 0, 0, 7, 8, 9, 15, 16, 17, 128, MaxMetaSize, MaxMetaSize+1, -1, ch.intn(64))
	d.PIFirst = ch.intn(2) == 0
	d.Separate = ch.intn(3) == 0
	d.RefTag = pick(ch, 0, 1, 1<<32-1, 1<<32, 1<<48-1, 1<<48, ch.u64())
	d.Ref = RefMode(ch.intn(5))
	d.AppTag = uint16(ch.u64())
	d.AppTagMask = uint16(ch.u64())
	d.Escape = Escape(ch.intn(6))
	d.Seed = pick(ch, 0, 0xFFFF, 0x10000, ^uint64(0), ch.u64())
	if d.Format.IsCRC() && ch.intn(4) != 0 {
		// Mostly valid CRC domains: no type, tags or escapes.
		d.Type, d.RefTag, d.AppTag, d.AppTagMask, d.Ref, d.Escape = 0, 0, 0, 0, RefDefault, EscapeDefault
		d.Guard = GuardType(pick(ch, 0, 4, 5, 6, 1))
		d.Seed = pick(ch, 0, 0xFFFFFFFF, ^uint64(0), ch.u64())
	}
	return d
}

// FuzzApply: arbitrary Config fields and buffers. Apply never panics; its
// error is nil, an *Error or a parameter error; Validate agrees with it;
// when it reports no parameter error its output is the model's and a
// stream gives the same.
func FuzzApply(f *testing.F) {
	f.Add([]byte{1, 1, 0, 1, 4}, []byte("0123456789abcdef"), []byte{}, uint16(64), uint16(0))
	f.Add([]byte{2, 0, 1, 1, 4, 0}, make([]byte, 528), []byte{}, uint16(600), uint16(32))
	f.Fuzz(func(t *testing.T, raw, srcData, srcMeta []byte, dstLen, dstMetaLen uint16) {
		if len(srcData) > 4096 || len(srcMeta) > 1024 {
			return
		}
		ch := &byteChooser{b: raw}
		c := Config{In: fuzzDomain(ch), Out: fuzzDomain(ch)}
		c.Check, c.Copy = CheckMask(ch.next()), CheckMask(ch.next())
		c.Discard = ch.intn(4) == 0
		src := Buf{Data: srcData}
		if ch.intn(2) == 0 {
			src.Meta = srcMeta
		}
		dst := Buf{Data: make([]byte, int(dstLen)%8192)}
		if dstMetaLen != 0 {
			dst.Meta = make([]byte, int(dstMetaLen)%2048)
		}
		fillJunk(dst.Data)
		fillJunk(dst.Meta)
		junk := cloneBuf(dst)
		verr := c.Validate()
		n, err := Apply(&c, dst, src)
		var pe *Error
		switch {
		case err == nil || errors.As(err, &pe):
			require.NoError(t, verr, "%s: Validate fails, Apply succeeded", describe(&c, len(srcData)))
			require.NotErrorIs(t, err, ErrParam, "a PI error matches ErrParam")
		case errors.Is(err, ErrParam):
			// The same parameter error as Validate, or a length error.
			matched := false
			for _, s := range paramSentinels {
				if errors.Is(err, s) {
					matched = true
					if verr == nil && s != ErrBadLength && s != ErrShortBuffer {
						t.Fatalf("%s: Validate ok, Apply %v", describe(&c, len(srcData)), err)
					}
					if verr != nil && !errors.Is(verr, s) {
						t.Fatalf("%s: Validate %v, Apply %v", describe(&c, len(srcData)), verr, err)
					}
				}
			}
			require.True(t, matched, "parameter error %v matches no specific sentinel", err)
			require.Zero(t, n, "parameter error %v: bytes written", err)
			return
		default:
			t.Fatalf("Apply error %v is neither a PI error nor a parameter error", err)
		}
		want := modelApply(&c, src)
		desc := describe(&c, len(srcData))
		require.Empty(t, sameErr(err, want.err), desc)
		require.Equal(t, len(want.data), n, "%s: output length", desc)
		require.True(t, bytes.Equal(dst.Data[:n], want.data), "%s: output differs from the model", desc)
		require.True(t, bytes.Equal(dst.Data[n:], junk.Data[n:]), "%s: output written beyond its length", desc)
		if want.meta != nil && (!bytes.Equal(dst.Meta[:len(want.meta)], want.meta) ||
			!bytes.Equal(dst.Meta[len(want.meta):], junk.Meta[len(want.meta):])) {
			t.Fatalf("%s: output metadata differs from the model", desc)
		}
		if want.meta == nil {
			require.True(t, bytes.Equal(dst.Meta, junk.Meta), "%s: output metadata written without a separate output", desc)
		}
		streamVsApply(t, &c, src, fixedPieces(1+ch.intn(600)), fixedPieces(1+ch.intn(600)), "fuzz")
	})
}

var paramSentinels = []error{ErrBadFormat, ErrBadGuard, ErrBadType, ErrBadInterval, ErrBadMetaSize, ErrBadEscape,
	ErrBadRefMode, ErrBadTag, ErrBadMask, ErrBadLayout, ErrBadLength, ErrShortBuffer, ErrPartialBlock}

// FuzzStreamProcessBlock: blocks handed over as data and metadata apart
// (ProcessBlock, falling back to Process), with the output in the
// fuzzer's pieces, give what Apply gives.
func FuzzStreamProcessBlock(f *testing.F) {
	f.Add([]byte{}, []byte{}, uint16(0))
	f.Add([]byte{3, 1, 4, 1, 5, 9, 2, 6}, []byte("data"), uint16(4104))
	f.Fuzz(func(t *testing.T, cfg, data []byte, outPiece uint16) {
		ch := &byteChooser{b: cfg}
		c, n := genConfig(ch, 2048)
		if !c.In.HasPI() || c.In.Separate {
			return
		}
		src := buildInput(ch, &c, fuzzData(data, n))
		want := modelApply(&c, src)
		sd := outBufs(want)
		whole := 0
		sn, serr := streamBlocks(t, &c, sd, src, fixedPieces(max(int(outPiece), 1)), &whole)
		require.Empty(t, sameErr(serr, want.err), describe(&c, len(src.Data)))
		require.Empty(t, compareOut(want, sd, sn), describe(&c, len(src.Data)))
	})
}
