package t10dif

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pieces yields successive piece sizes (each at least 1).
type pieces func() int

func fixedPieces(n int) pieces { return func() int { return n } }

func randPieces(rng *rand.Rand, max int) pieces {
	return func() int {
		switch rng.IntN(8) {
		case 0:
			return 1
		case 1:
			return 1 + rng.IntN(16)
		case 2:
			return max + rng.IntN(max+1) // large
		}
		return 1 + rng.IntN(max)
	}
}

// cutPieces yields the pieces between the cut positions, then rest for
// everything after the last cut.
func cutPieces(cuts []int, rest pieces) pieces {
	prev, i := 0, 0
	return func() int {
		for i < len(cuts) {
			c := cuts[i]
			i++
			if c > prev {
				n := c - prev
				prev = c
				return n
			}
		}
		return rest()
	}
}

// fieldCuts returns every field boundary of the first two blocks of a
// domain's main buffer, and the byte after each (1-byte pieces there): data
// start and middle, data/metadata edge, metadata before the tuple, guard,
// app tag, ref tag, metadata after the tuple.
func fieldCuts(d Domain, plainInterval int) []int {
	var cuts []int
	add := func(v ...int) { cuts = append(cuts, v...) }
	if !d.HasPI() {
		iv := plainInterval
		for b := range 2 {
			base := b * iv
			add(base+1, base+iv/2, base+iv-1, base+iv)
		}
		return cuts
	}
	s := mkSide(d)
	for b := range 2 {
		base := b * s.unit()
		add(base+1, base+2, base+s.interval/2, base+s.interval-1, base+s.interval)
		if s.separate {
			continue
		}
		m := base + s.interval
		t := m + s.piOff
		add(m+1, t-1, t, t+1, t+s.gl-1, t+s.gl, t+s.gl+1, t+s.gl+2, t+s.gl+3, t+s.tuple-1, t+s.tuple,
			m+s.meta-1, m+s.meta)
	}
	slices.Sort(cuts)
	return slices.Compact(cuts)
}

// streamPieces runs c through a Stream, offering the input and the output
// in pieces. It returns the bytes written and Close's error (or the first
// error of Process).
func streamPieces(t *testing.T, c *Config, dst, src Buf, in, out pieces) (int, error) {
	t.Helper()
	s, err := NewStream(c)
	if err != nil {
		return 0, err
	}
	s.SetMeta(src.Meta, dst.Meta)
	ip, op := 0, 0
	for iter := 0; ; iter++ {
		a := min(in(), len(src.Data)-ip)
		b := min(out(), len(dst.Data)-op)
		var d []byte
		if !c.Discard {
			d = dst.Data[op : op+b]
		}
		nd, ns, err := s.Process(d, src.Data[ip:ip+a])
		if nd < 0 || nd > len(d) || ns < 0 || ns > a { // not require: this runs per piece, often per byte
			t.Fatalf("Process(%d, %d) = %d, %d", len(d), a, nd, ns)
		}
		ip, op = ip+ns, op+nd
		if err != nil {
			return op, err
		}
		if nd == 0 && ns == 0 {
			if ip == len(src.Data) {
				break
			}
			require.False(t, a > 0 && (b > 0 || c.Discard), "%s: stream stuck at input %d/%d output %d/%d offered %d/%d",
				describe(c, len(src.Data)), ip, len(src.Data), op, len(dst.Data), a, b)
			if a > 0 && op == len(dst.Data) {
				// The output is full and input is left: the caller stops.
				break
			}
		}
		if iter > 10*(len(src.Data)+len(dst.Data))+100 {
			t.Fatalf("stream does not finish")
		}
	}
	return op, s.Close()
}

// streamVsApply checks that the stream in the given pieces produces exactly
// what Apply produces.
func streamVsApply(t *testing.T, c *Config, src Buf, in, out pieces, what string) {
	t.Helper()
	want := modelApply(c, src)
	ad := outBufs(want)
	an, aerr := Apply(c, ad, src)
	sd := outBufs(want)
	sn, serr := streamPieces(t, c, sd, src, in, out)
	require.Empty(t, sameErr(serr, want.err), "%s: %s: stream (apply: %v)", what, describe(c, len(src.Data)), aerr)
	require.Empty(t, compareOut(want, sd, sn), "%s: %s: stream", what, describe(c, len(src.Data)))
	require.Empty(t, sameErr(aerr, want.err), "%s: %s: apply", what, describe(c, len(src.Data)))
	require.Equal(t, an, sn, "%s: %s: stream output length differs from Apply", what, describe(c, len(src.Data)))
	require.True(t, bytes.Equal(ad.Data, sd.Data) && bytes.Equal(ad.Meta, sd.Meta), "%s: %s: stream output differs from Apply", what, describe(c, len(src.Data)))
}

func TestStreamSplitsMatchApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 41))
	ch := rngChooser{rng}
	iters, maxData := 600, 2*4160
	if testing.Short() {
		iters, maxData = 150, 4096
	}
	for i := range iters {
		c, n := genConfig(ch, maxData)
		src := genInput(ch, &c, n)
		plain := 512
		if c.In.HasPI() {
			plain = c.In.Interval
		} else if c.Out.HasPI() {
			plain = c.Out.Interval
		}
		inCuts := fieldCuts(c.In, plain)
		outCuts := fieldCuts(c.Out, plain)
		what := fmt.Sprintf("case %d", i)
		switch i % 6 {
		case 0: // 1-byte pieces on both sides
			streamVsApply(t, &c, src, fixedPieces(1), fixedPieces(1), what+" 1/1")
		case 1: // field boundaries on both sides, then random
			streamVsApply(t, &c, src, cutPieces(inCuts, randPieces(rng, 600)), cutPieces(outCuts, randPieces(rng, 600)), what+" cuts")
		case 2: // field boundaries in, 1-byte out
			streamVsApply(t, &c, src, cutPieces(inCuts, fixedPieces(1<<20)), fixedPieces(1), what+" cuts/1")
		case 3: // everything in, field boundaries out
			streamVsApply(t, &c, src, fixedPieces(1<<30), cutPieces(outCuts, fixedPieces(3)), what+" all/cuts")
		case 4: // random
			streamVsApply(t, &c, src, randPieces(rng, 50), randPieces(rng, 5000), what+" rand")
		case 5: // odd fixed sizes
			streamVsApply(t, &c, src, fixedPieces(pick(ch, 7, 13, 509, 521, 4099)), fixedPieces(pick(ch, 3, 11, 520, 4097)), what+" odd")
		}
	}
}

