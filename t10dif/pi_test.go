package t10dif

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/crc64"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// Reference model.
//
// modelApply is a slow, independent restatement of the engine's semantics: it
// works per block on whole buffers, compares tuples byte by byte under the
// IB byte masks, and computes guards with the bitwise references of
// guard_test.go. It assumes a valid Config and input lengths that Apply
// accepts; it shares no code with the engine except the exported constants.
// ---------------------------------------------------------------------------

// mSide is the model's view of a domain.
type mSide struct {
	pi             bool
	format         Format
	guard          GuardType
	tuple          int // tuple size
	gl             int // guard length in the tuple
	interval       int
	meta           int
	piOff          int // offset of the tuple in the metadata
	prefix         int // metadata bytes covered by the guard
	separate       bool
	incr           bool
	refMax         uint64
	escApp, escRef bool
	refTag         uint64
	appTag         uint16
	appMask        uint16
	seed           uint64
}

func mkSide(d Domain) mSide {
	if d.Format == FormatNone {
		return mSide{}
	}
	s := mSide{pi: true, format: d.Format, interval: d.Interval, separate: d.Separate,
		refTag: d.RefTag, appTag: d.AppTag, appMask: d.AppTagMask, seed: d.Seed}
	switch d.Format {
	case FormatPI8:
		s.tuple, s.gl, s.refMax = 8, 2, 0xFFFFFFFF
	case FormatPI16:
		s.tuple, s.gl, s.refMax = 16, 8, 0xFFFFFFFFFFFF
	case FormatCRC32:
		s.tuple, s.gl = 4, 4
	case FormatCRC64:
		s.tuple, s.gl = 8, 8
	}
	s.guard = d.Guard
	if s.guard == GuardDefault {
		s.guard = map[Format]GuardType{FormatPI8: GuardCRC16, FormatPI16: GuardCRC64NVMe, FormatCRC32: GuardCRC32,
			FormatCRC64: GuardCRC64XP10}[d.Format]
	}
	s.meta = d.MetaSize
	if s.meta == 0 {
		s.meta = s.tuple
	}
	if !d.PIFirst {
		s.piOff = s.meta - s.tuple
		s.prefix = s.piOff
	}
	if d.Format.IsCRC() {
		return s // a CRC and no tags: no reference rule, no escapes
	}
	s.incr = d.Ref == RefIncrement || (d.Ref == RefDefault && d.Type != Type3)
	switch d.Escape {
	case EscapeDefault:
		s.escApp, s.escRef = true, d.Type == Type3
	case EscapeApp:
		s.escApp = true
	case EscapeAppRef:
		s.escApp, s.escRef = true, true
	}
	return s
}

func (s *mSide) unit() int {
	if s.separate {
		return s.interval
	}
	return s.interval + s.meta
}

// modelIPChecksum is refIPChecksum with an initial sum.
func modelIPChecksum(seed uint16, p []byte) uint16 {
	sum := uint32(seed)
	for i := 0; i < len(p); i += 2 {
		w := uint32(p[i]) << 8
		if i+1 < len(p) {
			w |= uint32(p[i+1])
		}
		sum += w
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}

func modelGuard(g GuardType, seed uint64, parts ...[]byte) uint64 {
	var buf []byte
	for _, p := range parts {
		buf = append(buf, p...)
	}
	switch g {
	case GuardCRC16:
		return uint64(refCRC16(uint16(seed), buf))
	case GuardCRC64NVMe:
		return refCRC64NVMe(seed, buf)
	case GuardIPChecksum:
		return uint64(modelIPChecksum(uint16(seed), buf))
	case GuardCRC32:
		return uint64(crc32.Update(^uint32(seed), crc32.IEEETable, buf))
	case GuardCRC32C:
		return uint64(crc32.Update(^uint32(seed), crc32.MakeTable(crc32.Castagnoli), buf))
	case GuardCRC64XP10:
		return crc64.Update(^seed, crc64.MakeTable(crc64.ECMA), buf)
	}
	panic("model: bad guard")
}

func (s *mSide) guardOf(data, prefix []byte) uint64 { return modelGuard(s.guard, s.seed, data, prefix) }

func (s *mSide) ref(i uint64) uint64 {
	if s.incr {
		return (s.refTag + i) & s.refMax
	}
	return s.refTag
}

func putBE(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}

func getBE(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// encode builds a tuple of the side's format.
func (s *mSide) encode(g uint64, app uint16, ref uint64) []byte {
	t := make([]byte, s.tuple)
	putBE(t[:s.gl], g)
	if s.tuple > s.gl {
		putBE(t[s.gl:s.gl+2], uint64(app))
		putBE(t[s.gl+2:], ref)
	}
	return t
}

// selected expands a valid check or copy mask into the tuple bytes it
// selects.
func selected(f Format, m CheckMask) []bool {
	if f == FormatPI8 || f.IsCRC() {
		sel := make([]bool, f.TupleSize())
		for j := range sel {
			sel[j] = m&(0x80>>j) != 0
		}
		return sel
	}
	sel := make([]bool, 16)
	for j := range sel {
		switch {
		case j < 8:
			sel[j] = m&CheckGuard == CheckGuard
		case j < 10:
			sel[j] = m&CheckAppTag == CheckAppTag
		default:
			sel[j] = m&CheckRefTag == CheckRefTag
		}
	}
	return sel
}

// check verifies block i with its data and metadata.
func (s *mSide) check(i uint64, data, meta []byte, sel []bool) *Error {
	t := meta[s.piOff : s.piOff+s.tuple]
	var app, ref uint64
	if s.tuple > s.gl {
		app, ref = getBE(t[s.gl:s.gl+2]), getBE(t[s.gl+2:])
	}
	if s.escApp && app == 0xFFFF && (!s.escRef || ref == s.refMax) {
		return nil
	}
	g := s.guardOf(data, meta[:s.prefix])
	want := s.encode(g, s.appTag, s.ref(i))
	mk := func(typ ErrorType, exp, act uint64) *Error {
		return &Error{Type: typ, Block: i, Offset: i * uint64(s.interval),
			ProtectedOffset: i * uint64(s.interval+s.meta), Expected: exp, Actual: act}
	}
	for j := 0; j < s.gl; j++ {
		if sel[j] && t[j] != want[j] {
			return mk(ErrorGuard, g, getBE(t[:s.gl]))
		}
	}
	for j := s.gl + 2; j < s.tuple; j++ {
		if sel[j] && t[j] != want[j] {
			return mk(ErrorRefTag, s.ref(i), ref)
		}
	}
	if s.tuple == s.gl {
		return nil
	}
	am := [2]byte{byte(s.appMask >> 8), byte(s.appMask)}
	for k := range 2 {
		j := s.gl + k
		if sel[j] && t[j]&am[k] != want[j]&am[k] {
			return mk(ErrorAppTag, uint64(s.appTag), app)
		}
	}
	return nil
}

// modelResult is the model's outcome of an operation.
type modelResult struct {
	data []byte // output main buffer (nil with Discard)
	meta []byte // output metadata of a separate output domain
	err  *Error // first PI mismatch
}

func sameGeometry(in, out *mSide) bool {
	return in.pi && out.pi && in.format == out.format && in.interval == out.interval &&
		in.meta == out.meta && in.piOff == out.piOff
}

// modelApply computes what Apply must produce for a valid c and input.
func modelApply(c *Config, src Buf) modelResult {
	in, out := mkSide(c.In), mkSide(c.Out)
	var data []byte
	var inMeta [][]byte
	if in.pi {
		u := in.unit()
		for i := range len(src.Data) / u {
			blk := src.Data[i*u:]
			data = append(data, blk[:in.interval]...)
			if in.separate {
				inMeta = append(inMeta, src.Meta[i*in.meta:(i+1)*in.meta])
			} else {
				inMeta = append(inMeta, blk[in.interval:in.interval+in.meta])
			}
		}
	} else {
		data = append([]byte(nil), src.Data...)
	}
	var res modelResult
	if in.pi {
		sel := selected(in.format, c.Check)
		for i, m := range inMeta {
			iv := in.interval
			if e := in.check(uint64(i), data[i*iv:(i+1)*iv], m, sel); e != nil {
				res.err = e
				break
			}
		}
	}
	if c.Discard {
		return res
	}
	if !out.pi {
		res.data = data
		return res
	}
	same := sameGeometry(&in, &out)
	var cpy []bool
	if in.pi && c.Copy != 0 {
		cpy = selected(out.format, c.Copy)
	}
	res.data = []byte{}
	if out.separate {
		res.meta = []byte{}
	}
	oi := out.interval
	for i := range len(data) / oi {
		d := data[i*oi : (i+1)*oi]
		m := make([]byte, out.meta)
		if same {
			copy(m, inMeta[i])
		}
		t := out.encode(out.guardOf(d, m[:out.prefix]), out.appTag, out.ref(uint64(i)))
		for j := range t {
			if cpy != nil && cpy[j] {
				t[j] = inMeta[i][in.piOff+j]
			}
		}
		copy(m[out.piOff:], t)
		res.data = append(res.data, d...)
		if out.separate {
			res.meta = append(res.meta, m...)
		} else {
			res.data = append(res.data, m...)
		}
	}
	return res
}

// modelBuild lays data out as domain d with the given per-block metadata
// filler and a correct tuple for every block (a generate that keeps the
// non-tuple metadata bytes).
func modelBuild(d Domain, data []byte, fill func(blk int, m []byte)) Buf {
	s := mkSide(d)
	var b Buf
	for i := range len(data) / s.interval {
		blk := data[i*s.interval : (i+1)*s.interval]
		m := make([]byte, s.meta)
		if fill != nil {
			fill(i, m)
		}
		copy(m[s.piOff:], s.encode(s.guardOf(blk, m[:s.prefix]), s.appTag, s.ref(uint64(i))))
		b.Data = append(b.Data, blk...)
		if s.separate {
			b.Meta = append(b.Meta, m...)
		} else {
			b.Data = append(b.Data, m...)
		}
	}
	return b
}

// ---------------------------------------------------------------------------
// Random configurations.
// ---------------------------------------------------------------------------

// chooser supplies the random choices of the generators: a seeded PRNG in
// the tests, the fuzzer's bytes in the fuzz targets.
type chooser interface {
	intn(n int) int // in [0, n)
	u64() uint64
}

type rngChooser struct{ r *rand.Rand }

func (c rngChooser) intn(n int) int { return c.r.IntN(n) }
func (c rngChooser) u64() uint64    { return c.r.Uint64() }

// byteChooser takes its choices from a byte string, then zeros.
type byteChooser struct{ b []byte }

func (c *byteChooser) next() byte {
	if len(c.b) == 0 {
		return 0
	}
	v := c.b[0]
	c.b = c.b[1:]
	return v
}

func (c *byteChooser) intn(n int) int {
	if n <= 256 {
		return int(c.next()) % n
	}
	return int(uint16(c.next())<<8|uint16(c.next())) % n
}

func (c *byteChooser) u64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(c.next())
	}
	return v
}

func pick[T any](ch chooser, v ...T) T { return v[ch.intn(len(v))] }

var testIntervals = []int{8, 16, 24, 64, 512, 520, 4048, 4096, 4160}

func randMetaSize(ch chooser, f Format) int {
	t := f.TupleSize()
	switch ch.intn(8) {
	case 0, 1, 2:
		return 0
	case 3:
		return t
	case 4:
		return t + 1 + ch.intn(8) // odd sizes too: the prefix may be odd
	case 5:
		return t + 8
	case 6:
		return 128
	}
	return pick(ch, 32, 64, 255, 4096)
}

func randSeed(ch chooser, g GuardType) uint64 {
	switch ch.intn(4) {
	case 0, 1:
		return 0
	case 2:
		if g == GuardCRC64NVMe {
			return ^uint64(0)
		}
		return 0xFFFF
	}
	if g == GuardCRC64NVMe {
		return ch.u64()
	}
	return ch.u64() & 0xFFFF
}

