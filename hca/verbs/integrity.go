package verbs

import (
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/umr"
)

// More MR types.
const (
	// MRTypeIntegrity is IB_MR_TYPE_INTEGRITY (AllocMRIntegrity).
	MRTypeIntegrity MRType = iota + 2
	// MRTypeSignature is the old API's IB_MR_TYPE_SIGNATURE (REG_SIG_MR).
	MRTypeSignature
)

// More send opcodes.
const (
	// WRRegMRIntegrity registers an integrity MR (IB_WR_REG_MR_INTEGRITY):
	// MR, Access; the signature attributes are the MR's (SetSigAttrs).
	WRRegMRIntegrity WROpcode = numWROpcodes + iota
	// WRRegSigMR is the old API's IB_WR_REG_SIG_MR: MR (a signature MR),
	// SG the one data SGE, Prot the protection SGE or nil, Access.
	WRRegSigMR
)

// SigType is a signature domain's type (IB_SIG_TYPE_*).
type SigType uint8

// Signature domain types.
const (
	SigTypeNone SigType = iota
	SigTypeT10DIF
)

// BgType is a T10-DIF guard type (IB_T10DIF_*).
type BgType uint8

// Guard types.
const (
	BgCRC  BgType = iota // CRC-16/T10-DIF
	BgCSUM               // IP checksum
)

// SigDomain is one domain of the signature attributes (ib_sig_domain with
// its ib_t10_dif_domain): how the data is protected in memory (SigAttrs.Mem)
// or on the wire (SigAttrs.Wire). A domain of Type SigTypeNone carries no
// PI (its other fields mean nothing).
//
// The T10 protection type is not a field the device sees: it is the
// reference-tag and escape flags. Type 1 and Type 2 are RefRemap (the ref
// tag increments per block) with AppEscape; Type 3 is a constant ref tag
// with AppEscape and RefEscape. T10DIFDomain fills them in from a DIFType
// (and records it in DIFType, which SetSigAttrs checks against them).
//
// Fields equal in both domains are copied, not regenerated (mlx5's copy
// mask, mlx5_set_bsf): when Mem and Wire are both T10-DIF with the same
// PIInterval, the output tuple's guard is copied from the input when the
// BgType is the same (whatever the seeds Bg), its app tag when AppTag is
// the same, its ref tag when RefTag is the same (RefRemap is not
// compared). A copied field is only verified if CheckMask checks it: an
// unchecked bad guard that is copied reaches the output as it came. Give
// the domains different values (or intervals) to have a field
// regenerated.
type SigDomain struct {
	Type   SigType
	BgType BgType
	// PIInterval is the data bytes per protection block: 512, 520, 4048,
	// 4096 or 4160 (the block sizes QuerySigCaps reports; others are
	// refused by SetSigAttrs). With PI, each block takes 8 bytes more in
	// the domain: see MR.WireLen.
	PIInterval      uint32
	Bg              uint16 // guard seed
	AppTag          uint16
	RefTag          uint32
	RefRemap        bool // the ref tag increments per block
	AppEscape       bool // a block whose app tag is 0xFFFF is not checked
	RefEscape       bool // only with AppEscape (ignored without, as mlx5 does): app 0xFFFF and ref all ones
	ApptagCheckMask uint16
	// DIFType optionally names the protection type the flags follow (0:
	// unnamed). It changes nothing on the device; SetSigAttrs refuses a
	// value other than DIFType1–3, RefEscape with Type 1 or 2 and
	// RefRemap with Type 3.
	DIFType DIFType
}

// SigAttrs are an integrity MR's signature attributes (ib_sig_attrs).
type SigAttrs struct {
	// CheckMask selects the input tuple bytes checked (IB_SIG_CHECK_*:
	// SigCheckGuard, SigCheckAppTag, SigCheckRefTag, SigCheckAll).
	CheckMask uint8
	Mem, Wire SigDomain
	// MetaLength is set by MapSGPI: the metadata bytes mapped.
	MetaLength uint32
}

// SigErrType is the kind of a signature error (ib_sig_err_type). Its zero
// value, SigErrNone, is no error; the kernel's IB_SIG_BAD_* values are
// each one more here.
type SigErrType uint8

// Signature error kinds.
const (
	SigErrNone   SigErrType = iota // no error (not a kernel value)
	SigBadGuard                    // IB_SIG_BAD_GUARD
	SigBadRefTag                   // IB_SIG_BAD_REFTAG
	SigBadAppTag                   // IB_SIG_BAD_APPTAG
)

var sigErrNames = [...]string{"none", "IB_SIG_BAD_GUARD", "IB_SIG_BAD_REFTAG", "IB_SIG_BAD_APPTAG"}

