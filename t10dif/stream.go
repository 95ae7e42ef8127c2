package t10dif

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"hash/crc64"
)

var crc64ECMA = crc64.MakeTable(crc64.ECMA)

// plan is a validated Config with everything the data path derives from it.
type plan struct {
	in, out side
	discard bool

	chkG uint64 // input guard bits checked
	chkA uint16 // input app-tag bits checked (check mask and AppTagMask)
	chkR uint64 // input ref-tag bits checked

	cpyG uint64 // output guard bits copied from the input tuple
	cpyA uint16
	cpyR uint64

	copyMeta   bool // non-PI metadata bytes are copied from the input
	outNeedsIn bool // building an output tuple needs the input tuple
	inGuard    bool // the input guard is computed
	outGuard   bool // the output guard is computed separately
	shareGuard bool // the output guard is the input guard
	passMeta   bool // the output metadata is the input's, byte for byte (a pass copying every field)
	tuples8    bool // every side with PI has metadata of one pi8 tuple alone (crcBlocks' tuples8)
	blocks     int  // interval of the block structure when both sides share it, else 0
}

func (p *plan) init(c *Config) error {
	*p = plan{discard: c.Discard}
	var err error
	if p.in, err = c.In.compile(); err != nil {
		return fmt.Errorf("input domain: %w", err)
	}
	if p.out, err = c.Out.compile(); err != nil {
		return fmt.Errorf("output domain: %w", err)
	}
	in, out := &p.in, &p.out
	if c.Discard && out.pi {
		return fmt.Errorf("discard with an output domain: %w", ErrBadLayout)
	}
	if in.pi {
		var ok bool
		if p.chkG, p.chkA, p.chkR, ok = fieldMasks(in.format, c.Check); !ok {
			return fmt.Errorf("check mask %#02x for %v: %w", uint8(c.Check), in.format, ErrBadMask)
		}
		p.chkA &= in.appMask
		p.inGuard = p.chkG != 0
	}
	sameGeom := in.pi && out.pi && in.format == out.format && in.interval == out.interval &&
		in.meta == out.meta && in.piOff == out.piOff
	if in.pi && out.pi && c.Copy != 0 {
		if !sameGeom {
			return fmt.Errorf("copy mask %#02x between %v/%d and %v/%d: %w",
				uint8(c.Copy), in.format, in.interval, out.format, out.interval, ErrBadMask)
		}
		var ok bool
		if p.cpyG, p.cpyA, p.cpyR, ok = fieldMasks(out.format, c.Copy); !ok {
			return fmt.Errorf("copy mask %#02x for %v: %w", uint8(c.Copy), out.format, ErrBadMask)
		}
	}
	p.copyMeta = sameGeom && in.meta > in.tuple
	p.outNeedsIn = sameGeom && (c.Copy != 0 || p.copyMeta)
	if out.pi {
		full, _, _, _ := fieldMasks(out.format, out.format.GuardMask())
		if p.cpyG != full {
			p.shareGuard = in.pi && in.interval == out.interval && in.guard == out.guard &&
				in.seed == out.seed && in.prefix == out.prefix && (in.prefix == 0 || p.copyMeta)
			p.outGuard = !p.shareGuard
			if p.shareGuard {
				// The output tuple waits for the input block's guard.
				p.inGuard, p.outNeedsIn = true, true
			}
		}
	}
	if sameGeom && in.format == FormatPI8 {
		g, a, r, _ := fieldMasks(in.format, CheckAll)
		p.passMeta = p.cpyG == g && p.cpyA == a && p.cpyR == r
	}
	bare8 := func(d *side) bool {
		return !d.pi || d.format == FormatPI8 && d.meta == d.tuple && d.prefix == 0 && d.piOff == 0
	}
	p.tuples8 = bare8(in) && bare8(out)
	switch {
	case in.pi && out.pi && in.interval == out.interval:
		p.blocks = in.interval
	case in.pi && !out.pi:
		p.blocks = in.interval
	case !in.pi && out.pi:
		p.blocks = out.interval
	}
	return nil
}