// randDomain returns a valid domain with PI of the given format and
// interval.
func randDomain(ch chooser, f Format, iv int) Domain {
	d := Domain{Format: f, Interval: iv, Type: DIFType(1 + ch.intn(3))}
	if f == FormatPI8 {
		d.Guard = pick(ch, GuardDefault, GuardCRC16, GuardIPChecksum)
	} else {
		d.Guard = pick(ch, GuardDefault, GuardCRC64NVMe)
	}
	d.MetaSize = randMetaSize(ch, f)
	d.PIFirst = ch.intn(2) == 0
	d.Separate = ch.intn(3) == 0
	max := f.RefTagMax()
	switch ch.intn(4) {
	case 0:
		d.RefTag = ch.u64() & max
	case 1:
		d.RefTag = max - uint64(ch.intn(4)) // wraps within a few blocks
	case 2:
		d.RefTag = uint64(ch.intn(100))
	default:
		d.RefTag = ch.u64() & 0xFFFFFFFF & max
	}
	d.Ref = RefMode(ch.intn(int(numRefModes)))
	d.Escape = Escape(ch.intn(int(numEscapes)))
	switch ch.intn(4) {
	case 0:
		d.AppTag = 0xFFFF
	default:
		d.AppTag = uint16(ch.u64())
	}
	d.AppTagMask = pick(ch, 0xFFFF, 0xFFFF, 0, 0xFF00, 0x00FF, uint16(ch.u64()))
	g := d.Guard
	if g == GuardDefault && f == FormatPI16 {
		g = GuardCRC64NVMe
	}
	d.Seed = randSeed(ch, g)
	return d
}

func randFormat(ch chooser) Format { return pick(ch, FormatPI8, FormatPI16) }

// randMask returns a valid check/copy mask for the format: any byte mask for
// pi8, whole fields for pi16.
func randMask(ch chooser, f Format) CheckMask {
	if f == FormatPI8 && ch.intn(2) == 0 {
		return CheckMask(ch.intn(256))
	}
	var m CheckMask
	for _, fld := range []CheckMask{CheckGuard, CheckAppTag, CheckRefTag} {
		if ch.intn(3) != 0 {
			m |= fld
		}
	}
	return m
}

// blocksFor returns a block count for an interval, keeping the data under
// maxData (at least one block unless zero is drawn).
func blocksFor(ch chooser, iv, maxData int) int {
	if ch.intn(20) == 0 {
		return 0
	}
	return 1 + ch.intn(max(1, min(6, maxData/iv)))
}

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// genConfig draws a valid configuration and the length of its unprotected
// data.
func genConfig(ch chooser, maxData int) (Config, int) {
	var c Config
	f := randFormat(ch)
	iv := pick(ch, testIntervals...)
	switch ch.intn(9) {
	case 0: // generate (insert)
		c.Out = randDomain(ch, f, iv)
		c.Copy = CheckMask(ch.intn(256)) // ignored without input PI
	case 1: // verify
		c.In = randDomain(ch, f, iv)
		c.Check = randMask(ch, f)
		c.Discard = true
	case 2: // strip
		c.In = randDomain(ch, f, iv)
		c.Check = randMask(ch, f)
		c.Copy = CheckMask(ch.intn(256)) // ignored without output PI
	case 3, 4: // pass / translate: same geometry, copy mask
		c.In = randDomain(ch, f, iv)
		c.Out = randDomain(ch, f, iv)
		c.Out.MetaSize, c.Out.PIFirst = c.In.MetaSize, c.In.PIFirst
		if c.In.Meta() == f.TupleSize() && ch.intn(2) == 0 {
			c.Out.PIFirst = !c.In.PIFirst // same geometry when the tuple fills the metadata
		}
		if ch.intn(3) == 0 {
			c.Out.Guard, c.Out.Seed = c.In.Guard, c.In.Seed
		}
		c.Check = randMask(ch, f)
		if ch.intn(4) != 0 {
			c.Copy = randMask(ch, f)
		}
	case 5: // same interval, other format or metadata geometry
		c.In = randDomain(ch, f, iv)
		c.Out = randDomain(ch, randFormat(ch), iv)
		c.Check = randMask(ch, f)
	case 6: // re-blocking
		pairs := [][2]int{{512, 4096}, {4096, 512}, {8, 24}, {24, 8}, {16, 24}, {520, 4160},
			{4160, 520}, {64, 512}, {8, 4048}, {4048, 8}, {512, 520}}
		if maxData < 33280 {
			pairs = pairs[:len(pairs)-1]
		}
		pr := pick(ch, pairs...)
		c.In = randDomain(ch, f, pr[0])
		c.Out = randDomain(ch, randFormat(ch), pr[1])
		c.Check = randMask(ch, f)
		l := lcm(pr[0], pr[1])
		n := 0
		if ch.intn(10) != 0 {
			n = 1 + ch.intn(max(1, min(3, maxData/l)))
		}
		return c, n * l
	case 7: // plain copy, masks ignored
		c.Check, c.Copy = CheckMask(ch.intn(256)), CheckMask(ch.intn(256))
		return c, ch.intn(maxData/4 + 1)
	case 8: // verify-copy into a plain buffer or insert from one, big metadata
		d := randDomain(ch, f, iv)
		d.MetaSize = pick(ch, 128, 4096, f.TupleSize()+3)
		if ch.intn(2) == 0 {
			c.In, c.Check = d, randMask(ch, f)
		} else {
			c.Out = d
		}
	}
	return c, blocksFor(ch, iv, maxData) * iv
}

// genInput builds the input of c for n data bytes: plain data, or a
// protected buffer whose tuples are correct except for the corruptions
// drawn (bit flips in data, prefix, suffix or tuple fields; escape tuples;
// tags off only in masked-out bits).
func genInput(ch chooser, c *Config, n int) Buf {
	data := make([]byte, n)
	if ch.intn(8) == 0 {
		for i := range data {
			data[i] = byte(0xAB + i) // SPDK's pattern
		}
	} else {
		for i := range data {
			data[i] = byte(ch.u64())
		}
	}
	return buildInput(ch, c, data)
}

// buildInput lays data out as the input of c (see genInput).
func buildInput(ch chooser, c *Config, data []byte) Buf {
	n := len(data)
	if !c.In.HasPI() {
		return Buf{Data: data}
	}
	s := mkSide(c.In)
	randMeta := ch.intn(2) == 0
	src := modelBuild(c.In, data, func(_ int, m []byte) {
		if randMeta {
			for i := range m {
				m[i] = byte(ch.u64())
			}
		}
	})
	nb := n / s.interval
	if nb == 0 {
		return src
	}
	meta := func(b int) []byte {
		if s.separate {
			return src.Meta[b*s.meta : (b+1)*s.meta]
		}
		return src.Data[b*s.unit()+s.interval : (b+1)*s.unit()]
	}
	for range ch.intn(3) {
		b := ch.intn(nb)
		m := meta(b)
		t := m[s.piOff : s.piOff+s.tuple]
		bit := byte(1) << ch.intn(8)
		switch ch.intn(9) {
		case 0: // data
			src.Data[b*s.unit()+ch.intn(s.interval)] ^= bit
		case 1: // metadata outside the tuple
			if s.meta > s.tuple {
				k := ch.intn(s.meta - s.tuple)
				if k >= s.piOff {
					k += s.tuple
				}
				m[k] ^= bit
			}
		case 2: // guard
			t[ch.intn(s.gl)] ^= bit
		case 3: // app tag
			t[s.gl+ch.intn(2)] ^= bit
		case 4: // ref tag
			t[s.gl+2+ch.intn(s.tuple-s.gl-2)] ^= bit
		case 5: // app tag changed only in bits outside the mask
			app := getBE(t[s.gl:s.gl+2]) ^ uint64(^s.appMask)&uint64(ch.u64())
			putBE(t[s.gl:s.gl+2], app)
		case 6: // escape app tag, sometimes with an all-ones ref, bad guard
			putBE(t[s.gl:s.gl+2], 0xFFFF)
			if ch.intn(2) == 0 {
				putBE(t[s.gl+2:], s.refMax)
			}
			if ch.intn(2) == 0 {
				t[0] ^= 0x5A
			}
		case 7: // random tuple
			for i := range t {
				t[i] = byte(ch.u64())
			}
		case 8: // several fields of one block
			t[0] ^= bit
			t[s.gl] ^= bit
			t[s.tuple-1] ^= bit
		}
	}
	return src
}

// describe prints a config compactly for failure messages.
func describe(c *Config, n int) string {
	dom := func(d Domain) string {
		if !d.HasPI() {
			return "none"
		}
		return fmt.Sprintf("{%v %v T%d iv=%d md=%d first=%v sep=%v ref=%#x/%d app=%#x/%#x esc=%v seed=%#x}",
			d.Format, d.Guard, d.Type, d.Interval, d.MetaSize, d.PIFirst, d.Separate, d.RefTag, d.Ref,
			d.AppTag, d.AppTagMask, d.Escape, d.Seed)
	}
	return fmt.Sprintf("in=%s out=%s check=%#02x copy=%#02x discard=%v data=%d",
		dom(c.In), dom(c.Out), uint8(c.Check), uint8(c.Copy), c.Discard, n)
}

// ---------------------------------------------------------------------------
// Comparison helpers.
// ---------------------------------------------------------------------------

const slack = 17

// fillJunk fills b with a pattern that no output should keep.
func fillJunk(b []byte) {
	for i := range b {
		b[i] = byte(0xC3 ^ i*7)
	}
}

// outBufs allocates output buffers for the model's result, with junk in
// them and slack bytes after the end.
func outBufs(want modelResult) Buf {
	var dst Buf
	if want.data != nil {
		dst.Data = make([]byte, len(want.data)+slack)
		fillJunk(dst.Data)
	}
	if want.meta != nil {
		dst.Meta = make([]byte, len(want.meta)+slack)
		fillJunk(dst.Meta)
	}
	return dst
}

// sameErr reports whether got is the PI outcome want (nil or an equal
// *Error).
func sameErr(got error, want *Error) string {
	if want == nil {
		if got != nil {
			return fmt.Sprintf("error %v, want nil", got)
		}
		return ""
	}
	var e *Error
	if !errors.As(got, &e) {
		return fmt.Sprintf("error %v, want %+v", got, *want)
	}
	if *e != *want {
		return fmt.Sprintf("error %+v, want %+v", *e, *want)
	}
	if !errors.Is(got, typeSentinel(want.Type)) || errors.Is(got, ErrParam) {
		return fmt.Sprintf("error %v does not match its sentinel only", got)
	}
	return ""
}

func typeSentinel(t ErrorType) error {
	switch t {
	case ErrorGuard:
		return ErrGuard
	case ErrorRefTag:
		return ErrRefTag
	case ErrorAppTag:
		return ErrAppTag
	}
	return nil
}

