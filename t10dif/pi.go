package t10dif

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Format is a PI tuple layout. All fields are big-endian.
//
//	FormatPI8  (T10 PI)                | guard 2 | app tag 2 | ref tag 4 |
//	FormatPI16 (NVMe 64b guard, STS 0) | guard 8 | app tag 2 | ref tag 6 |
//	FormatCRC32 (block CRC, mlx5dv)    | CRC 4 |
//	FormatCRC64 (block CRC, mlx5dv)    | CRC 8 |
//
// The CRC formats are mlx5dv's CRC block signatures (MLX5DV_SIG_TYPE_CRC):
// a CRC of each block's data after it, no tags. They have no protection
// type, reference or application tag, and no escapes.
type Format uint8

// Formats. The zero value, FormatNone, is a domain without PI: plain data.
const (
	FormatNone Format = iota
	FormatPI8
	FormatPI16
	FormatCRC32
	FormatCRC64
	numFormats
)

// TupleSize returns the size of the format's PI tuple in bytes (0 for
// FormatNone or an invalid format).
func (f Format) TupleSize() int {
	switch f {
	case FormatPI8:
		return 8
	case FormatPI16:
		return 16
	case FormatCRC32:
		return 4
	case FormatCRC64:
		return 8
	}
	return 0
}

// IsCRC reports whether the format is a CRC block signature (a guard, no
// tags).
func (f Format) IsCRC() bool { return f == FormatCRC32 || f == FormatCRC64 }

// GuardMask returns the check-mask bits of the format's guard bytes.
func (f Format) GuardMask() CheckMask {
	switch f {
	case FormatCRC32:
		return 0xF0
	case FormatCRC64:
		return 0xFF
	}
	return CheckGuard
}

// RefTagMax returns the largest reference tag the format holds.
func (f Format) RefTagMax() uint64 {
	switch f {
	case FormatPI8:
		return 1<<32 - 1
	case FormatPI16:
		return 1<<48 - 1
	}
	return 0
}