// guardAcc accumulates a guard over bytes fed in pieces.
type guardAcc struct {
	kind GuardType
	v    uint64
	ip   ipSum
}

func (a *guardAcc) reset(kind GuardType, seed uint64) {
	a.kind, a.v = kind, seed
	switch kind {
	case GuardCRC32, GuardCRC32C:
		a.v = uint64(^uint32(seed)) // hash/crc32's convention: the register's complement
	case GuardCRC64XP10:
		a.v = ^seed
	}
	a.ip = ipSum{s: seed}
}

func (a *guardAcc) update(p []byte) {
	switch a.kind {
	case GuardCRC16:
		a.v = uint64(CRC16(uint16(a.v), p))
	case GuardCRC64NVMe:
		a.v = CRC64NVMe(a.v, p)
	case GuardIPChecksum:
		a.ip.update(p)
	case GuardCRC32:
		a.v = uint64(crc32.Update(uint32(a.v), crc32.IEEETable, p))
	case GuardCRC32C:
		a.v = uint64(CRC32C(uint32(a.v), p))
	case GuardCRC64XP10:
		a.v = crc64.Update(a.v, crc64ECMA, p)
	}
}

// copyUpdate copies src to dst and feeds src to the guard in one pass.
func (a *guardAcc) copyUpdate(dst, src []byte) {
	switch a.kind {
	case GuardCRC16:
		a.v = uint64(copyCRC16(uint16(a.v), dst, src))
	case GuardCRC64NVMe:
		a.v = copyCRC64NVMe(a.v, dst, src)
	default:
		copy(dst, src)
		a.update(src)
	}
}

func (a *guardAcc) value() uint64 {
	if a.kind == GuardIPChecksum {
		return uint64(a.ip.guard())
	}
	return a.v
}

// Buf is one side of a one-shot operation: Data holds the data, with the
// metadata interleaved after each block unless the domain is separate, in
// which case Meta holds the metadata of every block back to back.
type Buf struct {
	Data []byte
	Meta []byte
}

// Stream runs a Config over input and output that arrive in pieces split
// anywhere, inside data or inside a tuple, and gives exactly the result of
// the one-shot operation. A Stream is thread-compatible: one goroutine at a
// time.
type Stream struct {
	p plan

	metaIn, metaOut []byte // metadata buffers of separate domains

	inBlk    uint64 // current input block
	inData   int    // data bytes of the input block consumed
	inMetaN  int    // interleaved metadata bytes of the input block consumed
	inDone   uint64 // input blocks finished (checked)
	inBig    []byte // input metadata being assembled, when larger than inMetaBuf
	lastIn   []byte // metadata of the last finished input block, if not in the store
	lastInSt bool   // ... or it is in the store (inMetaBuf or inBig)
	inG      guardAcc
	lastInG  uint64 // input guard of the last finished block
	outBlk   uint64 // current output block
	outData  int    // data bytes of the output block produced
	outMetaN int    // interleaved metadata bytes of the output block written
	outReady bool   // the output store holds the output metadata of outBlk
	outBig   []byte // output metadata store, when larger than outMetaBuf
	outG     guardAcc

	hasErr bool
	first  Error
	// firstTuple is the rest of first's block's tuple (FirstErrorTuple).
	firstTuple errTuple

	inMetaBuf, outMetaBuf [32]byte
}

// NewStream returns a stream running c. For a separate (DIX) domain, give
// the metadata buffers with SetMeta before processing.
func NewStream(c *Config) (*Stream, error) {
	s := new(Stream)
	if err := s.Init(c); err != nil {
		return nil, err
	}
	return s, nil
}

// Init prepares s to run c from its start, as NewStream does, in s's own
// memory: a Stream kept in a longer-lived value runs one access after
// another without allocating. The metadata buffers are forgotten.
func (s *Stream) Init(c *Config) error {
	*s = Stream{}
	if err := s.p.init(c); err != nil {
		return err
	}
	s.Reset()
	return nil
}