// compareOut checks an output against the model: bytes, the untouched
// slack, the count returned.
func compareOut(want modelResult, dst Buf, n int) string {
	if n != len(want.data) {
		return fmt.Sprintf("wrote %d bytes, want %d", n, len(want.data))
	}
	if want.data != nil {
		if i := firstDiff(dst.Data[:len(want.data)], want.data); i >= 0 {
			return fmt.Sprintf("output byte %d = %#02x, want %#02x", i, dst.Data[i], want.data[i])
		}
	}
	if want.meta != nil {
		if i := firstDiff(dst.Meta[:len(want.meta)], want.meta); i >= 0 {
			return fmt.Sprintf("output metadata byte %d = %#02x, want %#02x", i, dst.Meta[i], want.meta[i])
		}
	}
	return ""
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// applyChecked runs Apply on c and src and compares it with the model.
func applyChecked(t *testing.T, c *Config, src Buf, what string) {
	t.Helper()
	want := modelApply(c, src)
	dst := outBufs(want)
	orig := cloneBuf(src)
	junk := cloneBuf(dst)
	n, err := Apply(c, dst, src)
	require.Empty(t, sameErr(err, want.err), "%s: %s", what, describe(c, len(want.data)))
	require.Empty(t, compareOut(want, dst, n), "%s: %s", what, describe(c, len(want.data)))
	require.Empty(t, slackCheck(dst, junk, want), "%s: %s", what, describe(c, len(want.data)))
	require.True(t, bytes.Equal(src.Data, orig.Data) && bytes.Equal(src.Meta, orig.Meta),
		"%s: %s: the input was modified", what, describe(c, len(want.data)))
}

// slackCheck verifies the bytes after the output are still the junk.
func slackCheck(dst, junk Buf, want modelResult) string {
	if want.data != nil && !bytes.Equal(dst.Data[len(want.data):], junk.Data[len(want.data):]) {
		return "output written past its end"
	}
	if want.meta != nil && !bytes.Equal(dst.Meta[len(want.meta):], junk.Meta[len(want.meta):]) {
		return "output metadata written past its end"
	}
	return ""
}

func cloneBuf(b Buf) Buf {
	var c Buf
	if b.Data != nil {
		c.Data = append([]byte{}, b.Data...)
	}
	if b.Meta != nil {
		c.Meta = append([]byte{}, b.Meta...)
	}
	return c
}

// ---------------------------------------------------------------------------
// The model itself.
// ---------------------------------------------------------------------------

// TestModelSelfCheck pins the model to published values so that the
// comparisons below compare against something known to be right.
func TestModelSelfCheck(t *testing.T) {
	require.Equal(t, uint64(0xD0DB), modelGuard(GuardCRC16, 0, []byte("123456789")), "model CRC16")
	require.Equal(t, uint64(0xAE8B14860A799888), modelGuard(GuardCRC64NVMe, 0, []byte("123456789")), "model CRC64")
	rng := rand.New(rand.NewPCG(11, 12))
	for n := range 40 {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		require.Equal(t, refIPChecksum(p), modelIPChecksum(0, p), "model IP checksum vs refIPChecksum at len %d", n)
		// An initial sum is the same as a leading word.
		s := uint16(rng.Uint32())
		require.Equal(t, refIPChecksum(append([]byte{byte(s >> 8), byte(s)}, p...)), modelIPChecksum(s, p), "model IP checksum seed %#x len %d", s, n)
		tab := crc64.MakeTable(0x9A6C9329AC4BC9B5)
		seed := rng.Uint64()
		require.Equal(t, crc64.Update(seed, tab, p), modelGuard(GuardCRC64NVMe, seed, p), "model CRC64 seed convention vs hash/crc64")
	}
}

// ---------------------------------------------------------------------------
// Property test: Apply against the model for random configurations.
// ---------------------------------------------------------------------------

func TestApplyMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(2024, 520))
	ch := rngChooser{rng}
	iters, maxData := 3000, 3*4160
	if testing.Short() {
		iters, maxData = 600, 8192
	}
	kinds := map[string]int{}
	for i := range iters {
		c, n := genConfig(ch, maxData)
		require.NoError(t, c.Validate(), "case %d: generator made an invalid config %s", i, describe(&c, n))
		src := genInput(ch, &c, n)
		applyChecked(t, &c, src, fmt.Sprintf("case %d", i))
		want := modelApply(&c, src)
		switch {
		case want.err != nil:
			kinds["error "+want.err.Type.String()]++
		case c.In.HasPI() && n > 0:
			kinds["clean"]++
		}
	}
	// The generator must reach every outcome often.
	for _, k := range []string{"clean", "error guard", "error reftag", "error apptag"} {
		assert.GreaterOrEqual(t, kinds[k], iters/50, "cases with outcome %q: %v", k, kinds)
	}
}

// The wrappers are the documented configurations.
func TestWrappersMatchApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(77, 78))
	ch := rngChooser{rng}
	for i := range 200 {
		f := randFormat(ch)
		iv := pick(ch, 8, 512, 520, 4096)
		d := randDomain(ch, f, iv)
		d2 := randDomain(ch, f, iv)
		d2.MetaSize, d2.PIFirst = d.MetaSize, d.PIFirst
		n := blocksFor(ch, iv, 8192) * iv
		check := randMask(ch, f)
		cpy := randMask(ch, f)
		cfgs := []Config{
			{Out: d},
			{In: d, Check: check, Discard: true},
			{In: d, Check: check},
			{In: d, Out: d, Check: check, Copy: CheckAll},
			{In: d, Out: d2, Check: check, Copy: cpy},
		}
		for k, c := range cfgs {
			src := genInput(ch, &c, n)
			want := modelApply(&c, src)
			dst := outBufs(want)
			var got int
			var err error
			switch k {
			case 0:
				got, err = Generate(d, dst, src.Data)
			case 1:
				err = Verify(d, check, src)
				got = 0
			case 2:
				got, err = Strip(d, check, dst.Data, src)
			case 3:
				got, err = Pass(d, check, dst, src)
			case 4:
				got, err = Translate(d, d2, check, cpy, dst, src)
			}
			require.Empty(t, sameErr(err, want.err), "case %d wrapper %d %s", i, k, describe(&c, n))
			require.Empty(t, compareOut(want, dst, got), "case %d wrapper %d %s", i, k, describe(&c, n))
		}
	}
}

// ---------------------------------------------------------------------------
// Tuple layout, references and guards, pinned by hand.
// ---------------------------------------------------------------------------

func TestTupleLayout(t *testing.T) {
	data := bytes.Repeat([]byte{0x5A}, 512)
	// pi8: guard2 | app2 | ref4, big-endian.
	d := Domain{Format: FormatPI8, Type: Type1, Interval: 512, RefTag: 0x01020304, AppTag: 0xA1B2}
	out := make([]byte, 520)
	n, err := Generate(d, Buf{Data: out}, data)
	require.NoError(t, err, "Generate pi8")
	require.Equal(t, 520, n, "Generate pi8")
	g := refCRC16(0, data)
	want := []byte{byte(g >> 8), byte(g), 0xA1, 0xB2, 0x01, 0x02, 0x03, 0x04}
	require.Equal(t, want, out[512:], "pi8 tuple")
	// pi16: guard8 | app2 | ref6.
	d = Domain{Format: FormatPI16, Type: Type1, Interval: 512, RefTag: 0x0A0B0C0D0E0F, AppTag: 0xA1B2}
	out = make([]byte, 528)
	n, err = Generate(d, Buf{Data: out}, data)
	require.NoError(t, err, "Generate pi16")
	require.Equal(t, 528, n, "Generate pi16")
	want = binary.BigEndian.AppendUint64(nil, refCRC64NVMe(0, data))
	want = append(want, 0xA1, 0xB2, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F)
	require.Equal(t, want, out[512:], "pi16 tuple")
	require.True(t, bytes.Equal(out[:512], data), "data not copied")
}

func TestFormatHelpers(t *testing.T) {
	for _, tc := range []struct {
		f     Format
		size  int
		max   uint64
		label string
	}{
		{FormatNone, 0, 0, "none"},
		{FormatPI8, 8, 1<<32 - 1, "pi8"},
		{FormatPI16, 16, 1<<48 - 1, "pi16"},
		{Format(9), 0, 0, "Format(9)"},
	} {
		assert.Equal(t, tc.size, tc.f.TupleSize(), "%v: size", tc.label)
		assert.Equal(t, tc.max, tc.f.RefTagMax(), "%v: max", tc.label)
		assert.Equal(t, tc.label, tc.f.String(), "%v: name", tc.label)
	}
	d := Domain{Format: FormatPI16, Interval: 4096, MetaSize: 0}
	assert.Equal(t, 16, d.Meta(), "pi16 domain: meta")
	assert.Equal(t, 4112, d.BlockSize(), "pi16 domain: block")
	assert.True(t, d.HasPI(), "pi16 domain: has PI")
	d.MetaSize, d.Separate = 128, true
	assert.Equal(t, 128, d.Meta(), "pi16 dix domain: meta")
	assert.Equal(t, 4096, d.BlockSize(), "pi16 dix domain: block")
	assert.Zero(t, (Domain{}).Meta(), "zero domain has PI")
	assert.False(t, (Domain{}).HasPI(), "zero domain has PI")
	for _, s := range []fmt.Stringer{GuardCRC16, GuardIPChecksum, GuardCRC64NVMe, GuardDefault, GuardType(7),
		EscapeDefault, EscapeNone, EscapeApp, EscapeAppRef, Escape(9), ErrorGuard, ErrorRefTag, ErrorAppTag, ErrorType(0)} {
		assert.NotEmpty(t, s.String(), "%T %d has no name", s, s)
	}
	e := &Error{Type: ErrorRefTag, Block: 3, Offset: 1536, Expected: 7, Actual: 8}
	assert.Contains(t, e.Error(), "reftag", "Error()")
	assert.Contains(t, e.Error(), "block 3", "Error()")
	assert.ErrorIs(t, e, ErrRefTag, "*Error matches the wrong sentinels")
	assert.NotErrorIs(t, e, ErrGuard, "*Error matches the wrong sentinels")
	assert.NotErrorIs(t, e, ErrAppTag, "*Error matches the wrong sentinels")
	assert.NotErrorIs(t, e, ErrParam, "*Error matches the wrong sentinels")
}

// The guard covers the metadata bytes before a tuple placed last, not those
// after a tuple placed first; the CRC-64 seed follows hash/crc64.
func TestGuardCoverage(t *testing.T) {
	data := make([]byte, 512)
	for i := range data {
		data[i] = byte(i * 3)
	}
	meta := make([]byte, 16)
	for i := range meta {
		meta[i] = byte(0xE0 + i)
	}
	for _, first := range []bool{false, true} {
		d := Domain{Format: FormatPI8, Type: Type1, Interval: 512, MetaSize: 16, PIFirst: first}
		buf := append(append([]byte{}, data...), meta...)
		require.NoError(t, GenerateInPlace(d, Buf{Data: buf}))
		var g uint16
		var tup, rest []byte
		if first {
			g, tup, rest = refCRC16(0, data), buf[512:520], buf[520:]
			assert.True(t, bytes.Equal(rest, meta[8:]), "first: metadata after the tuple not kept")
		} else {
			g, tup, rest = refCRC16(0, append(append([]byte{}, data...), meta[:8]...)), buf[520:], buf[512:520]
			assert.True(t, bytes.Equal(rest, meta[:8]), "last: metadata before the tuple not kept")
		}
		assert.Equal(t, g, binary.BigEndian.Uint16(tup), "PIFirst=%v: guard", first)
		// Flipping a byte outside the tuple: detected only when covered.
		k := 512 + 15
		if !first {
			k = 512
		}
		buf[k] ^= 1
		err := Verify(d, CheckAll, Buf{Data: buf})
		if first {
			assert.NoError(t, err, "first: uncovered metadata byte flip reported")
		} else {
			assert.ErrorIs(t, err, ErrGuard, "last: covered metadata byte flip reported")
		}
	}
	tab := crc64.MakeTable(0x9A6C9329AC4BC9B5)
	for _, seed := range []uint64{0, 1, 0xCD, ^uint64(0), 0x0123456789ABCDEF} {
		d := Domain{Format: FormatPI16, Type: Type1, Interval: 512, Seed: seed, MetaSize: 24}
		out := make([]byte, 512+24)
		_, err := Generate(d, Buf{Data: out}, data)
		require.NoError(t, err, "seed %#x: Generate", seed)
		want := crc64.Update(seed, tab, append(append([]byte{}, data...), make([]byte, 8)...))
		assert.Equal(t, want, binary.BigEndian.Uint64(out[512+8:]), "seed %#x: guard vs hash/crc64", seed)
	}
}