// String returns the format's name as the vectors spell it: none, pi8,
// pi16, crc32, crc64.
func (f Format) String() string {
	switch f {
	case FormatNone:
		return "none"
	case FormatPI8:
		return "pi8"
	case FormatPI16:
		return "pi16"
	case FormatCRC32:
		return "crc32"
	case FormatCRC64:
		return "crc64"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// GuardType selects the guard algorithm of a domain.
type GuardType uint8

// Guard types. The zero value, GuardDefault, means the format's own guard:
// CRC-16/T10-DIF for FormatPI8, CRC-64/NVME for FormatPI16, CRC-32 for
// FormatCRC32, CRC-64/XP10 for FormatCRC64.
//
// The mlx5dv CRC block signatures' parameters are not public; hcasim
// takes the standard reflected CRCs of hash/crc32 and hash/crc64, with the
// domain's Seed as the register's initial value and the final ones'
// complement (Seed all ones gives the usual CRC: CRC-32 check value
// 0xCBF43926, CRC-32C 0xE3069283, CRC-64/XZ 0x995DC9BBDF1939FA):
//   - GuardCRC32: CRC-32 (the IEEE / FC-PH polynomial 0x04C11DB7);
//   - GuardCRC32C: CRC-32C (Castagnoli, iSCSI);
//   - GuardCRC64XP10: CRC-64/XZ (ECMA-182 polynomial), standing in for
//     mlx5's CRC64_XP10.
const (
	GuardDefault    GuardType = iota
	GuardCRC16                // CRC-16/T10-DIF (pi8)
	GuardIPChecksum           // IP checksum, Linux t10_pi_ip_fn (pi8)
	GuardCRC64NVMe            // CRC-64/NVME (pi16)
	GuardCRC32                // CRC-32 (crc32)
	GuardCRC32C               // CRC-32C (crc32)
	GuardCRC64XP10            // CRC-64/XZ for mlx5's CRC64_XP10 (crc64)
	numGuards
)

// String returns the guard's name as the vectors spell it: crc16, ipcsum,
// crc64, crc32, crc32c, crc64xp10.
func (g GuardType) String() string {
	switch g {
	case GuardDefault:
		return "default"
	case GuardCRC16:
		return "crc16"
	case GuardIPChecksum:
		return "ipcsum"
	case GuardCRC64NVMe:
		return "crc64"
	case GuardCRC32:
		return "crc32"
	case GuardCRC32C:
		return "crc32c"
	case GuardCRC64XP10:
		return "crc64xp10"
	}
	return fmt.Sprintf("GuardType(%d)", uint8(g))
}

// DIFType is the T10 DIF / NVMe PI protection type. It decides the default
// reference-tag rule and escape rule of a domain; the zero value is invalid
// for a domain with PI.
type DIFType uint8

// Protection types.
const (
	Type1 DIFType = 1 // ref tag = low bits of the LBA, incremented per block
	Type2 DIFType = 2 // ref tag = expected initial ref tag, incremented per block
	Type3 DIFType = 3 // ref tag constant (not defined by the standard)
)

// Escape is the rule that exempts a block from checking.
type Escape uint8

// Escape rules. The zero value, EscapeDefault, is EscapeApp for Types 1 and
// 2 and EscapeAppRef for Type 3, as Linux, SPDK and the NVMe host do.
const (
	EscapeDefault Escape = iota
	EscapeNone           // never skip
	EscapeApp            // skip when the app tag is 0xFFFF (mlx5 APPTAG_ESCAPE)
	EscapeAppRef         // skip when the app tag is 0xFFFF and the ref tag all ones (mlx5 APPREF_ESCAPE)
	numEscapes
)

// String returns the escape's name as the vectors spell it: none, app, app_ref.
func (e Escape) String() string {
	switch e {
	case EscapeDefault:
		return "default"
	case EscapeNone:
		return "none"
	case EscapeApp:
		return "app"
	case EscapeAppRef:
		return "app_ref"
	}
	return fmt.Sprintf("Escape(%d)", uint8(e))
}

// RefMode is the reference-tag rule: the ref tag of block i is RefTag+i
// (wrapping at the format's width) or RefTag for every block.
type RefMode uint8

// Reference-tag rules. The zero value, RefDefault, is RefIncrement for
// Types 1 and 2 and RefConstant for Type 3.
const (
	RefDefault   RefMode = iota
	RefIncrement         // RDMA ref_remap / mlx5 INC_REFTAG
	RefConstant
	numRefModes
)

// CheckMask selects bytes of a PI tuple in the IB byte encoding
// (IB_SIG_CHECK_*, mlx5 check_byte_mask and copy_byte_mask): bit 7 is the
// first byte of the 8-byte tuple, bit 0 the last. Partial masks select
// single bytes of a pi8 tuple; a pi16 tuple takes whole fields only
// (0xC0 its 8-byte guard, 0x30 its app tag, 0x0F its 48-bit ref tag).
type CheckMask uint8

// Check and copy mask fields.
const (
	CheckGuard  CheckMask = 0xC0
	CheckAppTag CheckMask = 0x30
	CheckRefTag CheckMask = 0x0F
	CheckAll    CheckMask = 0xFF
)

// Limits on domain parameters.
const (
	// MaxInterval is the largest protection interval (mlx5's 1 GiB block).
	MaxInterval = 1 << 30
	// MaxMetaSize is the largest metadata size per block.
	MaxMetaSize = 4096
)

// Domain describes one side of an operation: how the protected data is laid
// out and which PI it carries. The zero value is a domain without PI.
type Domain struct {
	// Format is the PI tuple layout; FormatNone for plain data.
	Format Format
	// Guard is the guard algorithm; GuardDefault for the format's own.
	Guard GuardType
	// Type is the protection type (1, 2 or 3).
	Type DIFType
	// Interval is the number of data bytes per PI tuple: a positive
	// multiple of 8 up to MaxInterval (512, 520, 4048, 4096 and 4160 are
	// the mlx5 block sizes).
	Interval int
	// MetaSize is the number of metadata bytes per block, at least the
	// tuple size; 0 means the tuple size.
	MetaSize int
	// PIFirst puts the tuple in the first bytes of the metadata instead of
	// the last. With the tuple last, the guard also covers the metadata
	// bytes before it (NVMe, SPDK, Linux).
	PIFirst bool
	// Separate keeps the metadata in its own buffer (DIX) instead of after
	// each block of data (DIF, interleaved).
	Separate bool
	// RefTag is the reference tag of the first block.
	RefTag uint64
	// Ref is the reference-tag rule.
	Ref RefMode
	// AppTag is the application tag generated, and expected when checked.
	AppTag uint16
	// AppTagMask selects the app-tag bits compared (apptag_check_mask).
	AppTagMask uint16
	// Escape is the rule that exempts a block from checking.
	Escape Escape
	// Seed is the guard's initial value: the CRC-16 register, the previous
	// CRC-64 (hash/crc64 convention) or an initial IP-checksum sum; for
	// the CRC formats the CRC register's initial value (0 or all ones in
	// mlx5).
	Seed uint64
}

// HasPI reports whether the domain carries protection information.
func (d Domain) HasPI() bool { return d.Format != FormatNone }

// Meta returns the metadata bytes per block (0 without PI).
func (d Domain) Meta() int {
	if !d.HasPI() {
		return 0
	}
	if d.MetaSize == 0 {
		return d.Format.TupleSize()
	}
	return d.MetaSize
}

// BlockSize returns the bytes one block occupies in the domain's main
// buffer: interval plus metadata when interleaved, the interval when
// separate.
func (d Domain) BlockSize() int {
	if d.Separate {
		return d.Interval
	}
	return d.Interval + d.Meta()
}

// Config is one operation: the input domain is verified per Check, the
// output domain is generated except the bytes Copy takes from the input
// tuple. With Discard there is no output at all (verify).
type Config struct {
	In, Out Domain
	// Check selects the bytes of each input tuple that are verified.
	Check CheckMask
	// Copy selects the bytes of each output tuple copied from the input
	// tuple (mlx5 copy_byte_mask). It needs both domains to have the same
	// format, interval and metadata geometry.
	Copy CheckMask
	// Discard drops the data: the input is only verified.
	Discard bool
}

// ErrorType is the kind of a PI mismatch.
type ErrorType uint8

// PI mismatch kinds, in the priority order used when one block has several:
// guard, then reference tag, then application tag.
const (
	ErrorGuard  ErrorType = iota + 1 // the guard does not match the data
	ErrorRefTag                      // the reference tag is not the expected one
	ErrorAppTag                      // the application tag is not the expected one
)

// String returns the type's name as the vectors spell it: guard, reftag, apptag.
func (t ErrorType) String() string {
	switch t {
	case ErrorGuard:
		return "guard"
	case ErrorRefTag:
		return "reftag"
	case ErrorAppTag:
		return "apptag"
	}
	return fmt.Sprintf("ErrorType(%d)", uint8(t))
}

// Sentinels for PI mismatches; an [*Error] matches the one of its type.
var (
	ErrGuard  = errors.New("t10dif: guard check failed")
	ErrRefTag = errors.New("t10dif: reference tag check failed")
	ErrAppTag = errors.New("t10dif: application tag check failed")
)

// Error is the first PI mismatch of an operation.
type Error struct {
	Type ErrorType
	// Block is the 0-based index of the block in the input.
	Block uint64
	// Offset is the block's byte offset in the unprotected data.
	Offset uint64
	// ProtectedOffset is the block's byte offset in the interleaved
	// stream (interval plus metadata per block), as mlx5 reports it.
	ProtectedOffset uint64
	// Expected is the computed guard, the expected reference tag, or the
	// configured application tag (unmasked).
	Expected uint64
	// Actual is the value found in the tuple (unmasked).
	Actual uint64
}

// Error describes the mismatch.
func (e *Error) Error() string {
	return fmt.Sprintf("t10dif: %s check failed at block %d (offset %d): expected %#x, actual %#x",
		e.Type, e.Block, e.Offset, e.Expected, e.Actual)
}

// Is makes an Error match ErrGuard, ErrRefTag or ErrAppTag.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrGuard:
		return e.Type == ErrorGuard
	case ErrRefTag:
		return e.Type == ErrorRefTag
	case ErrAppTag:
		return e.Type == ErrorAppTag
	}
	return false
}