// SetMeta gives the metadata buffers of separate domains: in holds the
// metadata of every input block, out receives that of every output block.
func (s *Stream) SetMeta(in, out []byte) { s.metaIn, s.metaOut = in, out }

// Reset returns the stream to its start, keeping its configuration and
// metadata buffers.
func (s *Stream) Reset() {
	p := &s.p
	*s = Stream{p: *p, metaIn: s.metaIn, metaOut: s.metaOut}
	s.inG.reset(s.p.in.guard, s.p.in.seed)
	s.outG.reset(s.p.out.guard, s.p.out.seed)
}

// FirstError returns the first PI mismatch seen so far, or nil.
func (s *Stream) FirstError() *Error {
	if !s.hasErr {
		return nil
	}
	e := s.first
	return &e
}

// errTuple holds the guards and app tags of the first error's block.
type errTuple struct {
	guard, foundGuard uint64
	app, foundApp     uint16
}

// FirstErrorTuple returns, for FirstError's block, the guard computed over
// its data and the configured app tag, and the guard and app tag its tuple
// held, whichever field failed (zeros while there is no error): what
// mlx5's signature error CQE carries besides the failing field.
func (s *Stream) FirstErrorTuple() (guard, foundGuard uint64, app, foundApp uint16) {
	t := &s.firstTuple
	return t.guard, t.foundGuard, t.app, t.foundApp
}

// Close ends the input. It returns ErrPartialBlock if the input stopped
// inside a block, ErrShortBuffer if output is still pending, otherwise the
// first PI mismatch as an *Error, or nil.
func (s *Stream) Close() error {
	p := &s.p
	if p.in.pi && (s.inData != 0 || s.inMetaN != 0) {
		return fmt.Errorf("close after %d data bytes of block %d: %w", s.inData, s.inBlk, ErrPartialBlock)
	}
	if p.out.pi && s.outData != 0 {
		if s.outData < p.out.interval {
			return fmt.Errorf("close after %d data bytes of output block %d: %w", s.outData, s.outBlk, ErrPartialBlock)
		}
		return fmt.Errorf("close with the metadata of output block %d pending: %w", s.outBlk, ErrShortBuffer)
	}
	if e := s.FirstError(); e != nil {
		return e
	}
	return nil
}

// Process consumes input from src and writes output to dst, as much as
// both allow; it returns the bytes written and consumed. With Discard, dst
// is not used. The only errors are ErrShortBuffer for separate metadata
// buffers too small for the blocks seen; PI mismatches are recorded (see
// FirstError and Close) and processing goes on.
func (s *Stream) Process(dst, src []byte) (nDst, nSrc int, err error) {
	p := &s.p
	if p.discard {
		dst = nil
	}
	for {
		progressed := false
		// Input metadata that follows the block's data.
		if p.in.pi && s.inData == p.in.interval {
			if p.in.separate {
				m, err := s.sepMeta(s.metaIn, s.inBlk, "input")
				if err != nil {
					return nDst, nSrc, err
				}
				s.finishIn(m)
				s.lastIn, s.lastInSt = m, false
				progressed = true
			} else if len(src) > 0 {
				st := s.inStore()
				k := copy(st[s.inMetaN:], src)
				s.inMetaN += k
				src, nSrc = src[k:], nSrc+k
				if s.inMetaN == p.in.meta {
					s.finishIn(st)
					s.lastIn, s.lastInSt = nil, true
				}
				progressed = true
			}
		}
		// Output metadata that follows the block's data.
		if p.out.pi && s.outData == p.out.interval && (!p.outNeedsIn || s.inDone > s.outBlk) {
			if p.out.separate {
				m, err := s.sepMeta(s.metaOut, s.outBlk, "output")
				if err != nil {
					return nDst, nSrc, err
				}
				s.buildOut(m, s.lastInMeta())
				s.nextOut()
				progressed = true
			} else {
				st := s.outStore()
				if !s.outReady {
					s.buildOut(st, s.lastInMeta())
					s.outReady = true
				}
				k := copy(dst, st[s.outMetaN:])
				s.outMetaN += k
				dst, nDst = dst[k:], nDst+k
				if s.outMetaN == p.out.meta {
					s.nextOut()
					progressed = true
				}
			}
		}
		// Whole blocks at once.
		if p.blocks != 0 && s.inData == 0 && s.inMetaN == 0 && s.outData == 0 && !s.outReady {
			di, si, err := s.blocks(dst, src)
			if err != nil {
				return nDst, nSrc, err
			}
			if si > 0 {
				dst, nDst = dst[di:], nDst+di
				src, nSrc = src[si:], nSrc+si
				progressed = true
			}
		}
		// Data up to the next block boundary on either side.
		n := len(src)
		if p.in.pi {
			n = min(n, p.in.interval-s.inData)
		}
		if p.out.pi {
			n = min(n, p.out.interval-s.outData)
		}
		if !p.discard {
			n = min(n, len(dst))
		}
		if n > 0 {
			s.data(dst, src[:n])
			if !p.discard {
				dst, nDst = dst[n:], nDst+n
			}
			src, nSrc = src[n:], nSrc+n
			progressed = true
		}
		if !progressed {
			return nDst, nSrc, nil
		}
	}
}