// IP-checksum guard: the seed is an initial sum; odd prefixes pair bytes
// across the data/metadata boundary.
func TestIPChecksumGuard(t *testing.T) {
	data := bytes.Repeat([]byte{0x12, 0x34}, 256)
	for _, seed := range []uint64{0, 1, 0xFFFF, 0x8000} {
		for _, ms := range []int{8, 9, 11, 16} {
			d := Domain{Format: FormatPI8, Guard: GuardIPChecksum, Type: Type1, Interval: 512, MetaSize: ms, Seed: seed}
			out := make([]byte, 512+ms)
			_, err := Generate(d, Buf{Data: out}, data)
			require.NoError(t, err, "seed %#x meta %d: Generate", seed, ms)
			prefix := make([]byte, ms-8)
			want := modelIPChecksum(uint16(seed), append(append([]byte{}, data...), prefix...))
			assert.Equal(t, want, binary.BigEndian.Uint16(out[512+ms-8:]), "seed %#x meta %d: guard", seed, ms)
			assert.NoError(t, Verify(d, CheckAll, Buf{Data: out}), "seed %#x meta %d", seed, ms)
		}
	}
	// All-zero data: guard 0xFFFF with seed 0.
	d := Domain{Format: FormatPI8, Guard: GuardIPChecksum, Type: Type1, Interval: 512}
	out := make([]byte, 520)
	_, err := Generate(d, Buf{Data: out}, make([]byte, 512))
	require.NoError(t, err, "Generate zeros with the ip guard")
	assert.Equal(t, uint16(0xFFFF), binary.BigEndian.Uint16(out[512:]), "ip guard of zeros")
}

// ---------------------------------------------------------------------------
// SPDK dif_ut.c checklist (peers.md §5).
// ---------------------------------------------------------------------------

// spdkData is SPDK's data pattern: byte = 0xAB + offset.
func spdkData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(0xAB + i)
	}
	return b
}

// geometry is a DIF geometry of the checklist.
type geometry struct {
	name     string
	format   Format
	interval int
	meta     int
	first    bool
}

func spdkGeometries() []geometry {
	return []geometry{
		{"pi8/512+8", FormatPI8, 512, 8, false},
		{"pi8/512+16/last", FormatPI8, 512, 16, false},
		{"pi8/512+16/first", FormatPI8, 512, 16, true},
		{"pi8/4096+128/last", FormatPI8, 4096, 128, false},
		{"pi8/4096+128/first", FormatPI8, 4096, 128, true},
		{"pi16/4096+16", FormatPI16, 4096, 16, false},
		{"pi16/4096+128/last", FormatPI16, 4096, 128, false},
		{"pi16/4096+128/first", FormatPI16, 4096, 128, true},
		{"pi16/520+16", FormatPI16, 520, 16, false},
		{"pi8/4160+8", FormatPI8, 4160, 8, false},
		{"pi8/4048+8", FormatPI8, 4048, 8, false},
	}
}

func (g geometry) domain(typ DIFType, separate bool) Domain {
	return Domain{Format: g.format, Type: typ, Interval: g.interval, MetaSize: g.meta,
		PIFirst: g.first, Separate: separate}
}

func mustGenerate(t *testing.T, d Domain, data []byte) Buf {
	t.Helper()
	s := mkSide(d)
	nb := len(data) / d.Interval
	var dst Buf
	if d.Separate {
		dst = Buf{Data: make([]byte, len(data)), Meta: make([]byte, nb*s.meta)}
	} else {
		dst = Buf{Data: make([]byte, nb*s.unit())}
	}
	fillJunk(dst.Data)
	fillJunk(dst.Meta)
	n, err := Generate(d, dst, data)
	require.NoError(t, err, "Generate")
	require.Equal(t, len(dst.Data), n, "Generate")
	// Generate is the model's generate with zero non-tuple metadata.
	want := modelBuild(d, data, nil)
	require.True(t, bytes.Equal(dst.Data, want.Data) && bytes.Equal(dst.Meta, want.Meta), "Generate output differs from the model")
	return dst
}

func wantErrType(t *testing.T, err error, typ ErrorType, block uint64) *Error {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e, "want %v at block %d", typ, block)
	require.Equal(t, typ, e.Type, "error %+v, want %v at block %d", *e, typ, block)
	require.Equal(t, block, e.Block, "error %+v, want %v at block %d", *e, typ, block)
	require.ErrorIs(t, err, typeSentinel(typ))
	return e
}

// A1: generate and verify, all flags, PI first and last, both formats;
// mismatched ref (22 vs 23) and app (0x22 vs 0x23) fail.
func TestSPDKGenerateAndVerify(t *testing.T) {
	for _, g := range spdkGeometries() {
		for _, sep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sep=%v", g.name, sep), func(t *testing.T) {
				d := g.domain(Type1, sep)
				d.RefTag, d.AppTag, d.AppTagMask, d.Seed = 22, 0x22, 0xFFFF, 0xCD
				data := spdkData(4 * g.interval)
				buf := mustGenerate(t, d, data)
				require.NoError(t, Verify(d, CheckAll, buf), "verify")
				bad := d
				bad.RefTag = 23
				e := wantErrType(t, Verify(bad, CheckAll, buf), ErrorRefTag, 0)
				assert.EqualValues(t, 23, e.Expected, "ref error %+v", *e)
				assert.EqualValues(t, 22, e.Actual, "ref error %+v", *e)
				bad = d
				bad.AppTag = 0x23
				e = wantErrType(t, Verify(bad, CheckAll, buf), ErrorAppTag, 0)
				assert.EqualValues(t, 0x23, e.Expected, "app error %+v", *e)
				assert.EqualValues(t, 0x22, e.Actual, "app error %+v", *e)
				// Checks that are off are not made.
				assert.NoError(t, Verify(bad, CheckGuard|CheckRefTag, buf), "app mismatch with app check off")
				bad.RefTag = 23
				assert.NoError(t, Verify(bad, CheckGuard, buf), "tag mismatches with only the guard checked")
				assert.NoError(t, Verify(bad, 0, buf), "no checks")
				// Seed mismatch is a guard error with the computed guard expected.
				bad = d
				bad.Seed = 0
				e = wantErrType(t, Verify(bad, CheckAll, buf), ErrorGuard, 0)
				s := mkSide(bad)
				assert.EqualValues(t, s.guardOf(data[:g.interval], make([]byte, s.prefix)), e.Expected, "guard error expected %#x is not the computed guard", e.Expected)
			})
		}
	}
}

// A2 and A5: escapes.
func TestSPDKEscapes(t *testing.T) {
	for _, g := range spdkGeometries()[:8] {
		t.Run(g.name, func(t *testing.T) {
			data := spdkData(3 * g.interval)
			all := g.format.RefTagMax()
			// Type 1, app 0xFFFF: passes even against another expectation
			// and with a corrupted guard.
			d := g.domain(Type1, false)
			d.AppTag, d.AppTagMask, d.RefTag = 0xFFFF, 0xFFFF, 100
			buf := mustGenerate(t, d, data)
			exp := d
			exp.AppTag, exp.RefTag = 0x22, 7
			assert.NoError(t, Verify(exp, CheckAll, buf), "type 1 app 0xffff")
			corrupt := cloneBuf(buf)
			corrupt.Data[5] ^= 0x10
			assert.NoError(t, Verify(exp, CheckAll, corrupt), "type 1 app 0xffff, bad data")
			// EscapeNone turns it off.
			exp.Escape = EscapeNone
			wantErrType(t, Verify(exp, CheckAll, corrupt), ErrorGuard, 0)
			// EscapeAppRef on Type 1 needs the ref all ones too.
			exp.Escape = EscapeAppRef
			wantErrType(t, Verify(exp, CheckAll, corrupt), ErrorGuard, 0)

			// Type 3, app 0xFFFF, ref not all ones: fails.
			d = g.domain(Type3, false)
			d.AppTag, d.AppTagMask, d.RefTag = 0xFFFF, 0xFFFF, 0x1234
			buf = mustGenerate(t, d, data)
			exp = d
			exp.AppTag = 0x22
			e := wantErrType(t, Verify(exp, CheckAll, buf), ErrorAppTag, 0)
			assert.EqualValues(t, 0x22, e.Expected, "type 3 app error %+v", *e)
			assert.EqualValues(t, 0xFFFF, e.Actual, "type 3 app error %+v", *e)
			// The ref of a Type 3 domain is constant and compared.
			exp = d
			exp.RefTag = 0x1235
			e = wantErrType(t, Verify(exp, CheckAll, buf), ErrorRefTag, 0)
			assert.EqualValues(t, 0x1235, e.Expected, "type 3 ref error %+v", *e)
			assert.EqualValues(t, 0x1234, e.Actual, "type 3 ref error %+v", *e)
			// Type 3, app 0xFFFF and ref all ones of the format width: escaped.
			d.RefTag = all
			buf = mustGenerate(t, d, data)
			for b := range 3 { // constant ref: every block all ones
				s := mkSide(d)
				tup := buf.Data[b*s.unit()+g.interval+s.piOff:][:s.tuple]
				require.Equal(t, all, getBE(tup[s.gl+2:]), "block %d tuple % x not the unmapped pattern: ref", b, tup)
				require.Equal(t, uint64(0xFFFF), getBE(tup[s.gl:s.gl+2]), "block %d tuple % x not the unmapped pattern: app", b, tup)
			}
			exp = d
			exp.AppTag, exp.RefTag = 0x22, 5
			corrupt = cloneBuf(buf)
			corrupt.Data[g.interval+1] ^= 0x80 // metadata or data of block 0/1
			assert.NoError(t, Verify(exp, CheckAll, corrupt), "type 3 app 0xffff ref all ones")
			// EscapeApp on Type 3 skips on the app tag alone.
			d.RefTag = 0x1234
			buf = mustGenerate(t, d, data)
			exp = d
			exp.AppTag, exp.Escape = 0x22, EscapeApp
			assert.NoError(t, Verify(exp, CheckAll, buf), "type 3 with EscapeApp")
		})
	}
	// A 32-bit all-ones ref is not all ones for pi16.
	d := Domain{Format: FormatPI16, Type: Type3, Interval: 512, AppTag: 0xFFFF, RefTag: 0xFFFFFFFF, AppTagMask: 0xFFFF}
	buf := mustGenerate(t, d, spdkData(512))
	exp := d
	exp.AppTag = 0
	wantErrType(t, Verify(exp, CheckAll, buf), ErrorAppTag, 0)
	// Generated unmapped PI for Type 1 keeps the initial ref (A5).
	d = Domain{Format: FormatPI8, Type: Type1, Interval: 512, AppTag: 0xFFFF, RefTag: 0x10}
	buf = mustGenerate(t, d, spdkData(1024))
	assert.Equal(t, uint64(0x10), getBE(buf.Data[512+4:520]), "type 1 unmapped ref of block 0, tuple % x", buf.Data[512:520])
	assert.Equal(t, uint64(0x11), getBE(buf.Data[1024+8+4:]), "type 1 unmapped ref of block 1, tuple % x", buf.Data[1032:])
}