// ErrParam matches every parameter error; the specific sentinels below
// match only their own condition.
var ErrParam = errors.New("t10dif: bad parameter")

// Parameter errors.
var (
	ErrBadFormat    = paramError("unknown PI format")
	ErrBadGuard     = paramError("guard type not allowed for the format")
	ErrBadType      = paramError("unknown DIF type")
	ErrBadInterval  = paramError("interval not allowed for the format")
	ErrBadMetaSize  = paramError("metadata size not allowed")
	ErrBadEscape    = paramError("unknown escape rule")
	ErrBadRefMode   = paramError("unknown reference-tag rule")
	ErrBadTag       = paramError("tag or seed out of range for the format")
	ErrBadMask      = paramError("check or copy mask not allowed")
	ErrBadLayout    = paramError("layout not allowed")
	ErrBadLength    = paramError("length is not a whole number of blocks")
	ErrShortBuffer  = paramError("buffer too small")
	ErrPartialBlock = paramError("input ended inside a block")
)

type paramErr struct{ msg string }

func paramError(msg string) error { return &paramErr{"t10dif: " + msg} }

func (e *paramErr) Error() string        { return e.msg }
func (e *paramErr) Is(target error) bool { return target == ErrParam }

// Validate checks the domain's parameters; the error matches ErrParam.
func (d Domain) Validate() error {
	_, err := d.compile()
	return err
}