// inStore returns the buffer that assembles split input metadata. The
// slices of the stream's own arrays are never stored in the stream, so that
// a Stream can live on the stack.
func (s *Stream) inStore() []byte {
	n := s.p.in.meta
	if n <= len(s.inMetaBuf) {
		return s.inMetaBuf[:n]
	}
	if s.inBig == nil {
		s.inBig = make([]byte, n)
	}
	return s.inBig
}

// outStore returns the buffer that holds output metadata until it is written.
func (s *Stream) outStore() []byte {
	n := s.p.out.meta
	if n <= len(s.outMetaBuf) {
		return s.outMetaBuf[:n]
	}
	if s.outBig == nil {
		s.outBig = make([]byte, n)
	}
	return s.outBig
}

// lastInMeta returns the metadata of the last finished input block.
func (s *Stream) lastInMeta() []byte {
	if s.lastInSt {
		return s.inStore()
	}
	return s.lastIn
}

// blocksLeft returns how many whole metadata slots of size meta a buffer of
// n bytes has from block blk on.
func blocksLeft(n, meta int, blk uint64) int {
	have := uint64(n / meta)
	if have <= blk {
		return 0
	}
	return int(min(have-blk, uint64(n)))
}

func (s *Stream) sepMeta(buf []byte, blk uint64, what string) ([]byte, error) {
	m := uint64(s.p.in.meta)
	if what == "output" {
		m = uint64(s.p.out.meta)
	}
	if end := (blk + 1) * m; end > uint64(len(buf)) {
		return nil, fmt.Errorf("%s metadata of block %d needs %d bytes, have %d: %w", what, blk, end, len(buf), ErrShortBuffer)
	}
	return buf[blk*m : (blk+1)*m], nil
}

// data moves n = len(src) data bytes that lie inside one block on each side.
func (s *Stream) data(dst, src []byte) {
	p := &s.p
	n := len(src)
	switch {
	case p.discard:
		if p.inGuard {
			s.inG.update(src)
		}
	case p.inGuard:
		s.inG.copyUpdate(dst, src)
	case p.outGuard:
		s.outG.copyUpdate(dst, src)
	default:
		copy(dst, src)
	}
	if p.inGuard && p.outGuard {
		s.outG.update(dst[:n])
	}
	if p.in.pi {
		s.inData += n
	}
	if p.out.pi {
		s.outData += n
	}
}

// finishIn checks the input block whose metadata is meta. The caller
// records where meta lives (lastIn, lastInSt); finishIn must not store it,
// or a Stream on the stack would escape.
func (s *Stream) finishIn(meta []byte) {
	p := &s.p
	if p.inGuard && p.in.prefix > 0 {
		s.inG.update(meta[:p.in.prefix])
	}
	s.checkTuple(s.inBlk, s.inG.value(), meta[p.in.piOff:])
	s.lastInG = s.inG.value()
	s.inBlk++
	s.inDone++
	s.inData, s.inMetaN = 0, 0
	s.inG.reset(p.in.guard, p.in.seed)
}

