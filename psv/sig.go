package psv

import (
	"errors"
	"fmt"

	"github.com/hcasim/hcasim/t10dif"
)

// Errors of a signature configuration.
var (
	ErrBadBSF    = errors.New("psv: BSF cannot be used")
	ErrUnaligned = errors.New("psv: access through a signature key not on a wire block boundary")
)

// Sig is a signature mkey's configuration, decoded from its BSF and PSVs:
// the memory and wire domains as t10dif sees them, the check mask (applied
// to whichever domain is the input) and the copy mask (with the same block
// structure in both domains).
type Sig struct {
	Mem, Wire t10dif.Domain
	Check     t10dif.CheckMask
	Copy      t10dif.CheckMask
	// Unit is the data bytes of the smallest whole number of blocks in
	// both domains: the interval when the domains' intervals agree (or one
	// domain has no PI), their least common multiple when the HCA
	// re-blocks. Accesses through the key cover whole units.
	Unit int
}

// domain decodes one domain of a BSF: its block-size selector, its inline
// section (T10-DIF) or its block format selector (a CRC block signature),
// and the guard seed of its PSV (T10-DIF; a CRC's seed is in the bfs).
func domain(sel, bfs uint8, in InlineFields, seed uint16) (t10dif.Domain, error) {
	if sel == 0 {
		return t10dif.Domain{}, nil
	}
	iv, ok := BlockSize(sel)
	if !ok {
		return t10dif.Domain{}, fmt.Errorf("block size selector %d: %w", sel, ErrBadBSF)
	}
	if bfs != 0 {
		d := t10dif.Domain{Interval: iv}
		switch bfs & bfsTypeMask {
		case BFSCRC32:
			d.Format, d.Guard = t10dif.FormatCRC32, t10dif.GuardCRC32
		case BFSCRC32C:
			d.Format, d.Guard = t10dif.FormatCRC32, t10dif.GuardCRC32C
		case BFSCRC64XP10:
			d.Format, d.Guard = t10dif.FormatCRC64, t10dif.GuardCRC64XP10
		default:
			return t10dif.Domain{}, fmt.Errorf("block format selector %#x: %w", bfs, ErrBadBSF)
		}
		if bfs&BFSSeedZero == 0 {
			d.Seed = 1<<(8*d.Format.TupleSize()) - 1
			if d.Format == t10dif.FormatCRC64 {
				d.Seed = ^uint64(0)
			}
		}
		return d, nil
	}
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: uint64(in.RefTag),
		AppTag: in.AppTag, AppTagMask: in.AppTagMask, Seed: uint64(seed), Ref: t10dif.RefConstant}
	switch in.SigType {
	case SigTypeCRC:
		d.Guard = t10dif.GuardCRC16
	case SigTypeIPCS:
		d.Guard = t10dif.GuardIPChecksum
	default:
		return t10dif.Domain{}, fmt.Errorf("guard type %d: %w", in.SigType, ErrBadBSF)
	}
	if in.IncRefTag {
		d.Ref = t10dif.RefIncrement
	}
	switch in.Escape {
	case EscapeNone:
		d.Escape = t10dif.EscapeNone
	case EscapeApp:
		d.Escape = t10dif.EscapeApp
	case EscapeAppRef:
		d.Escape = t10dif.EscapeAppRef
	default:
		return t10dif.Domain{}, fmt.Errorf("escape code %d: %w", in.Escape, ErrBadBSF)
	}
	return d, nil
}

// Decode builds the configuration of a BSF with the guard seeds of the
// memory and wire PSVs.
func Decode(bsf []byte, memSeed, wireSeed uint16) (*Sig, error) {
	b := BSF(bsf)
	if err := b.Validate(); err != nil {
		return nil, err
	}
	f := b.Fields()
	wireSel := f.WireByte
	s := &Sig{Check: t10dif.CheckMask(f.CheckMask)}
	if f.SBS {
		wireSel = f.MemSelector
		s.Copy = t10dif.CheckMask(f.WireByte)
	}
	var err error
	if s.Mem, err = domain(f.MemSelector, f.MemBFS, f.Mem, memSeed); err != nil {
		return nil, fmt.Errorf("memory domain: %w", err)
	}
	if s.Wire, err = domain(wireSel, f.WireBFS, f.Wire, wireSeed); err != nil {
		return nil, fmt.Errorf("wire domain: %w", err)
	}
	switch {
	case s.Mem.HasPI() && s.Wire.HasPI():
		s.Unit = lcm(s.Mem.Interval, s.Wire.Interval)
	case s.Mem.HasPI():
		s.Unit = s.Mem.Interval
	case s.Wire.HasPI():
		s.Unit = s.Wire.Interval
	default:
		return nil, fmt.Errorf("neither domain has PI: %w", ErrBadBSF)
	}
	if s.Copy != 0 && !(s.Mem.HasPI() && s.Wire.HasPI() && s.Mem.Interval == s.Wire.Interval && s.Mem.Format == s.Wire.Format) {
		s.Copy = 0 // copying tuple bytes needs one block structure
	}
	return s, nil
}

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// unitSize returns the bytes one unit of u data bytes takes in domain d.
func unitSize(d *t10dif.Domain, u int) uint64 {
	if d.HasPI() {
		return uint64(u + u/d.Interval*d.Meta())
	}
	return uint64(u)
}