// Validate checks the configuration; the error matches ErrParam.
func (c *Config) Validate() error {
	var p plan
	return p.init(c)
}

// side is a compiled domain.
type side struct {
	pi       bool
	format   Format
	guard    GuardType
	tuple    int    // tuple size
	interval int    // data bytes per block
	meta     int    // metadata bytes per block
	piOff    int    // offset of the tuple in the metadata
	prefix   int    // metadata bytes covered by the guard (before the tuple)
	unit     int    // bytes per block in the main buffer
	separate bool   // metadata in its own buffer
	incr     bool   // ref tag increments per block
	refTag   uint64 // initial ref tag
	refMask  uint64 // format's ref width
	appTag   uint16
	appMask  uint16
	escApp   bool // escape on app == 0xFFFF
	escRef   bool // ... and ref all ones
	seed     uint64
}

func (d Domain) compile() (side, error) {
	var s side
	if d.Format == FormatNone {
		if d.Separate {
			return s, fmt.Errorf("domain without PI cannot be separate: %w", ErrBadLayout)
		}
		return s, nil
	}
	if d.Format >= numFormats {
		return s, fmt.Errorf("format %d: %w", d.Format, ErrBadFormat)
	}
	s.pi = true
	s.format = d.Format
	s.tuple = d.Format.TupleSize()
	s.guard = d.Guard
	switch {
	case s.guard == GuardDefault && d.Format == FormatPI8:
		s.guard = GuardCRC16
	case s.guard == GuardDefault && d.Format == FormatPI16:
		s.guard = GuardCRC64NVMe
	case s.guard == GuardDefault && d.Format == FormatCRC32:
		s.guard = GuardCRC32
	case s.guard == GuardDefault && d.Format == FormatCRC64:
		s.guard = GuardCRC64XP10
	case s.guard >= numGuards,
		d.Format == FormatPI8 && s.guard != GuardCRC16 && s.guard != GuardIPChecksum,
		d.Format == FormatPI16 && s.guard != GuardCRC64NVMe,
		d.Format == FormatCRC32 && s.guard != GuardCRC32 && s.guard != GuardCRC32C,
		d.Format == FormatCRC64 && s.guard != GuardCRC64XP10:
		return s, fmt.Errorf("guard %v with %v: %w", d.Guard, d.Format, ErrBadGuard)
	}
	if d.Format.IsCRC() {
		return s, d.compileCRC(&s)
	}
	if d.Type < Type1 || d.Type > Type3 {
		return s, fmt.Errorf("type %d: %w", d.Type, ErrBadType)
	}
	if d.Interval <= 0 || d.Interval%8 != 0 || d.Interval > MaxInterval {
		return s, fmt.Errorf("interval %d for %v: %w", d.Interval, d.Format, ErrBadInterval)
	}
	s.interval = d.Interval
	s.meta = d.Meta()
	if s.meta < s.tuple || s.meta > MaxMetaSize {
		return s, fmt.Errorf("metadata size %d for %v: %w", d.MetaSize, d.Format, ErrBadMetaSize)
	}
	if !d.PIFirst {
		s.piOff = s.meta - s.tuple
		s.prefix = s.piOff
	}
	s.separate = d.Separate
	s.unit = d.Interval
	if !d.Separate {
		s.unit += s.meta
	}
	s.refMask = d.Format.RefTagMax()
	if d.RefTag > s.refMask {
		return s, fmt.Errorf("ref tag %#x for %v: %w", d.RefTag, d.Format, ErrBadTag)
	}
	s.refTag = d.RefTag
	switch d.Ref {
	case RefDefault:
		s.incr = d.Type != Type3
	case RefIncrement:
		s.incr = true
	case RefConstant:
	default:
		return s, fmt.Errorf("ref mode %d: %w", d.Ref, ErrBadRefMode)
	}
	switch d.Escape {
	case EscapeDefault:
		s.escApp = true
		s.escRef = d.Type == Type3
	case EscapeNone:
	case EscapeApp:
		s.escApp = true
	case EscapeAppRef:
		s.escApp, s.escRef = true, true
	default:
		return s, fmt.Errorf("escape %d: %w", d.Escape, ErrBadEscape)
	}
	if s.guard != GuardCRC64NVMe && d.Seed > 0xFFFF {
		return s, fmt.Errorf("seed %#x for %v: %w", d.Seed, s.guard, ErrBadTag)
	}
	s.appTag, s.appMask, s.seed = d.AppTag, d.AppTagMask, d.Seed
	return s, nil
}