// String returns the kernel's name of the kind ("none" for SigErrNone,
// "SigErrType(n)" for an unknown value).
func (t SigErrType) String() string {
	if int(t) < len(sigErrNames) {
		return sigErrNames[t]
	}
	return fmt.Sprintf("SigErrType(%d)", uint8(t))
}

// SigErr is a signature error as CheckMRStatus reports it (ib_sig_err).
type SigErr struct {
	Type     SigErrType
	Expected uint32
	Actual   uint32
	// Offset is the byte offset of the failing block (ULPs divide it by
	// the interval + 8).
	Offset uint64
	Key    uint32
}

// piMode is how MapSGPI mapped data and metadata.
type piMode uint8

const (
	piPA piMode = iota
	piMTT
	piKLM
)

// integ is the signature context of an integrity or signature MR.
type integ struct {
	psvMem, psvWire uint32
	klmMR, mttMR    *MR // internal PI MRs (integrity MRs only)
	maxDesc         int
	attrs           SigAttrs
	attrErr         error // the last SetSigAttrs refused its attributes
	checked         bool  // sig_status_checked
	err             *SigErr
	errCount        uint32 // sigerr_count
	mode            piMode
	dataIOVA        uint64
	dataLen         uint64
	piIOVA          uint64
	metaLen         uint64
	regionLen       uint64
	descBytes       int // translation bytes of the PI MR's descriptor list
}

// AllocMRIntegrity allocates an integrity MR for up to maxData data and
// maxMeta metadata entries, as mlx5 does: two PSVs, an internal KLM and an
// internal MTT PI MR, and the signature key (free until REG_MR_INTEGRITY).
func (pd *PD) AllocMRIntegrity(maxData, maxMeta int) (*MR, error) {
	c := pd.ctx
	if !c.caps.SignatureHandover || maxData <= 0 || maxMeta <= 0 ||
		uint32(max(maxData, maxMeta)) > c.caps.Mkey.MaxFastRegPageListLen()/2 {
		return nil, fmt.Errorf("alloc integrity mr %d+%d: %w", maxData, maxMeta, ErrInvalid)
	}
	mr, err := pd.allocSig(MRTypeIntegrity)
	if err != nil {
		return nil, err
	}
	n := (maxData + maxMeta + 3) &^ 3
	mr.integ.maxDesc = n
	if mr.integ.klmMR, err = pd.allocInternal(klm.ModeKLM, n); err != nil {
		mr.Dereg()
		return nil, err
	}
	if mr.integ.mttMR, err = pd.allocInternal(klm.ModeMTT, n); err != nil {
		mr.Dereg()
		return nil, err
	}
	return mr, nil
}

// allocInternal creates an internal PI MR: free, UMR-enabled, n descriptors.
func (pd *PD) allocInternal(mode klm.AccessMode, n int) (*MR, error) {
	c := pd.ctx
	size := klm.MTTSize
	if mode == klm.ModeKLM {
		size = klm.KLMSize
	}
	descs, descIO, err := c.dma(n*size, 64)
	if err != nil {
		return nil, fmt.Errorf("alloc pi mr: %w", err)
	}
	key, err := pd.createMkey(umr.MkeyFields{Free: true, UMREnabled: true, Mode: mode, QPN: 0xFFFFFF,
		Variant: c.nextVariant(), PD: pd.pdn, XLTOctowords: uint32((n*size + 15) / 16), LogPageSize: pageShift}, nil)
	if err != nil {
		c.fn.FreeDMA(descIO)
		return nil, fmt.Errorf("alloc pi mr: %w", err)
	}
	return &MR{pd: pd, LKey: uint32(key), RKey: uint32(key), descs: descs, descIO: descIO, maxSG: n}, nil
}

// allocSig creates the PSVs and the signature key.
func (pd *PD) allocSig(typ MRType) (*MR, error) {
	c := pd.ctx
	out, err := c.cmd(ifc.NewIn(ifc.CmdCreatePSV, ifc.PSVInPDNum+4).Put32(ifc.PSVInPDNum, 2<<28|pd.pdn))
	if err != nil {
		return nil, fmt.Errorf("alloc sig mr: create psv: %w", err)
	}
	mr := &MR{pd: pd, typ: typ, integ: &integ{psvMem: out.U32(ifc.PSVOutIdx), psvWire: out.U32(ifc.PSVOutIdx + 4), checked: true, errCount: 1}}
	key, err := pd.createMkey(umr.MkeyFields{Free: true, UMREnabled: true, Mode: klm.ModeKLM, QPN: 0xFFFFFF,
		Variant: c.nextVariant(), PD: pd.pdn, XLTOctowords: 4, BSFEnabled: true, BSFOctowords: 4}, nil)
	if err != nil {
		mr.destroyPSVs()
		return nil, fmt.Errorf("alloc sig mr: %w", err)
	}
	mr.LKey, mr.RKey = uint32(key), uint32(key)
	c.mu.Lock()
	c.sigMRs[key.Index()] = mr
	c.mu.Unlock()
	return mr, nil
}