// Every single cut position of the first two blocks, input side and output
// side, for a few geometries that exercise each field.
func TestStreamEveryCut(t *testing.T) {
	cfgs := []Config{}
	for _, f := range []Format{FormatPI8, FormatPI16} {
		for _, first := range []bool{false, true} {
			d := Domain{Format: f, Type: Type1, Interval: 64, MetaSize: f.TupleSize() + 5, PIFirst: first,
				RefTag: 0xFFFFFFFF, AppTag: 0x1234, AppTagMask: 0xFFFF, Seed: 0xCD}
			o := d
			o.AppTag, o.RefTag = 0x4321, 1
			ip := d
			if f == FormatPI8 {
				ip.Guard = GuardIPChecksum
			}
			cfgs = append(cfgs,
				Config{Out: d},
				Config{In: d, Check: CheckAll, Discard: true},
				Config{In: d, Check: CheckAll},
				Config{In: d, Out: d, Check: CheckAll, Copy: CheckAll},
				Config{In: d, Out: o, Check: CheckAll, Copy: CheckGuard},
				Config{In: d, Out: ip, Check: CheckAll},
			)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ch := rngChooser{rng}
	for k, c := range cfgs {
		n := 3 * 64
		src := genInput(ch, &c, n)
		if k%2 == 0 && c.In.HasPI() { // a bad app tag in block 1 for half of them
			s := mkSide(c.In)
			src.Data[s.unit()+64+s.piOff+s.gl] ^= 0x40
		}
		inLen := len(src.Data)
		outLen := len(modelApply(&c, src).data)
		for cut := 1; cut < min(inLen, 2*(64+32)); cut++ {
			streamVsApply(t, &c, src, cutPieces([]int{cut}, fixedPieces(1<<20)), fixedPieces(1<<20), fmt.Sprintf("cfg %d in cut %d", k, cut))
		}
		for cut := 1; cut < min(outLen, 2*(64+32)); cut++ {
			streamVsApply(t, &c, src, fixedPieces(1<<20), cutPieces([]int{cut}, fixedPieces(1<<20)), fmt.Sprintf("cfg %d out cut %d", k, cut))
		}
	}
}

// DIX metadata is given whole; data in pieces.
func TestStreamDIX(t *testing.T) {
	for _, f := range []Format{FormatPI8, FormatPI16} {
		d := Domain{Format: f, Type: Type1, Interval: 512, MetaSize: 32, Separate: true, RefTag: 1, AppTag: 9, AppTagMask: 0xFFFF}
		data := spdkData(4 * 512)
		buf := mustGenerate(t, d, data)
		buf.Meta[2*32+31] ^= 1 // ref of block 2 (PI last)
		dif := d
		dif.Separate = false
		for _, c := range []Config{
			{In: d, Check: CheckAll, Discard: true},
			{In: d, Check: CheckAll},
			{In: d, Out: d, Check: CheckAll, Copy: CheckAll},
			{In: d, Out: dif, Check: CheckAll, Copy: CheckAll}, // DIX -> DIF
		} {
			for _, p := range []int{1, 100, 511, 512, 513, 4096} {
				streamVsApply(t, &c, buf, fixedPieces(p), fixedPieces(p+1), fmt.Sprintf("%v dix piece %d", f, p))
			}
		}
	}
}

func TestStreamCloseErrors(t *testing.T) {
	d := Domain{Format: FormatPI8, Type: Type1, Interval: 512, RefTag: 1, AppTagMask: 0xFFFF}
	data := spdkData(1024)
	prot := mustGenerate(t, d, data)
	isParam := func(t *testing.T, err, want error) {
		t.Helper()
		require.ErrorIs(t, err, want)
		require.ErrorIs(t, err, ErrParam)
	}
	newS := func(t *testing.T, c Config) *Stream {
		t.Helper()
		s, err := NewStream(&c)
		require.NoError(t, err, "NewStream")
		return s
	}
	t.Run("empty", func(t *testing.T) {
		for _, c := range []Config{{Out: d}, {In: d, Check: CheckAll, Discard: true}, {}} {
			assert.NoError(t, newS(t, c).Close(), "%s: Close of an empty stream", describe(&c, 0))
		}
	})
	t.Run("verify mid data", func(t *testing.T) {
		s := newS(t, Config{In: d, Check: CheckAll, Discard: true})
		_, n, err := s.Process(nil, prot.Data[:100])
		require.NoError(t, err, "Process")
		require.Equal(t, 100, n, "Process consumed")
		isParam(t, s.Close(), ErrPartialBlock)
	})
	t.Run("verify mid tuple", func(t *testing.T) {
		s := newS(t, Config{In: d, Check: CheckAll, Discard: true})
		_, n, err := s.Process(nil, prot.Data[:520+515])
		require.NoError(t, err, "Process")
		require.Equal(t, 1035, n, "Process consumed")
		isParam(t, s.Close(), ErrPartialBlock)
	})
	t.Run("verify whole blocks", func(t *testing.T) {
		s := newS(t, Config{In: d, Check: CheckAll, Discard: true})
		_, n, err := s.Process(nil, prot.Data[:520])
		require.NoError(t, err, "Process")
		require.Equal(t, 520, n, "Process consumed")
		require.NoError(t, s.Close())
	})
	t.Run("generate mid block", func(t *testing.T) {
		s := newS(t, Config{Out: d})
		out := make([]byte, 1040)
		nd, ns, err := s.Process(out, data[:600])
		require.NoError(t, err, "Process")
		require.Equal(t, 600, ns, "Process consumed")
		require.Equal(t, 600+8, nd, "Process wrote")
		isParam(t, s.Close(), ErrPartialBlock)
	})
	t.Run("generate tuple pending", func(t *testing.T) {
		s := newS(t, Config{Out: d})
		out := make([]byte, 515)
		nd, ns, err := s.Process(out, data[:512])
		require.NoError(t, err, "Process")
		require.Equal(t, 512, ns, "Process consumed")
		require.Equal(t, 515, nd, "Process wrote")
		isParam(t, s.Close(), ErrShortBuffer)
		// Giving the rest of the output space finishes it.
		rest := make([]byte, 5)
		nd, ns, err = s.Process(rest, nil)
		require.NoError(t, err, "Process of the rest")
		require.Equal(t, 5, nd, "Process of the rest wrote")
		require.Zero(t, ns, "Process of the rest consumed")
		require.NoError(t, s.Close())
		want := mustGenerate(t, d, data[:512]).Data
		got := append(out, rest...)
		require.Equal(t, want[512:], got[512:], "resumed generate tuple")
		require.True(t, bytes.Equal(got, want), "resumed generate differs")
	})
	t.Run("strip output full", func(t *testing.T) {
		s := newS(t, Config{In: d, Check: CheckAll})
		out := make([]byte, 100)
		nd, ns, err := s.Process(out, prot.Data)
		require.NoError(t, err, "Process")
		require.Equal(t, 100, nd, "Process wrote")
		require.Equal(t, 100, ns, "Process consumed")
		isParam(t, s.Close(), ErrPartialBlock)
	})
	t.Run("pi error", func(t *testing.T) {
		bad := cloneBuf(prot)
		bad.Data[520+512+3] ^= 1 // app tag of block 1
		s := newS(t, Config{In: d, Check: CheckAll, Discard: true})
		_, n, err := s.Process(nil, bad.Data[:520])
		require.NoError(t, err, "Process block 0")
		require.Equal(t, 520, n, "Process block 0 consumed")
		require.Nil(t, s.FirstError(), "error before the bad block")
		_, n, err = s.Process(nil, bad.Data[520:])
		require.NoError(t, err, "Process block 1")
		require.Equal(t, 520, n, "Process block 1 consumed")
		want := &Error{Type: ErrorAppTag, Block: 1, Offset: 512, ProtectedOffset: 520, Expected: 0, Actual: 1}
		fe := s.FirstError()
		require.NotNil(t, fe, "FirstError")
		require.Equal(t, *want, *fe, "FirstError")
		require.Empty(t, sameErr(s.Close(), want), "Close")
		// FirstError returns a copy.
		s.FirstError().Block = 99
		require.EqualValues(t, 1, s.FirstError().Block, "FirstError shares its record")
		// Reset forgets it; the same input gives the same error again.
		s.Reset()
		require.Nil(t, s.FirstError(), "Reset kept the error")
		require.NoError(t, s.Close(), "Reset kept the error")
		_, _, err = s.Process(nil, bad.Data)
		require.NoError(t, err, "Process after Reset")
		require.Empty(t, sameErr(s.Close(), want), "Close after Reset")
	})
	t.Run("dix meta short", func(t *testing.T) {
		dix := d
		dix.Separate = true
		buf := mustGenerate(t, dix, data)
		s := newS(t, Config{In: dix, Check: CheckAll, Discard: true})
		s.SetMeta(buf.Meta[:12], nil) // one block and a half
		_, n, err := s.Process(nil, buf.Data)
		isParam(t, err, ErrShortBuffer)
		require.GreaterOrEqual(t, n, 512, "consumed")
		require.LessOrEqual(t, n, 1024, "consumed")
		s2 := newS(t, Config{Out: dix})
		s2.SetMeta(nil, make([]byte, 7))
		_, _, err = s2.Process(make([]byte, 1024), data)
		isParam(t, err, ErrShortBuffer)
	})
	t.Run("reset keeps meta", func(t *testing.T) {
		dix := d
		dix.Separate = true
		buf := mustGenerate(t, dix, data)
		s := newS(t, Config{In: dix, Check: CheckAll, Discard: true})
		s.SetMeta(buf.Meta, nil)
		for range 2 {
			_, n, err := s.Process(nil, buf.Data)
			require.NoError(t, err, "Process")
			require.Equal(t, 1024, n, "Process consumed")
			require.NoError(t, s.Close())
			s.Reset()
		}
	})
	t.Run("reblock input ends inside an output block", func(t *testing.T) {
		big := Domain{Format: FormatPI16, Type: Type1, Interval: 4096}
		s := newS(t, Config{In: d, Out: big, Check: CheckAll})
		out := make([]byte, 4096+16)
		_, ns, err := s.Process(out, prot.Data)
		require.NoError(t, err, "Process")
		require.Equal(t, len(prot.Data), ns, "Process consumed")
		isParam(t, s.Close(), ErrPartialBlock)
	})
}

// Process with nothing to do makes no progress and no error.
func TestStreamNoProgress(t *testing.T) {
	d := Domain{Format: FormatPI16, Type: Type1, Interval: 512}
	for _, c := range []Config{{Out: d}, {In: d, Check: CheckAll}, {}, {In: d, Discard: true}} {
		s, err := NewStream(&c)
		require.NoError(t, err)
		nd, ns, err := s.Process(nil, nil)
		assert.NoError(t, err, "%s: Process(nil, nil)", describe(&c, 0))
		assert.Zero(t, nd, "%s: Process(nil, nil) wrote", describe(&c, 0))
		assert.Zero(t, ns, "%s: Process(nil, nil) consumed", describe(&c, 0))
		if !c.Discard {
			nd, ns, err = s.Process(nil, make([]byte, 10))
			assert.NoError(t, err, "%s: Process(nil, 10)", describe(&c, 0))
			assert.Zero(t, nd, "%s: Process(nil, 10) wrote", describe(&c, 0))
			assert.Zero(t, ns, "%s: Process(nil, 10) consumed", describe(&c, 0))
		}
	}
}

// streamBlocks runs c over src the way a strided memory domain hands it
// over: each input block's data and metadata as two pieces, through
// ProcessBlock where it takes them and Process where it does not, with
// the output offered in pieces.
func streamBlocks(t *testing.T, c *Config, dst, src Buf, out pieces, whole *int) (int, error) {
	t.Helper()
	s, err := NewStream(c)
	require.NoError(t, err)
	s.SetMeta(src.Meta, dst.Meta)
	unit := c.In.BlockSize()
	op := 0
	var d []byte
	next := func() {
		if len(d) == 0 && !c.Discard {
			b := min(out(), len(dst.Data)-op)
			d = dst.Data[op : op+b]
		}
	}
	feed := func(p []byte) error {
		for iter := 0; len(p) > 0; iter++ {
			next()
			nd, ns, err := s.Process(d, p)
			if err != nil {
				return err
			}
			d, op, p = d[nd:], op+nd, p[ns:]
			if nd == 0 && ns == 0 && (len(d) > 0 || op == len(dst.Data) || c.Discard) {
				return nil // the output is full: the caller stops
			}
			require.Less(t, iter, 1<<20, "stream does not finish")
		}
		return nil
	}
	for b := 0; b+unit <= len(src.Data); b += unit {
		data, meta := src.Data[b:b+c.In.Interval], src.Data[b+c.In.Interval:b+unit]
		next()
		if nd, ok := s.ProcessBlock(d, data, meta); ok {
			d, op = d[nd:], op+nd
			*whole++
			continue
		}
		if err := feed(data); err != nil {
			return op, err
		}
		if err := feed(meta); err != nil {
			return op, err
		}
	}
	// Output the last tuple may still owe.
	for !c.Discard && op < len(dst.Data) {
		next()
		nd, _, err := s.Process(d, nil)
		if err != nil {
			return op, err
		}
		if nd == 0 {
			break
		}
		d, op = d[nd:], op+nd
	}
	return op, s.Close()
}

// TestStreamProcessBlockMatchesApply: a block's data and metadata given
// apart (ProcessBlock, falling back to Process) give exactly what Apply
// gives, for interleaved inputs of every geometry.
func TestStreamProcessBlockMatchesApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	ch := rngChooser{rng}
	ran, whole := 0, 0
	for i := 0; ran < 300 && i < 20000; i++ {
		c, n := genConfig(ch, 2*4160)
		if !c.In.HasPI() || c.In.Separate {
			continue
		}
		ran++
		src := genInput(ch, &c, n)
		want := modelApply(&c, src)
		var out pieces
		switch i % 3 {
		case 0:
			out = fixedPieces(1 << 30)
		case 1:
			out = randPieces(rng, 5000)
		default:
			out = fixedPieces(pick(ch, 1, 7, 520, 4104))
		}
		sd := outBufs(want)
		sn, serr := streamBlocks(t, &c, sd, src, out, &whole)
		what := fmt.Sprintf("case %d: %s", i, describe(&c, len(src.Data)))
		require.Empty(t, sameErr(serr, want.err), "%s", what)
		require.Empty(t, compareOut(want, sd, sn), "%s", what)
	}
	require.Equal(t, 300, ran, "configurations with interleaved input PI")
	require.Greater(t, whole, 100, "blocks ProcessBlock took in one step")
	t.Logf("%d blocks in one step", whole)
}