// A3: generate with one format or guard, verify with another: the first
// error has the expected type and values.
func TestSPDKDifferentFormats(t *testing.T) {
	data := spdkData(2 * 512)
	gen := func(f Format, gd GuardType, first bool) (Domain, Buf) {
		d := Domain{Format: f, Guard: gd, Type: Type1, Interval: 512, MetaSize: 16, PIFirst: first,
			RefTag: 22, AppTag: 0x22, AppTagMask: 0xFFFF}
		return d, mustGenerate(t, d, data)
	}
	crc16 := refCRC16(0, data[:512])
	crc64 := refCRC64NVMe(0, data[:512])
	for _, tc := range []struct {
		name     string
		gf, vf   Format
		gg, vg   GuardType
		gfirst   bool
		vfirst   bool
		check    CheckMask
		typ      ErrorType
		exp, act uint64
	}{
		// pi8 tuple in bytes 0..7 of the metadata, read as pi16.
		{"pi8->pi16/all", FormatPI8, FormatPI16, 0, 0, true, true, CheckAll, ErrorGuard,
			crc64, uint64(crc16)<<48 | 0x0022<<32 | 22},
		{"pi8->pi16/app+ref", FormatPI8, FormatPI16, 0, 0, true, true, CheckAppTag | CheckRefTag, ErrorRefTag, 22, 0},
		{"pi8->pi16/app", FormatPI8, FormatPI16, 0, 0, true, true, CheckAppTag, ErrorAppTag, 0x22, 0},
		// pi16 read as pi8: the pi8 fields are the pi16 guard's bytes.
		{"pi16->pi8/all", FormatPI16, FormatPI8, 0, 0, true, true, CheckAll, ErrorGuard, uint64(crc16), crc64 >> 48},
		{"pi16->pi8/ref", FormatPI16, FormatPI8, 0, 0, true, true, CheckRefTag, ErrorRefTag, 22, crc64 & 0xFFFFFFFF},
		{"pi16->pi8/app", FormatPI16, FormatPI8, 0, 0, true, true, CheckAppTag, ErrorAppTag, 0x22, crc64 >> 32 & 0xFFFF},
		// Same format, other guard.
		{"crc16->ipcsum", FormatPI8, FormatPI8, GuardCRC16, GuardIPChecksum, true, true, CheckAll, ErrorGuard,
			uint64(refIPChecksum(data[:512])), uint64(crc16)},
		// Same format, tuple last read as tuple first: zeros there.
		{"last->first", FormatPI8, FormatPI8, 0, 0, false, true, CheckAll, ErrorGuard, uint64(crc16), 0},
		{"last->first/app", FormatPI8, FormatPI8, 0, 0, false, true, CheckAppTag, ErrorAppTag, 0x22, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, buf := gen(tc.gf, tc.gg, tc.gfirst)
			v := Domain{Format: tc.vf, Guard: tc.vg, Type: Type1, Interval: 512, MetaSize: 16, PIFirst: tc.vfirst,
				RefTag: 22, AppTag: 0x22, AppTagMask: 0xFFFF}
			err := Verify(v, tc.check, buf)
			e := wantErrType(t, err, tc.typ, 0)
			assert.EqualValues(t, tc.exp, e.Expected, "error %+v", *e)
			assert.EqualValues(t, tc.act, e.Actual, "error %+v", *e)
			c := Config{In: v, Check: tc.check, Discard: true}
			assert.Empty(t, sameErr(err, modelApply(&c, buf).err), "model")
		})
	}
}

// A4: the app tag mask.
func TestSPDKAppTagMask(t *testing.T) {
	for _, f := range []Format{FormatPI8, FormatPI16} {
		d := Domain{Format: f, Type: Type1, Interval: 512, AppTag: 0x1234, AppTagMask: 0xFFFF}
		buf := mustGenerate(t, d, spdkData(1024))
		v := d
		v.AppTag = 0x1256
		e := wantErrType(t, Verify(v, CheckAll, buf), ErrorAppTag, 0)
		assert.EqualValues(t, 0x1256, e.Expected, "%v: %+v", f, *e)
		assert.EqualValues(t, 0x1234, e.Actual, "%v: %+v", f, *e)
		v.AppTagMask = 0xFF00
		assert.NoError(t, Verify(v, CheckAll, buf), "%v mask 0xff00", f)
		v.AppTagMask = 0x00FF
		wantErrType(t, Verify(v, CheckAll, buf), ErrorAppTag, 0)
		v.AppTagMask = 0x0022 // 0x34&0x22 = 0x20, 0x56&0x22 = 0x02: differ
		wantErrType(t, Verify(v, CheckAll, buf), ErrorAppTag, 0)
		v.AppTagMask = 0xFF89 // 0x34&0x89 = 0x56&0x89 = 0: equal
		assert.NoError(t, Verify(v, CheckAll, buf), "%v mask 0xff89", f)
		v.AppTagMask = 0 // nothing compared
		assert.NoError(t, Verify(v, CheckAll, buf), "%v mask 0", f)
	}
	// pi8 partial byte masks: the high app byte only (0x20), the low one
	// only (0x10).
	d := Domain{Format: FormatPI8, Type: Type1, Interval: 512, AppTag: 0x1234, AppTagMask: 0xFFFF}
	buf := mustGenerate(t, d, spdkData(512))
	v := d
	v.AppTag = 0x1256
	assert.NoError(t, Verify(v, CheckGuard|0x20|CheckRefTag, buf), "high app byte only")
	e := wantErrType(t, Verify(v, 0x10, buf), ErrorAppTag, 0)
	assert.EqualValues(t, 0x1256, e.Expected, "low app byte: %+v", *e)
	assert.EqualValues(t, 0x1234, e.Actual, "low app byte: %+v", *e)
	v.AppTag = 0x9934
	assert.NoError(t, Verify(v, 0x10, buf), "low app byte matches")
	wantErrType(t, Verify(v, 0x20, buf), ErrorAppTag, 0)
}

// pi8 partial byte masks on the guard and the ref tag.
func TestPartialMasks(t *testing.T) {
	d := Domain{Format: FormatPI8, Type: Type1, Interval: 512, RefTag: 0x11223344, AppTagMask: 0xFFFF}
	buf := mustGenerate(t, d, spdkData(1024))
	// Change byte 1 of the guard of block 1 and byte 6 of its ref.
	t1 := buf.Data[512+8+512:]
	t1[1] ^= 0xFF
	t1[6] ^= 0x01
	for _, tc := range []struct {
		check CheckMask
		typ   ErrorType // 0: none
	}{
		{0x80, 0}, {0x40, ErrorGuard}, {0xC0, ErrorGuard},
		{0x08 | 0x04 | 0x01, 0}, {0x02, ErrorRefTag}, {CheckRefTag, ErrorRefTag},
		{0x80 | 0x02, ErrorRefTag}, {0x40 | 0x02, ErrorGuard}, {0x30, 0},
	} {
		err := Verify(d, tc.check, buf)
		if tc.typ == 0 {
			assert.NoError(t, err, "check %#02x", uint8(tc.check))
			continue
		}
		e := wantErrType(t, err, tc.typ, 1)
		// Expected and Actual are the whole fields, unmasked.
		if tc.typ == ErrorRefTag {
			assert.EqualValues(t, 0x11223345, e.Expected, "check %#02x: %+v", uint8(tc.check), *e)
			assert.EqualValues(t, 0x11223345^0x0100, e.Actual, "check %#02x: %+v", uint8(tc.check), *e)
		}
	}
}

// A6 and B: parameter validation.
func TestParamValidation(t *testing.T) {
	ok := Domain{Format: FormatPI8, Type: Type1, Interval: 512}
	ok16 := Domain{Format: FormatPI16, Type: Type1, Interval: 4096}
	with := func(d Domain, f func(*Domain)) Domain { f(&d); return d }
	type tc struct {
		name string
		cfg  Config
		want error // nil: valid
	}
	cases := []tc{
		{"valid pi8", Config{In: ok, Check: CheckAll, Discard: true}, nil},
		{"valid pi16", Config{Out: ok16}, nil},
		{"plain copy", Config{}, nil},
		{"bad format", Config{Out: with(ok, func(d *Domain) { d.Format = numFormats })}, ErrBadFormat},
		{"bad format 255", Config{In: with(ok, func(d *Domain) { d.Format = 255 })}, ErrBadFormat},
		{"bad guard", Config{Out: with(ok, func(d *Domain) { d.Guard = 4 })}, ErrBadGuard},
		{"crc64 on pi8", Config{Out: with(ok, func(d *Domain) { d.Guard = GuardCRC64NVMe })}, ErrBadGuard},
		{"crc16 on pi16", Config{Out: with(ok16, func(d *Domain) { d.Guard = GuardCRC16 })}, ErrBadGuard},
		{"ipcsum on pi16", Config{Out: with(ok16, func(d *Domain) { d.Guard = GuardIPChecksum })}, ErrBadGuard},
		{"crc16 on pi8", Config{Out: with(ok, func(d *Domain) { d.Guard = GuardCRC16 })}, nil},
		{"crc64 on pi16", Config{Out: with(ok16, func(d *Domain) { d.Guard = GuardCRC64NVMe })}, nil},
		{"type 0", Config{Out: with(ok, func(d *Domain) { d.Type = 0 })}, ErrBadType},
		{"type 4", Config{In: with(ok16, func(d *Domain) { d.Type = 4 })}, ErrBadType},
		// SPDK dif_sec_8_md_8: a data block of 0.
		{"interval 0", Config{Out: with(ok, func(d *Domain) { d.Interval = 0 })}, ErrBadInterval},
		{"interval -8", Config{Out: with(ok, func(d *Domain) { d.Interval = -8 })}, ErrBadInterval},
		{"interval 4", Config{Out: with(ok, func(d *Domain) { d.Interval = 4 })}, ErrBadInterval},
		{"interval 12", Config{Out: with(ok, func(d *Domain) { d.Interval = 12 })}, ErrBadInterval},
		// SPDK dif_sec_4100_md_128 (32b/64b).
		{"interval 4100", Config{In: with(ok16, func(d *Domain) { d.Interval = 4100; d.MetaSize = 128 })}, ErrBadInterval},
		{"interval max+8", Config{Out: with(ok, func(d *Domain) { d.Interval = MaxInterval + 8 })}, ErrBadInterval},
		{"interval max", Config{Out: with(ok, func(d *Domain) { d.Interval = MaxInterval })}, nil},
		{"interval 8", Config{Out: with(ok, func(d *Domain) { d.Interval = 8 })}, nil},
		// SPDK rejects 512 for 64b PI; this engine allows any multiple of 8.
		{"pi16 interval 512", Config{Out: with(ok16, func(d *Domain) { d.Interval = 512 })}, nil},
		{"pi16 interval 8", Config{Out: with(ok16, func(d *Domain) { d.Interval = 8 })}, nil},
		{"meta 7", Config{Out: with(ok, func(d *Domain) { d.MetaSize = 7 })}, ErrBadMetaSize},
		{"meta -1", Config{Out: with(ok, func(d *Domain) { d.MetaSize = -1 })}, ErrBadMetaSize},
		// SPDK dif_sec_4096_md_0_8 (64b): metadata 8 smaller than the PI.
		{"pi16 meta 8", Config{Out: with(ok16, func(d *Domain) { d.MetaSize = 8 })}, ErrBadMetaSize},
		{"pi16 meta 15", Config{In: with(ok16, func(d *Domain) { d.MetaSize = 15 })}, ErrBadMetaSize},
		{"meta 4097", Config{Out: with(ok, func(d *Domain) { d.MetaSize = MaxMetaSize + 1 })}, ErrBadMetaSize},
		{"meta 4096", Config{Out: with(ok, func(d *Domain) { d.MetaSize = MaxMetaSize })}, nil},
		{"meta 9", Config{Out: with(ok, func(d *Domain) { d.MetaSize = 9 })}, nil},
		{"escape 4", Config{Out: with(ok, func(d *Domain) { d.Escape = 4 })}, ErrBadEscape},
		{"ref mode 3", Config{Out: with(ok, func(d *Domain) { d.Ref = 3 })}, ErrBadRefMode},
		{"pi8 ref 2^32", Config{Out: with(ok, func(d *Domain) { d.RefTag = 1 << 32 })}, ErrBadTag},
		{"pi8 ref max", Config{Out: with(ok, func(d *Domain) { d.RefTag = 1<<32 - 1 })}, nil},
		{"pi16 ref 2^48", Config{Out: with(ok16, func(d *Domain) { d.RefTag = 1 << 48 })}, ErrBadTag},
		{"pi16 ref max", Config{Out: with(ok16, func(d *Domain) { d.RefTag = 1<<48 - 1 })}, nil},
		{"crc16 seed 0x10000", Config{Out: with(ok, func(d *Domain) { d.Seed = 0x10000 })}, ErrBadTag},
		{"crc16 seed 0xffff", Config{Out: with(ok, func(d *Domain) { d.Seed = 0xFFFF })}, nil},
		{"ip seed 0x10000", Config{Out: with(ok, func(d *Domain) { d.Guard = GuardIPChecksum; d.Seed = 0x10000 })}, ErrBadTag},
		{"crc64 seed ones", Config{Out: with(ok16, func(d *Domain) { d.Seed = ^uint64(0) })}, nil},
		{"separate without PI", Config{In: Domain{Separate: true}}, ErrBadLayout},
		{"separate output without PI", Config{In: ok, Out: Domain{Separate: true}}, ErrBadLayout},
		{"discard with output PI", Config{In: ok, Out: ok, Discard: true}, ErrBadLayout},
		{"discard plain", Config{Discard: true}, nil},
		{"pi16 check 0x80", Config{In: ok16, Check: 0x80, Discard: true}, ErrBadMask},
		{"pi16 check 0x10", Config{In: ok16, Check: 0x10}, ErrBadMask},
		{"pi16 check 0x0E", Config{In: ok16, Check: CheckGuard | 0x0E}, ErrBadMask},
		{"pi16 check 0x01", Config{In: ok16, Check: 0x01}, ErrBadMask},
		{"pi16 check fields", Config{In: ok16, Check: CheckGuard | CheckRefTag}, nil},
		{"pi8 check 0x81", Config{In: ok, Check: 0x81}, nil},
		{"check ignored without input PI", Config{Out: ok16, Check: 0x81}, nil},
		{"pi16 copy 0x40", Config{In: ok16, Out: ok16, Copy: 0x40}, ErrBadMask},
		{"pi16 copy fields", Config{In: ok16, Out: ok16, Copy: CheckAppTag}, nil},
		{"pi8 copy 0x41", Config{In: ok, Out: ok, Copy: 0x41}, nil},
		{"copy across formats", Config{In: with(ok, func(d *Domain) { d.MetaSize = 16 }), Out: with(ok16, func(d *Domain) { d.Interval = 512 }), Copy: CheckAppTag}, ErrBadMask},
		{"copy across intervals", Config{In: ok, Out: with(ok, func(d *Domain) { d.Interval = 4096 }), Copy: CheckRefTag}, ErrBadMask},
		{"copy across meta sizes", Config{In: ok, Out: with(ok, func(d *Domain) { d.MetaSize = 16 }), Copy: CheckGuard}, ErrBadMask},
		{"copy across PI positions", Config{In: with(ok, func(d *Domain) { d.MetaSize = 16 }), Out: with(ok, func(d *Domain) { d.MetaSize = 16; d.PIFirst = true }), Copy: CheckGuard}, ErrBadMask},
		{"copy, tuple fills meta, positions differ", Config{In: ok, Out: with(ok, func(d *Domain) { d.PIFirst = true }), Copy: CheckGuard}, nil},
		{"copy DIF to DIX", Config{In: ok, Out: with(ok, func(d *Domain) { d.Separate = true }), Copy: CheckAll}, nil},
		{"copy ignored without output PI", Config{In: ok16, Copy: 0x40}, nil},
		{"copy ignored without input PI", Config{Out: ok16, Copy: 0x40}, nil},
		{"re-blocking", Config{In: ok, Out: with(ok16, func(d *Domain) { d.Interval = 4096 })}, nil},
		{"re-blocking with copy", Config{In: ok, Out: with(ok, func(d *Domain) { d.Interval = 4096 }), Copy: CheckAppTag}, ErrBadMask},
	}
	sentinels := paramSentinels
	checkErr := func(t *testing.T, what string, err, want error) {
		t.Helper()
		if want == nil {
			assert.NoError(t, err, what)
			return
		}
		assert.ErrorIs(t, err, want, what)
		assert.ErrorIs(t, err, ErrParam, what)
		for _, s := range sentinels {
			if s != want {
				assert.NotErrorIs(t, err, s, "%s: also matches another sentinel", what)
			}
		}
		var e *Error
		assert.NotErrorAs(t, err, &e, "%s: a parameter error is an *Error", what)
		for _, s := range []error{ErrGuard, ErrRefTag, ErrAppTag} {
			assert.NotErrorIs(t, err, s, "%s: matches a PI sentinel", what)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkErr(t, "Validate", c.cfg.Validate(), c.want)
			s, err := NewStream(&c.cfg)
			checkErr(t, "NewStream", err, c.want)
			assert.Equal(t, err != nil, s == nil, "NewStream = %v, %v", s, err)
			// Apply on an empty input reports the same parameter error.
			n, err := Apply(&c.cfg, Buf{}, Buf{})
			checkErr(t, "Apply", err, c.want)
			assert.Zero(t, n, "Apply wrote bytes")
			// Domain.Validate agrees for single-domain errors.
			for _, d := range []Domain{c.cfg.In, c.cfg.Out} {
				if c.want == nil {
					assert.NoError(t, d.Validate(), "Domain.Validate")
				}
			}
		})
	}
}

