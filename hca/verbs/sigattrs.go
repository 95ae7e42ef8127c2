package verbs

import (
	"fmt"
	"strings"
)

// FieldError is an invalid argument with the field it is about: a
// signature attribute ("Wire.PIInterval", from SetSigAttrs or a
// registration) or a scatter entry of MapSGPI ("data[1].LKey"). It wraps
// ErrInvalid, so errors.Is(err, ErrInvalid) holds for it; errors.As gives
// the field.
type FieldError struct {
	// Field names the field as a Go expression from the argument, e.g.
	// "Mem.PIInterval" or "meta[0].Addr".
	Field string
	// Reason says what is wrong with it, with its value.
	Reason string
}

// Error returns the field, the reason and ErrInvalid's text.
func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s: %v", e.Field, e.Reason, ErrInvalid)
}

// Unwrap returns ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Check mask bits of SigAttrs.CheckMask and SigBlock.CheckMask: which
// bytes of the 8-byte T10-DIF tuple of the input domain the device checks
// (IB_SIG_CHECK_*, MLX5DV_SIG_MASK_T10DIF_*). A bit per tuple byte: the
// guard is bytes 0–1, the application tag 2–3, the reference tag 4–7.
const (
	SigCheckGuard  = 0xC0 // IB_SIG_CHECK_GUARD: the 2-byte guard
	SigCheckAppTag = 0x30 // IB_SIG_CHECK_APPTAG: the 2-byte application tag (bits selected by ApptagCheckMask)
	SigCheckRefTag = 0x0F // IB_SIG_CHECK_REFTAG: the 4-byte reference tag
	// SigCheckAll checks the whole tuple.
	SigCheckAll = SigCheckGuard | SigCheckAppTag | SigCheckRefTag
)

// DIFType is a T10 protection information type, as a ULP derives a
// SigDomain from it (NVMe's nvme_rdma_set_sig_domain, iSER's
// iser_set_dif_domain).
type DIFType uint8

// Protection types.
const (
	// DIFType1: the reference tag is the low 32 bits of the LBA and
	// increments per block (RefRemap); a block whose app tag is 0xFFFF is
	// not checked (AppEscape).
	DIFType1 DIFType = 1
	// DIFType2: as Type 1 on RDMA: the initial reference tag comes from
	// the command and increments per block (RefRemap), app-tag escape.
	DIFType2 DIFType = 2
	// DIFType3: the reference tag is constant (no RefRemap); a block is
	// not checked when its app tag is 0xFFFF and its ref tag all ones
	// (AppEscape and RefEscape).
	DIFType3 DIFType = 3
)

// String returns "Type 1" … "Type 3", "unnamed" for 0, or "DIFType(n)".
func (t DIFType) String() string {
	switch t {
	case 0:
		return "unnamed"
	case DIFType1, DIFType2, DIFType3:
		return fmt.Sprintf("Type %d", uint8(t))
	}
	return fmt.Sprintf("DIFType(%d)", uint8(t))
}

// T10DIFDomain returns a T10-DIF domain of protection type typ as the
// NVMe and iSER ULPs fill one in: a CRC guard with seed 0, the interval
// (512, 520, 4048, 4096 or 4160 data bytes, see SigDomain.PIInterval),
// the initial reference tag, the app tag compared in full where CheckMask
// asks for it (ApptagCheckMask 0xFFFF), the app-tag escape, and the
// reference tag rules of the type: RefRemap for Types 1 and 2, RefEscape
// for Type 3. Set AppTag, BgType or Bg on the result as needed; a typ
// other than DIFType1–3 is kept in DIFType and SetSigAttrs refuses it.
func T10DIFDomain(typ DIFType, interval uint32, refTag uint32) SigDomain {
	return SigDomain{Type: SigTypeT10DIF, DIFType: typ, BgType: BgCRC, PIInterval: interval, RefTag: refTag,
		RefRemap: typ == DIFType1 || typ == DIFType2, AppEscape: true, RefEscape: typ == DIFType3, ApptagCheckMask: 0xFFFF}
}

// sigIntervals are the protection intervals a SigDomain may have: the
// block sizes the device's signature capabilities report (QuerySigCaps:
// MLX5DV_BLOCK_SIZE_CAP_*), each a BSF block-size selector.
var sigIntervals = sigBlockSizes

func intervalOK(n uint64) bool {
	for _, s := range sigIntervals {
		if uint64(s) == n {
			return true
		}
	}
	return false
}