func (mr *MR) destroyPSVs() {
	c := mr.pd.ctx
	for _, p := range []uint32{mr.integ.psvMem, mr.integ.psvWire} {
		c.cmd(ifc.NewIn(ifc.CmdDestroyPSV, ifc.PSVIdxOff+4).Put32(ifc.PSVIdxOff, p))
	}
}

// SetSigAttrs sets the signature attributes a REG_MR_INTEGRITY or
// REG_SIG_MR uses (the kernel's mr->sig_attrs). It validates them first
// and returns a *FieldError (wrapping ErrInvalid) naming the field at
// fault: a domain type or guard type out of range, a PIInterval the device
// has no block size for (it takes 512, 520, 4048, 4096 and 4160), a
// DIFType the flags contradict, or neither domain with PI. Refused
// attributes are not set, and the MR's next registration fails with the
// same error until attributes are accepted. MetaLength is MapSGPI's and is
// kept.
func (mr *MR) SetSigAttrs(a SigAttrs) error {
	if mr.integ == nil {
		return fmt.Errorf("set sig attrs on an MR without signature (not from AllocMRIntegrity or AllocMR(MRTypeSignature)): %w", ErrInvalid)
	}
	err := a.validate()
	mr.mu.Lock()
	defer mr.mu.Unlock()
	g := mr.integ
	if err != nil {
		g.attrErr = err
		return fmt.Errorf("set sig attrs: %w", err)
	}
	g.attrErr = nil
	meta := g.attrs.MetaLength
	g.attrs = a
	g.attrs.MetaLength = meta
	return nil
}

// SigAttrs returns the MR's signature attributes (with MetaLength).
func (mr *MR) SigAttrs() SigAttrs {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.integ == nil {
		return SigAttrs{}
	}
	return mr.integ.attrs
}