// Length errors of Apply.
func TestApplyLengthErrors(t *testing.T) {
	d := Domain{Format: FormatPI8, Type: Type1, Interval: 512}
	dix := d
	dix.Separate = true
	d16 := Domain{Format: FormatPI16, Type: Type1, Interval: 4096}
	for _, tc := range []struct {
		name     string
		cfg      Config
		dst, src Buf
		want     error
	}{
		{"generate partial", Config{Out: d}, Buf{Data: make([]byte, 1040)}, Buf{Data: make([]byte, 1000)}, ErrBadLength},
		{"verify partial", Config{In: d, Discard: true}, Buf{}, Buf{Data: make([]byte, 521)}, ErrBadLength},
		{"verify data only", Config{In: d, Discard: true}, Buf{}, Buf{Data: make([]byte, 512)}, ErrBadLength},
		{"strip dst short", Config{In: d}, Buf{Data: make([]byte, 1023)}, Buf{Data: make([]byte, 1040)}, ErrShortBuffer},
		{"generate dst short", Config{Out: d}, Buf{Data: make([]byte, 1039)}, Buf{Data: make([]byte, 1024)}, ErrShortBuffer},
		{"plain dst short", Config{}, Buf{Data: make([]byte, 9)}, Buf{Data: make([]byte, 10)}, ErrShortBuffer},
		{"dix src meta short", Config{In: dix, Discard: true}, Buf{}, Buf{Data: make([]byte, 1024), Meta: make([]byte, 15)}, ErrShortBuffer},
		{"dix strip src meta short", Config{In: dix, Check: CheckAll}, Buf{Data: make([]byte, 1024)}, Buf{Data: make([]byte, 1024), Meta: make([]byte, 8)}, ErrShortBuffer},
		{"dix pass src meta short", Config{In: dix, Out: dix, Copy: CheckAll}, Buf{Data: make([]byte, 1024), Meta: make([]byte, 16)}, Buf{Data: make([]byte, 1024), Meta: make([]byte, 15)}, ErrShortBuffer},
		{"dix dst meta short", Config{Out: dix}, Buf{Data: make([]byte, 1024), Meta: make([]byte, 8)}, Buf{Data: make([]byte, 1024)}, ErrShortBuffer},
		{"re-block not a multiple", Config{In: d, Out: d16}, Buf{Data: make([]byte, 8192)}, Buf{Data: make([]byte, 3*520)}, ErrBadLength},
		{"dix dst short data", Config{In: d, Out: dix, Copy: CheckAll}, Buf{Data: make([]byte, 1000), Meta: make([]byte, 16)}, Buf{Data: make([]byte, 1040)}, ErrShortBuffer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := Apply(&tc.cfg, tc.dst, tc.src)
			require.ErrorIs(t, err, tc.want, "Apply")
			require.ErrorIs(t, err, ErrParam, "Apply")
			require.Zero(t, n, "Apply wrote bytes")
		})
	}
	// Longer buffers are fine: only the needed bytes are written.
	out := make([]byte, 2000)
	fillJunk(out)
	junk := append([]byte{}, out...)
	n, err := Generate(d, Buf{Data: out}, make([]byte, 1024))
	require.NoError(t, err, "Generate into a long buffer")
	require.Equal(t, 1040, n, "Generate into a long buffer")
	require.True(t, bytes.Equal(out[1040:], junk[1040:]), "Generate into a long buffer wrote past its output")
	// Zero blocks is not an error.
	n, err = Generate(d, Buf{}, nil)
	require.NoError(t, err, "Generate of nothing")
	require.Zero(t, n, "Generate of nothing")
	require.NoError(t, Verify(d, CheckAll, Buf{}), "Verify of nothing")
}

// C13: the guard seed.
func TestSPDKGuardSeed(t *testing.T) {
	zero := make([]byte, 512)
	for _, tc := range []struct {
		d     Domain
		zeroG uint64 // guard of the zero block with seed 0
	}{
		{Domain{Format: FormatPI8, Type: Type1, Interval: 512}, 0},
		{Domain{Format: FormatPI8, Type: Type1, Interval: 512, Guard: GuardIPChecksum}, 0xFFFF},
		{Domain{Format: FormatPI16, Type: Type1, Interval: 512}, refCRC64NVMe(0, zero)},
	} {
		s := mkSide(tc.d)
		buf := mustGenerate(t, tc.d, zero)
		assert.Equal(t, tc.zeroG, getBE(buf.Data[512:512+s.gl]), "%v seed 0: guard", tc.d.Guard)
		assert.NoError(t, Verify(tc.d, CheckAll, buf), "%v seed 0", tc.d.Guard)
		seeded := tc.d
		seeded.Seed = 0xCD
		sbuf := mustGenerate(t, seeded, zero)
		g := getBE(sbuf.Data[512 : 512+s.gl])
		assert.NotEqual(t, tc.zeroG, g, "%v seed 0xcd: guard unchanged", tc.d.Guard)
		if s.guard == GuardCRC16 {
			assert.NotZero(t, g, "%v seed 0xcd: guard", tc.d.Guard)
		}
		assert.NoError(t, Verify(seeded, CheckAll, sbuf), "%v seed 0xcd", tc.d.Guard)
		e := wantErrType(t, Verify(tc.d, CheckAll, sbuf), ErrorGuard, 0)
		assert.EqualValues(t, tc.zeroG, e.Expected, "%v seed mismatch: %+v", tc.d.Guard, *e)
		assert.EqualValues(t, getBE(sbuf.Data[512:512+s.gl]), e.Actual, "%v seed mismatch: %+v", tc.d.Guard, *e)
	}
}

// C14: the NVMe 1.0c 4 KiB vectors through generate, and a hand-built
// tuple through verify.
func TestSPDKGuardValues(t *testing.T) {
	pat := func(f func(i int) byte) []byte {
		b := make([]byte, 4096)
		for i := range b {
			b[i] = f(i)
		}
		return b
	}
	for _, tc := range []struct {
		name  string
		data  []byte
		crc16 uint16
		crc64 uint64
	}{
		{"zeros", pat(func(int) byte { return 0 }), 0x0000, 0x6482D367EB22B64E},
		{"ones", pat(func(int) byte { return 0xFF }), 0x8B5D, 0xC0DDBA7302ECA3AC},
		{"inc", pat(func(i int) byte { return byte(i) }), 0x8F6D, 0x3E729F5F6750449C},
		{"dec", pat(func(i int) byte { return 255 - byte(i) }), 0x0430, 0x9A2DF64B8E9E517E},
	} {
		d16 := Domain{Format: FormatPI16, Type: Type1, Interval: 4096, RefTag: 5}
		buf := mustGenerate(t, d16, tc.data)
		assert.Equal(t, tc.crc64, binary.BigEndian.Uint64(buf.Data[4096:]), "%s: pi16 guard", tc.name)
		d8 := Domain{Format: FormatPI8, Type: Type1, Interval: 4096, RefTag: 5}
		buf = mustGenerate(t, d8, tc.data)
		assert.Equal(t, tc.crc16, binary.BigEndian.Uint16(buf.Data[4096:]), "%s: pi8 guard", tc.name)
		// Hand-built tuples verify.
		hand := append(append([]byte{}, tc.data...), binary.BigEndian.AppendUint64(nil, tc.crc64)...)
		hand = append(hand, 0x00, 0x07, 0, 0, 0, 0, 0, 5)
		d16.AppTag, d16.AppTagMask = 7, 0xFFFF
		assert.NoError(t, Verify(d16, CheckAll, Buf{Data: hand}), "%s: hand-built pi16", tc.name)
		hand = append(append([]byte{}, tc.data...), byte(tc.crc16>>8), byte(tc.crc16), 0, 7, 0, 0, 0, 5)
		d8.AppTag, d8.AppTagMask = 7, 0xFFFF
		assert.NoError(t, Verify(d8, CheckAll, Buf{Data: hand}), "%s: hand-built pi8", tc.name)
	}
}