func intervalList() string {
	s := make([]string, len(sigIntervals))
	for i, n := range sigIntervals {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// validate checks one domain of signature attributes; name is "Mem" or
// "Wire".
func (d *SigDomain) validate(name string) error {
	switch d.Type {
	case SigTypeNone:
		return nil // the other fields mean nothing
	case SigTypeT10DIF:
	default:
		return fieldErr(name+".Type", "%d: not SigTypeNone or SigTypeT10DIF", d.Type)
	}
	if d.BgType > BgCSUM {
		return fieldErr(name+".BgType", "%d: not BgCRC or BgCSUM", d.BgType)
	}
	if !intervalOK(uint64(d.PIInterval)) {
		return fieldErr(name+".PIInterval", "%d: the device's protection intervals are %s data bytes", d.PIInterval, intervalList())
	}
	switch d.DIFType {
	case 0:
	case DIFType1, DIFType2:
		if d.RefEscape {
			return fieldErr(name+".RefEscape", "set with %v (only Type 3 escapes on the ref tag)", d.DIFType)
		}
	case DIFType3:
		if d.RefRemap {
			return fieldErr(name+".RefRemap", "set with Type 3 (its ref tag is constant)")
		}
	default:
		return fieldErr(name+".DIFType", "%d: not DIFType1, DIFType2 or DIFType3", d.DIFType)
	}
	return nil
}

// validate checks signature attributes as SetSigAttrs and a registration
// take them.
func (a *SigAttrs) validate() error {
	if err := a.Mem.validate("Mem"); err != nil {
		return err
	}
	if err := a.Wire.validate("Wire"); err != nil {
		return err
	}
	if a.Mem.Type == SigTypeNone && a.Wire.Type == SigTypeNone {
		return fieldErr("Mem.Type", "neither Mem nor Wire is SigTypeT10DIF (the device needs PI in at least one domain)")
	}
	return nil
}

// dataLen returns the data bytes of memLen bytes laid out in domain d
// (data and, with PI, 8 bytes after each interval); a trailing piece
// shorter than a block counts as data.
func (d *SigDomain) dataLen(n uint64) uint64 {
	if d.Type != SigTypeT10DIF || d.PIInterval == 0 {
		return n
	}
	iv := uint64(d.PIInterval)
	return n/(iv+8)*iv + min(n%(iv+8), iv)
}

// domainLen returns the bytes data bytes take in domain d: 8 more for
// each block, a trailing partial block included.
func (d *SigDomain) domainLen(data uint64) uint64 {
	if d.Type != SigTypeT10DIF || d.PIInterval == 0 {
		return data
	}
	iv := uint64(d.PIInterval)
	return data + (data+iv-1)/iv*8
}

// WireLen returns the wire-domain length of memLen memory-domain bytes
// under the MR's signature attributes: the length an SGE or an RDMA
// operation through the MR's signature key (its LKey or RKey) carries.
// The key is addressed in the wire domain, while Len (set by MapSGPI) is
// the memory-domain length, data plus the metadata mapped. With a T10-DIF
// wire domain each block takes 8 bytes more on the wire than its data;
// the 8 bytes per block a T10-DIF memory domain holds (separate or
// interleaved) are not on the wire, unless the wire has PI of its own.
// mr.WireLen(mr.Len) is the whole registration's length; a wrong length
// fails on the device as a bare local protection error.
//
// For an MR without signature attributes the wire is the memory: WireLen
// returns memLen.
func (mr *MR) WireLen(memLen uint64) uint64 {
	a := mr.SigAttrs()
	return a.Wire.domainLen(a.Mem.dataLen(memLen))
}

// PIMode is how MapSGPI mapped an integrity MR's data and metadata, as
// mlx5's map_mr_sg_pi chooses: it decides what a REG_MR_INTEGRITY posts.
type PIMode uint8

// PI mapping modes.
const (
	// PIModeNone: not mapped (or not an integrity MR).
	PIModeNone PIMode = iota
	// PIModePA: one data entry and at most one metadata entry, addressed
	// directly. The registration is the signature UMR and two SET_PSVs:
	// one work completion when signaled.
	PIModePA
	// PIModeMTT: page-aligned entries in the internal MTT PI MR, which the
	// registration registers first with a UMR of its own: two work
	// completions (same WRID) when signaled.
	PIModeMTT
	// PIModeKLM: any entries, in the internal KLM PI MR: as PIModeMTT, two
	// work completions when signaled.
	PIModeKLM
)

var piModeNames = [...]string{"none", "PA", "MTT", "KLM"}

// String returns the mode's name, or "PIMode(n)" for an unknown value.
func (m PIMode) String() string {
	if int(m) < len(piModeNames) {
		return piModeNames[m]
	}
	return fmt.Sprintf("PIMode(%d)", uint8(m))
}

// Completions returns the work completions a signaled REG_MR_INTEGRITY
// of an MR mapped in mode m produces (0 for PIModeNone).
func (m PIMode) Completions() int {
	switch m {
	case PIModePA:
		return 1
	case PIModeMTT, PIModeKLM:
		return 2
	}
	return 0
}

// PIMode returns the mode the last MapSGPI chose.
func (mr *MR) PIMode() PIMode {
	if mr.typ != MRTypeIntegrity {
		return PIModeNone
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	g := mr.integ
	if g.dataLen == 0 {
		return PIModeNone
	}
	switch g.mode {
	case piMTT:
		return PIModeMTT
	case piKLM:
		return PIModeKLM
	}
	return PIModePA
}