func (s *Stream) checkTuple(blk, guard uint64, t []byte) {
	p := &s.p
	if s.hasErr || (p.chkG == 0 && p.chkA == 0 && p.chkR == 0) {
		return
	}
	f := p.in.getTuple(t)
	if p.in.escaped(f) {
		return
	}
	ref := p.in.expectedRef(blk)
	var typ ErrorType
	var exp, act uint64
	switch {
	case (f.guard^guard)&p.chkG != 0:
		typ, exp, act = ErrorGuard, guard, f.guard
	case (f.ref^ref)&p.chkR != 0:
		typ, exp, act = ErrorRefTag, ref, f.ref
	case (f.app^p.in.appTag)&p.chkA != 0:
		typ, exp, act = ErrorAppTag, uint64(p.in.appTag), uint64(f.app)
	default:
		return
	}
	s.hasErr = true
	s.first = Error{
		Type:            typ,
		Block:           blk,
		Offset:          blk * uint64(p.in.interval),
		ProtectedOffset: blk * uint64(p.in.interval+p.in.meta),
		Expected:        exp,
		Actual:          act,
	}
	s.firstTuple = errTuple{guard: guard, foundGuard: f.guard, app: p.in.appTag, foundApp: f.app}
}

// buildOut writes the output metadata of block s.outBlk into meta; inMeta is
// the input metadata of the same block when the output depends on it.
func (s *Stream) buildOut(meta, inMeta []byte) {
	p := &s.p
	if p.passMeta {
		// Every tuple field copied, the other bytes too: the input's
		// metadata as it is.
		copy(meta, inMeta)
		return
	}
	o := &p.out
	if o.meta > o.tuple {
		if p.copyMeta {
			copy(meta[:o.piOff], inMeta[:o.piOff])
			copy(meta[o.piOff+o.tuple:], inMeta[o.piOff+o.tuple:])
		} else {
			clear(meta[:o.piOff])
			clear(meta[o.piOff+o.tuple:])
		}
	}
	var g uint64
	switch {
	case p.shareGuard:
		g = s.lastInG
	case p.outGuard:
		if o.prefix > 0 {
			s.outG.update(meta[:o.prefix])
		}
		g = s.outG.value()
	}
	f := tupleFields{guard: g, app: o.appTag, ref: o.expectedRef(s.outBlk)}
	if p.outNeedsIn && (p.cpyG|uint64(p.cpyA)|p.cpyR) != 0 {
		in := p.in.getTuple(inMeta[p.in.piOff:])
		f.guard = f.guard&^p.cpyG | in.guard&p.cpyG
		f.app = f.app&^p.cpyA | in.app&p.cpyA
		f.ref = f.ref&^p.cpyR | in.ref&p.cpyR
	}
	o.putTuple(meta[o.piOff:], f)
}

func (s *Stream) nextOut() {
	s.outBlk++
	s.outData, s.outMetaN, s.outReady = 0, 0, false
	s.outG.reset(s.p.out.guard, s.p.out.seed)
}

// ProcessBlock processes one whole input block of interleaved PI whose
// data and metadata arrive apart (a strided memory domain gives them as
// two segments): data holds the block's data, meta its metadata. It does
// so in one step when the stream is at a block boundary, the input and
// output blocks have the same data size, and dst (unused with Discard)
// holds the whole output block; it returns the bytes written to dst. It
// reports false, having done nothing, otherwise: Process then takes data
// and meta as two pieces, with the same result.
func (s *Stream) ProcessBlock(dst, data, meta []byte) (nDst int, ok bool) {
	p := &s.p
	in, out := &p.in, &p.out
	if !in.pi || in.separate || p.blocks != in.interval || len(data) != in.interval || len(meta) != in.meta ||
		s.inData != 0 || s.inMetaN != 0 || s.outData != 0 || s.outReady {
		return 0, false
	}
	outUnit := in.interval
	var outMeta []byte
	switch {
	case p.discard:
		outUnit = 0
	case out.pi && out.separate:
		if blocksLeft(len(s.metaOut), out.meta, s.outBlk) == 0 || len(dst) < in.interval {
			return 0, false
		}
		outMeta = s.metaOut[s.outBlk*uint64(out.meta):][:out.meta]
	case out.pi:
		outUnit = out.unit
		if len(dst) < outUnit {
			return 0, false
		}
		outMeta = dst[in.interval:outUnit]
	case len(dst) < outUnit:
		return 0, false
	}
	if p.discard {
		s.data(nil, data)
	} else {
		s.data(dst[:in.interval], data)
	}
	s.finishIn(meta)
	s.lastIn, s.lastInSt = meta, false
	if out.pi {
		s.buildOut(outMeta, meta)
		s.nextOut()
	}
	return outUnit, true
}