// compileCRC compiles the rest of a CRC-format domain: a guard and no
// tags, so no type, tags, reference rule or escape may be given.
func (d Domain) compileCRC(s *side) error {
	if d.Type != 0 || d.RefTag != 0 || d.AppTag != 0 || d.AppTagMask != 0 || d.Ref != RefDefault || d.Escape != EscapeDefault {
		return fmt.Errorf("%v has no protection type, tags or escapes: %w", d.Format, ErrBadTag)
	}
	if d.Interval <= 0 || d.Interval%8 != 0 || d.Interval > MaxInterval {
		return fmt.Errorf("interval %d for %v: %w", d.Interval, d.Format, ErrBadInterval)
	}
	s.interval = d.Interval
	s.meta = d.Meta()
	if s.meta < s.tuple || s.meta > MaxMetaSize {
		return fmt.Errorf("metadata size %d for %v: %w", d.MetaSize, d.Format, ErrBadMetaSize)
	}
	if !d.PIFirst {
		s.piOff = s.meta - s.tuple
		s.prefix = s.piOff
	}
	s.separate = d.Separate
	s.unit = d.Interval
	if !d.Separate {
		s.unit += s.meta
	}
	if d.Format == FormatCRC32 && d.Seed > 0xFFFFFFFF {
		return fmt.Errorf("seed %#x for %v: %w", d.Seed, s.guard, ErrBadTag)
	}
	s.seed = d.Seed
	return nil
}