// Reference tags wrap at the format's width.
func TestRefTagWrap(t *testing.T) {
	for _, tc := range []struct {
		f    Format
		ref  uint64
		typ  DIFType
		mode RefMode
		want []uint64
	}{
		{FormatPI8, 0xFFFFFFFE, Type1, RefDefault, []uint64{0xFFFFFFFE, 0xFFFFFFFF, 0, 1}},
		{FormatPI8, 0xFFFFFFFF, Type2, RefDefault, []uint64{0xFFFFFFFF, 0, 1, 2}},
		{FormatPI16, 1<<48 - 2, Type1, RefDefault, []uint64{1<<48 - 2, 1<<48 - 1, 0, 1}},
		{FormatPI16, 0xFFFFFFFF, Type1, RefDefault, []uint64{0xFFFFFFFF, 1 << 32, 1<<32 + 1, 1<<32 + 2}},
		{FormatPI8, 7, Type3, RefDefault, []uint64{7, 7, 7, 7}},
		{FormatPI8, 7, Type3, RefIncrement, []uint64{7, 8, 9, 10}},
		{FormatPI16, 1<<48 - 1, Type3, RefIncrement, []uint64{1<<48 - 1, 0, 1, 2}},
		{FormatPI8, 7, Type1, RefConstant, []uint64{7, 7, 7, 7}},
	} {
		d := Domain{Format: tc.f, Type: tc.typ, Interval: 8, RefTag: tc.ref, Ref: tc.mode}
		buf := mustGenerate(t, d, spdkData(32))
		s := mkSide(d)
		for i, w := range tc.want {
			tup := buf.Data[i*s.unit()+8:][:s.tuple]
			assert.Equal(t, w, getBE(tup[s.gl+2:]), "%v ref %#x %v/%d block %d: ref", tc.f, tc.ref, tc.typ, tc.mode, i)
		}
		assert.NoError(t, Verify(d, CheckAll, buf), "%v ref %#x", tc.f, tc.ref)
		// Block 2's expected ref, shown in an error.
		bad := cloneBuf(buf)
		bad.Data[2*s.unit()+8+s.tuple-1] ^= 1
		e := wantErrType(t, Verify(d, CheckAll, bad), ErrorRefTag, 2)
		assert.EqualValues(t, tc.want[2], e.Expected, "%v ref %#x: %+v", tc.f, tc.ref, *e)
		assert.EqualValues(t, tc.want[2]^1, e.Actual, "%v ref %#x: %+v", tc.f, tc.ref, *e)
	}
}

// Priority guard > reftag > apptag within a block; the first block wins.
func TestErrorPriorityAndOrder(t *testing.T) {
	for _, f := range []Format{FormatPI8, FormatPI16} {
		d := Domain{Format: f, Type: Type1, Interval: 512, RefTag: 100, AppTag: 0x42, AppTagMask: 0xFFFF}
		s := mkSide(d)
		data := spdkData(4 * 512)
		clean := mustGenerate(t, d, data)
		tup := func(b Buf, blk int) []byte { return b.Data[blk*s.unit()+512:][:s.tuple] }
		for _, tc := range []struct {
			name   string
			fields string // g, a, r
			check  CheckMask
			want   ErrorType
		}{
			{"all", "gar", CheckAll, ErrorGuard},
			{"ref+app", "ar", CheckAll, ErrorRefTag},
			{"app", "a", CheckAll, ErrorAppTag},
			{"all, guard unchecked", "gar", CheckAppTag | CheckRefTag, ErrorRefTag},
			{"all, app only", "gar", CheckAppTag, ErrorAppTag},
			{"guard+app", "ga", CheckAll, ErrorGuard},
			{"guard+app, guard unchecked", "ga", CheckAppTag | CheckRefTag, ErrorAppTag},
		} {
			b := cloneBuf(clean)
			t2 := tup(b, 2)
			if strings.Contains(tc.fields, "g") {
				t2[0] ^= 1
			}
			if strings.Contains(tc.fields, "a") {
				t2[s.gl+1] ^= 1
			}
			if strings.Contains(tc.fields, "r") {
				t2[s.tuple-1] ^= 1
			}
			// A later block is also bad; an earlier one is escaped and bad.
			tup(b, 3)[0] ^= 0xFF
			putBE(tup(b, 1)[s.gl:s.gl+2], 0xFFFF)
			tup(b, 1)[0] ^= 0xFF
			e := wantErrType(t, Verify(d, tc.check, b), tc.want, 2)
			assert.EqualValues(t, 1024, e.Offset, "%v %s: offset", f, tc.name)
			assert.Equal(t, 2*uint64(s.unit()), e.ProtectedOffset, "%v %s: protected offset", f, tc.name)
		}
	}
}

// F: injection of each field at a chosen block, detected at that block
// with the right offsets, in DIF and DIX, one-shot and split; the output is
// produced in full.
func TestSPDKInjection(t *testing.T) {
	geos := spdkGeometries()
	if testing.Short() {
		geos = geos[:8]
	}
	const nb = 4
	for _, g := range geos {
		for _, sep := range []bool{false, true} {
			d := g.domain(Type1, sep)
			d.RefTag, d.AppTag, d.AppTagMask, d.Seed = 0x1000, 0x5A5A, 0xFFFF, 0xCD
			s := mkSide(d)
			data := spdkData(nb * g.interval)
			clean := mustGenerate(t, d, data)
			fields := []string{"guard", "app", "ref", "data"}
			if s.prefix > 0 {
				fields = append(fields, "prefix")
			}
			if g.first && s.meta > s.tuple {
				fields = append(fields, "suffix")
			}
			for _, field := range fields {
				for _, blk := range []int{0, 2, nb - 1} {
					for _, bit := range []byte{0x01, 0x80} {
						name := fmt.Sprintf("%s/sep=%v/%s/blk%d/bit%#x", g.name, sep, field, blk, bit)
						b := cloneBuf(clean)
						var meta []byte
						if sep {
							meta = b.Meta[blk*s.meta:][:s.meta]
						} else {
							meta = b.Data[blk*s.unit()+g.interval:][:s.meta]
						}
						tup := meta[s.piOff:][:s.tuple]
						blkData := b.Data[blk*s.unit():][:g.interval]
						var want *Error
						mk := func(typ ErrorType, exp, act uint64) *Error {
							return &Error{Type: typ, Block: uint64(blk), Offset: uint64(blk * g.interval),
								ProtectedOffset: uint64(blk * (g.interval + s.meta)), Expected: exp, Actual: act}
						}
						orig := getBE(tup[:s.gl])
						switch field {
						case "guard":
							k := s.gl - 1
							tup[k] ^= bit
							want = mk(ErrorGuard, orig, getBE(tup[:s.gl]))
						case "app":
							tup[s.gl] ^= bit
							want = mk(ErrorAppTag, 0x5A5A, getBE(tup[s.gl:s.gl+2]))
						case "ref":
							tup[s.gl+3] ^= bit
							want = mk(ErrorRefTag, 0x1000+uint64(blk), getBE(tup[s.gl+2:]))
						case "data":
							blkData[g.interval/3] ^= bit
							want = mk(ErrorGuard, s.guardOf(blkData, meta[:s.prefix]), orig)
						case "prefix":
							meta[s.prefix-1] ^= bit
							want = mk(ErrorGuard, s.guardOf(blkData, meta[:s.prefix]), orig)
						case "suffix":
							meta[s.meta-1] ^= bit
							want = nil // not covered by the guard
						}
						checkInjected(t, name, d, b, data, want, field == "data", blk)
					}
				}
			}
		}
	}
}

func checkInjected(t *testing.T, name string, d Domain, b Buf, data []byte, want *Error, dataHit bool, blk int) {
	t.Helper()
	require.Empty(t, sameErr(Verify(d, CheckAll, b), want), "%s: verify", name)
	// Strip: all the data is produced, intact except the injected byte.
	out := make([]byte, len(data))
	n, err := Strip(d, CheckAll, out, b)
	require.Empty(t, sameErr(err, want), "%s: strip", name)
	require.Equal(t, len(data), n, "%s: strip", name)
	i := firstDiff(out, data)
	require.Equal(t, dataHit, i >= 0, "%s: strip data differs at %d", name, i)
	if dataHit {
		require.Equal(t, blk, i/d.Interval, "%s: strip data differs at %d", name, i)
	}
	// Pass: the output is the input.
	pout := Buf{Data: make([]byte, len(b.Data))}
	if b.Meta != nil {
		pout.Meta = make([]byte, len(b.Meta))
	}
	n, err = Pass(d, CheckAll, pout, b)
	require.Empty(t, sameErr(err, want), "%s: pass", name)
	require.Equal(t, len(b.Data), n, "%s: pass", name)
	require.True(t, bytes.Equal(pout.Data, b.Data) && bytes.Equal(pout.Meta, b.Meta), "%s: pass output differs from its input", name)
	// Split into 1-byte and odd pieces through a Stream.
	c := Config{In: d, Check: CheckAll, Discard: true}
	for _, piece := range []int{1, 7, d.Interval + 3} {
		_, err := streamPieces(t, &c, Buf{}, b, fixedPieces(piece), fixedPieces(piece))
		require.Empty(t, sameErr(err, want), "%s: stream pieces %d", name, piece)
	}
}

// G: insert and strip round trips for every check mask, DIF and DIX; a
// disabled DIF is a plain copy.
func TestSPDKCopyInsertStrip(t *testing.T) {
	for _, g := range spdkGeometries() {
		for _, sep := range []bool{false, true} {
			for _, check := range []CheckMask{0, CheckGuard, CheckAppTag, CheckRefTag, CheckAll} {
				d := g.domain(Type1, sep)
				d.RefTag, d.AppTag, d.AppTagMask = 0x77, 0x88, 0xFFFF
				s := mkSide(d)
				data := spdkData(4 * g.interval)
				src := append([]byte{}, data...)
				bounce := mustGenerate(t, d, src)
				require.True(t, bytes.Equal(src, data), "generate changed its source")
				// The bounce holds the pattern and zeroed non-tuple metadata.
				for i := range 4 {
					var m []byte
					if sep {
						m = bounce.Meta[i*s.meta:][:s.meta]
					} else {
						m = bounce.Data[i*s.unit()+g.interval:][:s.meta]
					}
					require.True(t, bytes.Equal(bounce.Data[i*s.unit():][:g.interval], data[i*g.interval:][:g.interval]), "%s: bounce data block %d", g.name, i)
					rest := append(append([]byte{}, m[:s.piOff]...), m[s.piOff+s.tuple:]...)
					require.True(t, bytes.Equal(rest, make([]byte, len(rest))), "%s: bounce metadata block %d not zero outside the tuple", g.name, i)
				}
				back := make([]byte, len(data))
				n, err := Strip(d, check, back, bounce)
				require.NoError(t, err, "%s check %#x: strip", g.name, uint8(check))
				require.Equal(t, len(data), n, "%s check %#x: strip", g.name, uint8(check))
				require.True(t, bytes.Equal(back, data), "%s check %#x: strip data differs", g.name, uint8(check))
			}
		}
	}
	// DIF disabled: copy only.
	data := spdkData(1000)
	out := make([]byte, 1000)
	n, err := Apply(&Config{Check: CheckAll, Copy: CheckAll}, Buf{Data: out}, Buf{Data: data})
	require.NoError(t, err, "plain copy")
	require.Equal(t, 1000, n, "plain copy")
	require.True(t, bytes.Equal(out, data), "plain copy data differs")
	require.NoError(t, Verify(Domain{}, CheckAll, Buf{Data: data}), "verify without PI")
}