// MapSGPI maps an integrity MR's data and metadata scatter lists as mlx5's
// map_mr_sg_pi: PA (one data entry, at most one metadata entry) if
// possible, else MTT (page-aligned boundaries), else KLM; ErrInvalid if
// none can map everything. The MR becomes zero-based with Len the
// memory-domain length (data + metadata); accesses through its key use
// wire-domain lengths (MR.WireLen). MR.PIMode says which mode it chose,
// and so how many completions a signaled registration produces.
//
// Each entry must lie inside a registration of the MR's protection
// domain that its LKey names (an MR from RegMR, or a fast-registration MR
// as last mapped): an unknown LKey, another PD's, or an address range
// outside that registration is refused with a *FieldError naming the
// entry ("data[1].Addr"), as is an entry of length 0.
//
// Metadata in memory comes either separately, in meta (a memory domain
// with PI reads its tuples there, 8 bytes per block), or interleaved
// with the data: MapSGPI(data, nil) with a T10-DIF memory domain takes
// each block's 8 bytes right after its data in the data entries
// themselves (whose lengths then include them).
func (mr *MR) MapSGPI(data, meta []SGE) error {
	if mr.typ != MRTypeIntegrity {
		return fmt.Errorf("map sg pi on an MR that is not an integrity MR (AllocMRIntegrity): %w", ErrInvalid)
	}
	if len(data) == 0 {
		return fmt.Errorf("map sg pi: %w", fieldErr("data", "empty: at least one data entry is needed"))
	}
	c := mr.pd.ctx
	for _, l := range []struct {
		name string
		sg   []SGE
	}{{"data", data}, {"meta", meta}} {
		for i, s := range l.sg {
			if err := c.checkSGE(mr.pd, fmt.Sprintf("%s[%d]", l.name, i), s); err != nil {
				return fmt.Errorf("map sg pi: %w", err)
			}
		}
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	g := mr.integ
	var dlen, mlen uint64
	for _, s := range data {
		dlen += uint64(s.Length)
	}
	for _, s := range meta {
		mlen += uint64(s.Length)
	}
	g.dataLen, g.metaLen = dlen, mlen
	g.attrs.MetaLength = uint32(mlen)
	mr.Addr, mr.Len = 0, dlen+mlen
	switch {
	case len(data) == 1 && len(meta) <= 1:
		g.mode = piPA
		g.dataIOVA, g.regionLen = data[0].Addr, dlen+mlen
		if len(meta) == 1 {
			g.piIOVA = meta[0].Addr
		}
		return nil
	case mr.mapMTT(data, meta):
		return nil
	case len(data)+len(meta) <= g.maxDesc:
		g.mode = piKLM
		k := g.klmMR
		i := 0
		for _, s := range append(append([]SGE(nil), data...), meta...) {
			klm.KLM(k.descs[i*klm.KLMSize:]).Encode(&klm.KLMFields{ByteCount: s.Length, Key: klm.ReservedLKey, VA: s.Addr})
			i++
		}
		g.descBytes = i * klm.KLMSize
		g.dataIOVA, g.piIOVA, g.regionLen = 0, dlen, dlen+mlen
		return nil
	}
	return fmt.Errorf("map sg pi: %d data and %d metadata entries: %w", len(data), len(meta), ErrInvalid)
}

// mapMTT tries the MTT mode: every entry page aligned except the first
// data entry's start and each list's last end.
func (mr *MR) mapMTT(data, meta []SGE) bool {
	g := mr.integ
	const ps = 1 << pageShift
	var pages []uint64
	add := func(list []SGE) (int, bool) {
		n := 0
		for i, e := range list {
			if (i > 0 && e.Addr%ps != 0) || (i < len(list)-1 && (e.Addr+uint64(e.Length))%ps != 0) {
				return 0, false
			}
			for a := e.Addr &^ (ps - 1); a < e.Addr+uint64(e.Length); a += ps {
				pages = append(pages, a)
				n++
			}
		}
		return n, true
	}
	nd, ok := add(data)
	if !ok {
		return false
	}
	if len(meta) > 0 {
		if _, ok := add(meta); !ok {
			return false
		}
	}
	if len(pages) > g.maxDesc {
		return false
	}
	m := g.mttMR
	for i, p := range pages {
		klm.MTT(m.descs[i*klm.MTTSize:]).Encode(&klm.MTTFields{Addr: p, Read: true, Write: true})
	}
	g.mode = piMTT
	g.descBytes = len(pages) * klm.MTTSize
	g.dataIOVA = data[0].Addr
	if len(meta) > 0 {
		g.piIOVA = g.dataIOVA&^(ps-1) + uint64(nd)*ps + meta[0].Addr&(ps-1)
		g.regionLen = g.piIOVA + g.metaLen - g.dataIOVA
	} else {
		g.regionLen = g.dataLen
	}
	return true
}

// CheckMRStatus reports the MR's recorded signature error once and clears
// it (ib_check_mr_status with IB_MR_CHECK_SIG_STATUS); nil means none. A
// recorded error under another key variant is reported as a guard error at
// offset 0 with that key, as the kernel does.
//
// Poll first: an error is recorded on the MR only when the CQ that carries
// its SIG_ERR CQE is polled, as on mlx5, where poll_cq consumes the CQE.
// Until then CheckMRStatus says nil, even for data that failed its check.
// The CQE goes to the send CQ of the QP that made the access: the posting
// QP for a local SGE through the MR's LKey; for a peer's RDMA READ or WRITE
// through its RKey, the MR owner's QP that served the request. The peer's
// own work completion succeeds all the same. The CQE is no work
// completion: a Poll that takes it can return 0.
//
// It must also be called between two registrations of the MR: a
// REG_MR_INTEGRITY or REG_SIG_MR posted before it is refused (ErrInvalid).
func (mr *MR) CheckMRStatus() (*SigErr, error) {
	if mr.integ == nil {
		return nil, fmt.Errorf("check mr status on an MR without signature: %w", ErrInvalid)
	}
	c := mr.pd.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	g := mr.integ
	g.checked = true
	e := g.err
	g.err = nil
	if e == nil {
		return nil, nil
	}
	if e.Key != mr.LKey {
		return &SigErr{Type: SigBadGuard, Key: e.Key}, nil
	}
	return e, nil
}

// sigError records a signature error CQE on its MR (mlx5_poll_one with
// MLX5_CQE_SIG_ERR): no work completion is produced.
func (c *Context) sigError(f *cq.Fields) {
	c.mu.Lock()
	defer c.mu.Unlock()
	mr := c.sigMRs[klm.Key(f.Sig.Mkey).Index()]
	if mr == nil {
		if m := c.mkeys[klm.Key(f.Sig.Mkey).Index()]; m != nil {
			c.mkeySigError(m, &f.Sig)
		}
		return // never for a key the driver did not create
	}
	s := &f.Sig
	e := &SigErr{Type: SigBadGuard, Offset: s.ErrOffset, Key: s.Mkey} // no syndrome bit: the kernel's zeroed item, a guard error
	switch {
	case s.Syndrome&cq.SigErrGuard != 0:
		e.Type, e.Expected, e.Actual = SigBadGuard, s.ExpectedTransSig>>16, s.ActualTransSig>>16
	case s.Syndrome&cq.SigErrRefTag != 0:
		e.Type, e.Expected, e.Actual = SigBadRefTag, s.ExpectedRefTag, s.ActualRefTag
	case s.Syndrome&cq.SigErrAppTag != 0:
		e.Type, e.Expected, e.Actual = SigBadAppTag, s.ExpectedTransSig&0xFFFF, s.ActualTransSig&0xFFFF
	}
	mr.integ.err = e
	mr.integ.errCount++
}