// crcBlocks is blocks' fast path for a CRC-16 guard computed on one side
// (insert, strip, pass, a re-tagging): the kernel copies a run of blocks
// and gives each block's guard in one call, then the tuples are checked
// and built per block. It returns how many of the nb whole blocks it
// processed (0: not this configuration, or no such kernel here).
func (s *Stream) crcBlocks(dst, src []byte, nb, inUnit, outUnit int) int {
	p := &s.p
	in, out := &p.in, &p.out
	iv := p.blocks
	var seed uint64
	switch {
	case p.discard || nb == 0 || p.inGuard == p.outGuard:
		return 0
	case p.inGuard && s.inG.kind == GuardCRC16 && in.prefix == 0:
		seed = in.seed
	case p.outGuard && s.outG.kind == GuardCRC16 && out.prefix == 0:
		seed = out.seed
	default:
		return 0
	}
	var guards [32]uint16
	done := 0
	for done < nb {
		k := min(nb-done, len(guards))
		if !copyCRC16Blocks(uint16(seed), dst, src, iv, outUnit, inUnit, guards[:k]) {
			break
		}
		if p.tuples8 {
			s.tuples8(guards[:k], dst, src, inUnit, outUnit)
			src, dst = src[k*inUnit:], dst[k*outUnit:]
			done += k
			continue
		}
		for j, g := range guards[:k] {
			var inMeta, outMeta []byte
			if in.pi {
				if in.separate {
					inMeta = s.metaIn[s.inBlk*uint64(in.meta):][:in.meta]
				} else {
					inMeta = src[j*inUnit+iv : (j+1)*inUnit]
				}
				s.inG.v = uint64(g)
				s.finishIn(inMeta)
				s.lastIn, s.lastInSt = inMeta, false
			}
			if out.pi {
				if out.separate {
					outMeta = s.metaOut[s.outBlk*uint64(out.meta):][:out.meta]
				} else {
					outMeta = dst[j*outUnit+iv : (j+1)*outUnit]
				}
				if p.outGuard {
					s.outG.v = uint64(g)
				}
				s.buildOut(outMeta, inMeta)
				s.nextOut()
			}
		}
		src, dst = src[k*inUnit:], dst[k*outUnit:]
		done += k
	}
	return done
}