// H: NVMe PRACT-like operation with metadata larger than the tuple.
func TestSPDKPract(t *testing.T) {
	for _, f := range []Format{FormatPI8, FormatPI16} {
		for _, first := range []bool{false, true} {
			for _, sep := range []bool{false, true} {
				name := fmt.Sprintf("%v/first=%v/sep=%v", f, first, sep)
				d := Domain{Format: f, Type: Type1, Interval: 4096, MetaSize: 128, PIFirst: first, Separate: sep,
					RefTag: 9, AppTag: 0x99, AppTagMask: 0xFFFF}
				s := mkSide(d)
				data := spdkData(3 * 4096)
				// Extended blocks with host metadata in the non-PI bytes.
				in := modelBuild(d, data, func(b int, m []byte) {
					for i := range m {
						m[i] = byte(0x30 + b + i)
					}
				})
				// Pass: everything copied.
				want := modelApply(&Config{In: d, Out: d, Check: CheckAll, Copy: CheckAll}, in)
				require.True(t, bytes.Equal(want.data, in.Data) && (!sep || bytes.Equal(want.meta, in.Meta)), "%s: model pass is not the identity", name)
				applyChecked(t, &Config{In: d, Out: d, Check: CheckAll, Copy: CheckAll}, in, name+" pass")
				// PRACT: regenerate the PI with a new app tag; the other
				// metadata bytes are copied and, PI last, covered.
				out := d
				out.AppTag = 0x1111
				c := Config{In: d, Out: out, Check: CheckAll}
				applyChecked(t, &c, in, name+" pract")
				res := modelApply(&c, in)
				for b := range 3 {
					var m []byte
					if sep {
						m = res.meta[b*128:][:128]
					} else {
						m = res.data[b*s.unit()+4096:][:128]
					}
					for i := range m {
						if i < s.piOff || i >= s.piOff+s.tuple {
							require.Equal(t, byte(0x30+b+i), m[i], "%s: non-PI metadata byte %d of block %d not copied", name, i, b)
						}
					}
				}
				// Insert from data: the other metadata bytes are zero.
				ins := mustGenerate(t, d, data)
				var m []byte
				if sep {
					m = ins.Meta[:128]
				} else {
					m = ins.Data[4096 : 4096+128]
				}
				for i := range m {
					if i < s.piOff || i >= s.piOff+s.tuple {
						require.Zero(t, m[i], "%s: insert wrote to non-PI metadata byte %d", name, i)
					}
				}
				// In place: the tuples are filled, the rest kept.
				junkTuples := cloneBuf(in)
				for b := range 3 {
					var m []byte
					if sep {
						m = junkTuples.Meta[b*128:][:128]
					} else {
						m = junkTuples.Data[b*s.unit()+4096:][:128]
					}
					fillJunk(m[s.piOff : s.piOff+s.tuple])
				}
				require.NoError(t, GenerateInPlace(d, junkTuples))
				require.True(t, bytes.Equal(junkTuples.Data, in.Data) && bytes.Equal(junkTuples.Meta, in.Meta), "%s: GenerateInPlace differs from the model", name)
			}
		}
	}
}

// M: ref-tag remap through Translate, copying guard and app tag.
func TestSPDKRemap(t *testing.T) {
	for _, g := range spdkGeometries()[:8] {
		for _, sep := range []bool{false, true} {
			for _, refs := range [][2]uint64{{0x1000, 0x2000}, {0, g.format.RefTagMax() - 1}, {g.format.RefTagMax(), 5}} {
				name := fmt.Sprintf("%s/sep=%v/%#x->%#x", g.name, sep, refs[0], refs[1])
				d := g.domain(Type1, sep)
				d.RefTag, d.AppTag, d.AppTagMask = refs[0], 0x4242, 0xFFFF
				data := spdkData(4 * g.interval)
				buf := mustGenerate(t, d, data)
				nd := d
				nd.RefTag = refs[1]
				nd.AppTag = 0 // not used: the app tag is copied
				out := outBufs(modelApply(&Config{In: d, Out: nd}, buf))
				n, err := Translate(d, nd, CheckAll, CheckGuard|CheckAppTag, out, buf)
				require.NoError(t, err, "%s: translate", name)
				require.Equal(t, len(buf.Data), n, "%s: translate", name)
				out.Data = out.Data[:n]
				if out.Meta != nil {
					out.Meta = out.Meta[:len(buf.Meta)]
				}
				nd.AppTag = 0x4242
				require.NoError(t, Verify(nd, CheckAll, out), "%s: verify at the new ref", name)
				e := wantErrType(t, Verify(d, CheckAll, out), ErrorRefTag, 0)
				assert.Equal(t, refs[0], e.Expected, "%s: old ref check %+v", name, *e)
				assert.Equal(t, refs[1], e.Actual, "%s: old ref check %+v", name, *e)
				// Only the ref tags changed.
				s := mkSide(d)
				for b := range 4 {
					var ti, to []byte
					if sep {
						ti, to = buf.Meta[b*s.meta+s.piOff:][:s.tuple], out.Meta[b*s.meta+s.piOff:][:s.tuple]
					} else {
						off := b*s.unit() + g.interval + s.piOff
						ti, to = buf.Data[off:][:s.tuple], out.Data[off:][:s.tuple]
					}
					require.Equal(t, ti[:s.gl+2], to[:s.gl+2], "%s: block %d tuple % x -> % x", name, b, ti, to)
					require.Equal(t, (refs[1]+uint64(b))&s.refMax, getBE(to[s.gl+2:]), "%s: block %d tuple % x -> % x: ref", name, b, ti, to)
				}
				// A corrupted input keeps its (now wrong) guard through the
				// remap: the error is reported and survives downstream.
				bad := cloneBuf(buf)
				bad.Data[g.interval/2] ^= 4
				out2 := outBufs(modelApply(&Config{In: d, Out: nd}, bad))
				_, err = Translate(d, nd, CheckAll, CheckGuard|CheckAppTag, out2, bad)
				wantErrType(t, err, ErrorGuard, 0)
				out2.Data = out2.Data[:len(bad.Data)]
				if out2.Meta != nil {
					out2.Meta = out2.Meta[:len(bad.Meta)]
				}
				wantErrType(t, Verify(nd, CheckAll, out2), ErrorGuard, 0)
				// The same through a stream in small pieces.
				c := Config{In: d, Out: nd, Check: CheckAll, Copy: CheckGuard | CheckAppTag}
				streamVsApply(t, &c, buf, fixedPieces(3), fixedPieces(5), name)
			}
		}
	}
}

// Guard translation IP checksum -> CRC keeps the tags (the iSER case).
func TestTranslateGuard(t *testing.T) {
	ip := Domain{Format: FormatPI8, Guard: GuardIPChecksum, Type: Type1, Interval: 512, RefTag: 3, AppTag: 0x10, AppTagMask: 0xFFFF, Separate: true}
	crc := ip
	crc.Guard, crc.Separate, crc.AppTag, crc.RefTag = GuardCRC16, false, 0, 0
	data := spdkData(8 * 512)
	host := mustGenerate(t, ip, data)
	wire := make([]byte, 8*520)
	n, err := Translate(ip, crc, CheckAll, CheckAppTag|CheckRefTag, Buf{Data: wire}, host)
	require.NoError(t, err, "translate")
	require.Equal(t, len(wire), n, "translate")
	crc.AppTag, crc.RefTag = 0x10, 3
	require.NoError(t, Verify(crc, CheckAll, Buf{Data: wire}), "wire verify")
	require.True(t, bytes.Equal(wire, mustGenerate(t, crc, data).Data), "translated wire differs from a direct generate")
	// And back, in place on a DIF copy.
	back := append([]byte{}, wire...)
	ipDIF := ip
	ipDIF.Separate = false
	_, err = Translate(crc, ipDIF, CheckAll, CheckAppTag|CheckRefTag, Buf{Data: back}, Buf{Data: back})
	require.NoError(t, err, "in-place translate back")
	require.True(t, bytes.Equal(back, mustGenerate(t, ipDIF, data).Data), "in-place translate back differs")
}

// Re-blocking: regenerate PI at another interval.
func TestReblocking(t *testing.T) {
	data := spdkData(8192)
	in := Domain{Format: FormatPI8, Type: Type1, Interval: 512, RefTag: 10, AppTag: 1, AppTagMask: 0xFFFF}
	out := Domain{Format: FormatPI16, Type: Type1, Interval: 4096, RefTag: 1000, AppTag: 2, MetaSize: 32}
	src := mustGenerate(t, in, data)
	dst := make([]byte, 2*(4096+32))
	n, err := Apply(&Config{In: in, Out: out, Check: CheckAll}, Buf{Data: dst}, src)
	require.NoError(t, err, "re-block")
	require.Equal(t, len(dst), n, "re-block")
	require.True(t, bytes.Equal(dst, mustGenerate(t, out, data).Data), "re-blocked output differs from a direct generate")
	// An input error is reported in input blocks; output still complete.
	bad := cloneBuf(src)
	bad.Data[5*520+100] ^= 1
	fillJunk(dst)
	_, err = Apply(&Config{In: in, Out: out, Check: CheckAll}, Buf{Data: dst}, bad)
	e := wantErrType(t, err, ErrorGuard, 5)
	assert.EqualValues(t, 5*512, e.Offset, "offsets %+v", *e)
	assert.EqualValues(t, 5*520, e.ProtectedOffset, "offsets %+v", *e)
	corrupted := append([]byte{}, data...)
	corrupted[5*512+100] ^= 1
	require.True(t, bytes.Equal(dst, mustGenerate(t, out, corrupted).Data), "re-blocked output of a bad input is not its data's generate")
	// And back down, DIX.
	out.Separate = true
	mid := mustGenerate(t, out, data)
	back := make([]byte, len(src.Data))
	n, err = Apply(&Config{In: out, Out: in, Check: CheckAll}, Buf{Data: back}, mid)
	require.NoError(t, err, "re-block back")
	require.Equal(t, len(back), n, "re-block back")
	require.True(t, bytes.Equal(back, src.Data), "re-block back differs from the original")
}

// In-place operations equal their out-of-place versions.
func TestInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 55))
	ch := rngChooser{rng}
	for i := range 300 {
		f := randFormat(ch)
		iv := pick(ch, 8, 512, 520, 4096)
		d := randDomain(ch, f, iv)
		var c Config
		switch i % 3 {
		case 0: // generate in place
			c = Config{In: d, Out: d}
		case 1: // pass
			c = Config{In: d, Out: d, Check: randMask(ch, f), Copy: CheckAll}
		case 2: // translate to the same geometry
			o := randDomain(ch, f, iv)
			o.MetaSize, o.PIFirst, o.Separate = d.MetaSize, d.PIFirst, d.Separate
			c = Config{In: d, Out: o, Check: randMask(ch, f), Copy: randMask(ch, f)}
		}
		n := blocksFor(ch, iv, 8192) * iv
		src := genInput(ch, &c, n)
		want := modelApply(&c, src)
		buf := cloneBuf(src)
		var err error
		if i%3 == 0 {
			err = GenerateInPlace(d, buf)
		} else {
			_, err = Apply(&c, buf, buf)
		}
		require.Empty(t, sameErr(err, want.err), "case %d %s", i, describe(&c, n))
		require.True(t, bytes.Equal(buf.Data, want.data) && bytes.Equal(buf.Meta, want.meta), "case %d %s: in-place output differs", i, describe(&c, n))
	}
}

// Configs are values: Apply does not keep or change them.
func TestConfigNotModified(t *testing.T) {
	c := Config{In: Domain{Format: FormatPI8, Type: Type3, Interval: 512}, Out: Domain{Format: FormatPI8, Type: Type1, Interval: 512}, Check: CheckAll, Copy: CheckAppTag}
	orig := c
	src := mustGenerate(t, c.In, spdkData(1024))
	dst := make([]byte, 1040)
	_, err := Apply(&c, Buf{Data: dst}, src)
	require.NoError(t, err, "Apply")
	require.EqualValues(t, orig, c, "Apply modified its config: %+v", c)
}