// MemBlock and WireBlock return the bytes one unit (Unit data bytes)
// takes in each domain.
func (s *Sig) MemBlock() uint64  { return unitSize(&s.Mem, s.Unit) }
func (s *Sig) WireBlock() uint64 { return unitSize(&s.Wire, s.Unit) }

// ErrOffset returns the wire-domain-style byte offset mlx5 reports for an
// error in block blk (counted from the access's start) of the input
// domain of an access that starts at unit first: the failing block's
// index from the key's start times its interval plus 8, the figure ULPs
// divide by interval + 8 to find the failing sector (plus the domain's own
// signature size for a CRC block signature).
func (s *Sig) ErrOffset(toWire bool, first, blk uint64) uint64 {
	in := &s.Wire
	if toWire {
		in = &s.Mem
	}
	iv := uint64(s.Unit)
	if in.HasPI() {
		iv = uint64(in.Interval)
	}
	meta := uint64(8)
	if in.Format.IsCRC() {
		meta = uint64(in.Meta())
	}
	return (first*uint64(s.Unit)/iv + blk) * (iv + meta)
}

// MemRange maps a wire-domain range of the signature key (the addresses
// RDMA operations use) to the memory-domain range its translation holds.
// The range must start on a unit boundary. It covers whole units, or ends
// inside its last one when a unit is one block of each domain with PI (no
// re-blocking): the tail carries what data it covers, and the PI bytes of
// both domains it reaches, and its block's PI goes unchecked (a 512-byte
// SEND through a key that inserts PI on the wire moves the block's data
// without its tuple, as rdma-core's mlx5 tests expect).
func (s *Sig) MemRange(woff, wlen uint64) (uint64, uint64, error) {
	wb, mb := s.WireBlock(), s.MemBlock()
	if woff%wb != 0 {
		return 0, 0, fmt.Errorf("wire range %#x+%#x in blocks of %d: %w", woff, wlen, wb, ErrUnaligned)
	}
	tail := wlen % wb
	mlen := wlen / wb * mb
	if tail != 0 {
		if (s.Mem.HasPI() && s.Mem.Interval != s.Unit) || (s.Wire.HasPI() && s.Wire.Interval != s.Unit) {
			return 0, 0, fmt.Errorf("wire range %#x+%#x in re-blocked units of %d: %w", woff, wlen, wb, ErrUnaligned)
		}
		data := min(tail, uint64(s.Unit))
		mlen += data
		if s.Mem.HasPI() {
			mlen += tail - data // the tuple bytes the wire tail reaches (none when the wire has no PI)
		}
	}
	return woff / wb * mb, mlen, nil
}

// Config returns the transform for data leaving memory (toWire: a gather
// through the key) or entering it (a scatter), starting at unit first of
// the key (ref tags count from the key's first block, in each domain's
// blocks).
func (s *Sig) Config(toWire bool, first uint64) t10dif.Config {
	in, out := s.Wire, s.Mem
	if toWire {
		in, out = s.Mem, s.Wire
	}
	for _, d := range []*t10dif.Domain{&in, &out} {
		if d.HasPI() && d.Ref == t10dif.RefIncrement {
			d.RefTag = (d.RefTag + first*uint64(s.Unit/d.Interval)) & d.Format.RefTagMax()
		}
	}
	// A CRC32 block signature has 4 bytes: the mask bits past them mean
	// nothing to it (mlx5's check mask for CRC32 is 0xF0).
	check, cpy := s.Check, s.Copy
	if in.Format.IsCRC() {
		check &= in.Format.GuardMask()
		cpy &= in.Format.GuardMask()
	}
	return t10dif.Config{In: in, Out: out, Check: check, Copy: cpy}
}

// InputIsMemory reports which domain a direction checks: the memory domain
// for data leaving memory.
func (s *Sig) InputIsMemory(toWire bool) bool { return toWire }