// tuples8 is crcBlocks' tuple work when every side with PI has metadata
// of one pi8 tuple alone: for each block of a run whose guards the kernel
// gave, the input tuple is checked and the output tuple built, with the
// result of finishIn, buildOut and nextOut block by block but without
// their calls and accumulator resets (the stream is at a block boundary
// before and after, so there is nothing to reset).
func (s *Stream) tuples8(guards []uint16, dst, src []byte, inUnit, outUnit int) {
	p := &s.p
	in, out := &p.in, &p.out
	iv := p.blocks
	check := (p.chkG | uint64(p.chkA) | p.chkR) != 0
	// The output guard is the block's computed guard (shared with the
	// input or computed for the output) unless the copy mask takes all of
	// it from the input tuple.
	gMask := ^uint64(0)
	if !p.shareGuard && !p.outGuard {
		gMask = 0
	}
	cpy := p.outNeedsIn && (p.cpyG|uint64(p.cpyA)|p.cpyR) != 0
	var inMeta []byte
	for j, g := range guards {
		if in.pi {
			if in.separate {
				inMeta = s.metaIn[s.inBlk*8:][:8]
			} else {
				inMeta = src[j*inUnit+iv:][:8]
			}
			if check && !s.hasErr {
				v := binary.BigEndian.Uint64(inMeta) // the tuple in one load
				if (pi8Guard(v)^uint64(g))&p.chkG != 0 || (pi8Ref(v)^in.expectedRef(s.inBlk))&p.chkR != 0 || (pi8App(v)^in.appTag)&p.chkA != 0 {
					s.checkTuple(s.inBlk, uint64(g), inMeta) // records it unless the tuple is escaped
				}
			}
			s.lastInG = uint64(g)
			s.inBlk++
			s.inDone++
		}
		if !out.pi {
			continue
		}
		var outMeta []byte
		if out.separate {
			outMeta = s.metaOut[s.outBlk*8:][:8]
		} else {
			outMeta = dst[j*outUnit+iv:][:8]
		}
		if p.passMeta {
			binary.NativeEndian.PutUint64(outMeta, binary.NativeEndian.Uint64(inMeta))
		} else {
			guard, app, ref := uint64(g)&gMask, out.appTag, out.expectedRef(s.outBlk)
			if cpy {
				v := binary.BigEndian.Uint64(inMeta)
				guard = guard&^p.cpyG | pi8Guard(v)&p.cpyG
				app = app&^p.cpyA | pi8App(v)&p.cpyA
				ref = ref&^p.cpyR | pi8Ref(v)&p.cpyR
			}
			binary.BigEndian.PutUint64(outMeta, pi8Word(guard, app, ref))
		}
		s.outBlk++
	}
	if in.pi && len(guards) > 0 {
		s.lastIn, s.lastInSt = inMeta, false
	}
}

// blocks processes whole blocks while both src and dst hold one, with every
// cursor at a block boundary. It returns the bytes written and consumed.
func (s *Stream) blocks(dst, src []byte) (nDst, nSrc int, err error) {
	p := &s.p
	in, out := &p.in, &p.out
	iv := p.blocks
	inUnit, outUnit := iv, iv
	if in.pi {
		inUnit = in.unit
	}
	if out.pi {
		outUnit = out.unit
	}
	nb := len(src) / inUnit
	if !p.discard {
		nb = min(nb, len(dst)/outUnit)
	}
	if in.pi && in.separate {
		nb = min(nb, blocksLeft(len(s.metaIn), in.meta, s.inBlk))
	}
	if out.pi && out.separate {
		nb = min(nb, blocksLeft(len(s.metaOut), out.meta, s.outBlk))
	}
	if k := s.crcBlocks(dst, src, nb, inUnit, outUnit); k > 0 {
		nb -= k
		src, nSrc = src[k*inUnit:], nSrc+k*inUnit
		dst, nDst = dst[k*outUnit:], nDst+k*outUnit
	}
	for range nb {
		d := src[:iv]
		var inMeta, outMeta []byte
		if in.pi {
			if in.separate {
				inMeta = s.metaIn[s.inBlk*uint64(in.meta):][:in.meta]
			} else {
				inMeta = src[iv:inUnit]
			}
		}
		if out.pi {
			if out.separate {
				outMeta = s.metaOut[s.outBlk*uint64(out.meta):][:out.meta]
			} else {
				outMeta = dst[iv:outUnit]
			}
		}
		if p.discard {
			s.data(nil, d)
		} else {
			s.data(dst[:iv], d)
		}
		if in.pi {
			s.finishIn(inMeta)
			s.lastIn, s.lastInSt = inMeta, false
		}
		if out.pi {
			s.buildOut(outMeta, inMeta)
			s.nextOut()
		}
		src, nSrc = src[inUnit:], nSrc+inUnit
		if !p.discard {
			dst, nDst = dst[outUnit:], nDst+outUnit
		}
	}
	return nDst, nSrc, nil
}