// expectedRef returns the reference tag of block i.
func (s *side) expectedRef(i uint64) uint64 {
	if s.incr {
		return (s.refTag + i) & s.refMask
	}
	return s.refTag
}

// tupleFields are the fields of one PI tuple.
type tupleFields struct {
	guard uint64
	app   uint16
	ref   uint64
}

// A pi8 tuple read as one big-endian 64-bit word: guard in bits 63:48,
// application tag 47:32, reference tag 31:0.
func pi8Guard(v uint64) uint64 { return v >> 48 }
func pi8App(v uint64) uint16   { return uint16(v >> 32) }
func pi8Ref(v uint64) uint64   { return v & 0xFFFFFFFF }

// pi8Word packs a pi8 tuple (each field cut to its width).
func pi8Word(guard uint64, app uint16, ref uint64) uint64 {
	return uint64(uint16(guard))<<48 | uint64(app)<<32 | ref&0xFFFFFFFF
}

func (s *side) getTuple(t []byte) tupleFields {
	switch s.format {
	case FormatCRC32:
		return tupleFields{guard: uint64(binary.BigEndian.Uint32(t))}
	case FormatCRC64:
		return tupleFields{guard: binary.BigEndian.Uint64(t)}
	}
	if s.format == FormatPI8 {
		v := binary.BigEndian.Uint64(t)
		return tupleFields{guard: pi8Guard(v), app: pi8App(v), ref: pi8Ref(v)}
	}
	return tupleFields{
		guard: binary.BigEndian.Uint64(t),
		app:   binary.BigEndian.Uint16(t[8:]),
		ref:   uint64(binary.BigEndian.Uint16(t[10:]))<<32 | uint64(binary.BigEndian.Uint32(t[12:])),
	}
}

func (s *side) putTuple(t []byte, f tupleFields) {
	switch s.format {
	case FormatCRC32:
		binary.BigEndian.PutUint32(t, uint32(f.guard))
		return
	case FormatCRC64:
		binary.BigEndian.PutUint64(t, f.guard)
		return
	}
	if s.format == FormatPI8 {
		binary.BigEndian.PutUint64(t, pi8Word(f.guard, f.app, f.ref))
		return
	}
	binary.BigEndian.PutUint64(t, f.guard)
	binary.BigEndian.PutUint16(t[8:], f.app)
	binary.BigEndian.PutUint16(t[10:], uint16(f.ref>>32))
	binary.BigEndian.PutUint32(t[12:], uint32(f.ref))
}

// escaped reports whether a tuple is exempt from checking.
func (s *side) escaped(f tupleFields) bool {
	if !s.escApp || f.app != 0xFFFF {
		return false
	}
	return !s.escRef || f.ref == s.refMask
}

// fieldMasks expands a byte mask into per-field bit masks for the format.
// ok is false when the mask cuts through a pi16 field.
func fieldMasks(f Format, m CheckMask) (g uint64, a uint16, r uint64, ok bool) {
	bytes := func(bitsHi, n int) uint64 { // n mask bits from bit bitsHi down
		var v uint64
		for i := range n {
			v <<= 8
			if m&(1<<(bitsHi-i)) != 0 {
				v |= 0xFF
			}
		}
		return v
	}
	switch f {
	case FormatCRC32:
		return bytes(7, 4), 0, 0, m&0x0F == 0
	case FormatCRC64:
		return bytes(7, 8), 0, 0, true
	case FormatPI8:
		return bytes(7, 2), uint16(bytes(5, 2)), bytes(3, 4), true
	case FormatPI16:
		whole := func(field CheckMask, all uint64) (uint64, bool) {
			switch m & field {
			case 0:
				return 0, true
			case field:
				return all, true
			}
			return 0, false
		}
		g, ok1 := whole(CheckGuard, ^uint64(0))
		av, ok2 := whole(CheckAppTag, 0xFFFF)
		r, ok3 := whole(CheckRefTag, 1<<48-1)
		return g, uint16(av), r, ok1 && ok2 && ok3
	}
	return 0, 0, 0, m == 0
}
