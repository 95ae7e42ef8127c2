package verbs

import (
	"errors"
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"sync"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/psv"
	"github.com/hcasim/hcasim/umr"
)

// The mlx5dv mkey API in Go terms: an indirect mkey created once
// (CreateMkey, mlx5dv_create_mkey) and configured inside the send queue by
// a WRMkeyConfigure work request (mlx5dv_wr_mkey_configure and its
// setters), its layout and signature set in the same post as the data
// work that follows. The WQEs are rdma-core's mlx5 provider's, as
// ibverbs/c/mlx5dv.c posts them (docs/CONFORMANCE.md).

// ErrMkeyLayout reports a layout longer than the mkey's entries or than a
// WQE holds (mlx5's ENOMEM).
var ErrMkeyLayout = errors.New("verbs: mkey layout too long")

// WRMkeyConfigure configures an mkey (SendWR.Mkey); it completes as
// WCUMR. It needs a QP created with Integrity.
const WRMkeyConfigure WROpcode = numWROpcodes + 2

// WCUMR is the completion of an mkey configure (MLX5DV_WC_UMR).
const WCUMR WCOpcode = 135

// MkeyFlags are mlx5dv_mkey_init_attr's create flags.
type MkeyFlags uint32

// Mkey create flags.
const (
	MkeyIndirect         MkeyFlags = 1 << 0
	MkeyBlockSignature   MkeyFlags = 1 << 1
	MkeyRemoteInvalidate MkeyFlags = 1 << 4
)

// SigBlockType is a signature block domain's type (MLX5DV_SIG_TYPE_*).
type SigBlockType uint8

// Signature block types.
const (
	SigBlockT10DIF SigBlockType = iota
	SigBlockCRC
)

// CRCType is a CRC block signature's CRC (MLX5DV_SIG_CRC_TYPE_*).
type CRCType uint8

// CRC types.
const (
	CRC32 CRCType = iota
	CRC32C
	CRC64XP10
)

// SigBlockDomain is one domain of a signature block (mlx5dv_sig_block_domain).
type SigBlockDomain struct {
	Type SigBlockType
	// BlockSize is 512, 520, 4048, 4096 or 4160.
	BlockSize int
	// T10-DIF (Type SigBlockT10DIF).
	BgType       BgType
	Bg           uint16 // 0 or 0xFFFF
	AppTag       uint16
	RefTag       uint32
	RefRemap     bool
	AppEscape    bool
	AppRefEscape bool
	// CRC (Type SigBlockCRC): the CRC and its seed (0 or all ones).
	CRC  CRCType
	Seed uint64
}

// SigBlock is a signature block configuration (mlx5dv_sig_block_attr).
type SigBlock struct {
	Mem, Wire *SigBlockDomain
	CheckMask uint8
	// CopyMask, if not nil, replaces the copy mask the domains allow
	// (needs the same block structure in both).
	CopyMask *uint8
}

// Interleaved is an interleaved layout: Repeat cycles of the entries.
type Interleaved struct {
	Repeat  uint32
	Entries []InterleavedEntry
}

// InterleavedEntry is one entry of an interleaved layout
// (mlx5dv_mr_interleaved).
type InterleavedEntry struct {
	Addr  uint64
	Count uint32 // bytes taken per cycle
	Skip  uint32 // bytes skipped after them
	LKey  uint32
}

// MkeyConfig is what a WRMkeyConfigure sets: each field is one of
// mlx5dv's setters, nil or false for the ones not called.
type MkeyConfig struct {
	Mkey *Mkey
	// Access sets the access flags (wr_set_mkey_access_flags) when
	// SetAccess is true.
	Access    Access
	SetAccess bool
	// List or Interleaved set the layout.
	List        []SGE
	Interleaved *Interleaved
	// Sig sets a signature block (wr_set_mkey_sig_block).
	Sig *SigBlock
	// ResetSig drops the key's signature (MLX5DV_MKEY_CONF_FLAG_RESET_SIG_ATTR).
	ResetSig bool
}

// Signature states (rdma-core's mlx5_mkey_bsf_state).
const (
	bsfInit = iota
	bsfReset
	bsfSet
	bsfUpdated
)

// Mkey is an indirect mkey (mlx5dv_mkey). LKey and RKey are its keys.
type Mkey struct {
	pd         *PD
	LKey, RKey uint32
	index      uint32
	entries    int
	sig        bool

	mu         sync.Mutex
	psvMem     uint32
	psvWire    uint32
	length     uint64
	state      int
	mem, wire  *SigBlockDomain // the signature in place
	err        *MkeyErr
	errCount   uint32
	errUpdated bool
}

// MkeyErrType is a signature block error's kind (mlx5dv_mkey_err_type).
type MkeyErrType uint8

// Mkey error kinds.
const (
	MkeyNoErr MkeyErrType = iota
	MkeyBadGuard
	MkeyBadRefTag
	MkeyBadAppTag
)

// MkeyErr is an mkey's signature error (mlx5dv_mkey_err).
type MkeyErr struct {
	Type             MkeyErrType
	Expected, Actual uint64
	Offset           uint64
}

// CreateMkey creates an indirect mkey for up to maxEntries layout entries
// (rounded up to 4), with a memory and a wire PSV for MkeyBlockSignature.
func (pd *PD) CreateMkey(flags MkeyFlags, maxEntries int) (*Mkey, error) {
	c := pd.ctx
	if flags == 0 || flags&^(MkeyIndirect|MkeyBlockSignature|MkeyRemoteInvalidate) != 0 {
		return nil, fmt.Errorf("create mkey flags %#x: %w", flags, ErrInvalid)
	}
	sig := flags&MkeyBlockSignature != 0
	if sig && !c.caps.SignatureHandover {
		return nil, fmt.Errorf("create signature mkey: no signature offload: %w", ErrInvalid)
	}
	n := (maxEntries + 3) &^ 3
	if n <= 0 || n > 1<<c.caps.Mkey.LogMaxKLMListSize {
		return nil, fmt.Errorf("create mkey of %d entries: %w", maxEntries, ErrInvalid)
	}
	f := umr.MkeyFields{Free: true, UMREnabled: true, Mode: klm.ModeKLM, Access: klm.LocalRead, QPN: 0xFFFFFF,
		PD: pd.pdn, BSFEnabled: sig, RemoteInvalidate: flags&MkeyRemoteInvalidate != 0, XLTOctowords: uint32(n)}
	if sig {
		f.BSFOctowords = psv.BSFSize / klm.OctowordSize
	}
	key, err := pd.createMkey(f, nil)
	if err != nil {
		return nil, fmt.Errorf("create mkey: %w", err)
	}
	m := &Mkey{pd: pd, LKey: uint32(key), RKey: uint32(key), index: key.Index(), entries: n, sig: sig, errCount: 1, errUpdated: true}
	if sig {
		out, err := c.cmd(ifc.NewIn(ifc.CmdCreatePSV, ifc.PSVInPDNum+4).Put32(ifc.PSVInPDNum, 2<<28|pd.pdn))
		if err != nil {
			c.cmd(ifc.NewIn(ifc.CmdDestroyMkey, ifc.MkeyIdxOff+4).Put32(ifc.MkeyIdxOff, m.index))
			return nil, fmt.Errorf("create mkey psvs: %w", err)
		}
		m.psvMem, m.psvWire = out.U32(ifc.PSVOutIdx)&0xFFFFFF, out.U32(ifc.PSVOutIdx+4)&0xFFFFFF
		c.mu.Lock()
		if c.mkeys == nil {
			c.mkeys = map[uint32]*Mkey{}
		}
		c.mkeys[m.index] = m
		c.mu.Unlock()
	}
	return m, nil
}

// Destroy destroys the mkey and its PSVs.
func (m *Mkey) Destroy() error {
	c := m.pd.ctx
	if m.sig {
		for _, p := range []uint32{m.psvMem, m.psvWire} {
			if _, err := c.cmd(ifc.NewIn(ifc.CmdDestroyPSV, ifc.PSVIdxOff+4).Put32(ifc.PSVIdxOff, p)); err != nil {
				return fmt.Errorf("destroy mkey psv: %w", err)
			}
		}
		c.mu.Lock()
		delete(c.mkeys, m.index)
		c.mu.Unlock()
	}
	if _, err := c.cmd(ifc.NewIn(ifc.CmdDestroyMkey, ifc.MkeyIdxOff+4).Put32(ifc.MkeyIdxOff, m.index)); err != nil {
		return fmt.Errorf("destroy mkey: %w", err)
	}
	return nil
}

// Check returns the signature error kept since the last Check (nil for
// none) and clears it (mlx5dv_mkey_check). Poll the CQ of the QPs that
// used the key first: the error comes with their SIG_ERR CQEs.
func (m *Mkey) Check() (*MkeyErr, error) {
	if !m.sig {
		return nil, fmt.Errorf("mkey check of a key without a signature: %w", ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.err
	m.err = nil
	return e, nil
}

// mkeySigError records a SIG_ERR CQE on its mkey, decoded as rdma-core
// does (the reference tag before the application tag before the guard).
func (c *Context) mkeySigError(m *Mkey, s *cq.SigFields) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errCount++
	m.errUpdated = true
	d := m.wire
	if s.Domain == 1 {
		d = m.mem
	}
	x := uint64(s.ExpectedTransSig)<<32 | uint64(s.ExpectedRefTag)
	a := uint64(s.ActualTransSig)<<32 | uint64(s.ActualRefTag)
	e := &MkeyErr{Offset: s.ErrOffset}
	switch {
	case s.Syndrome&cq.SigErrRefTag != 0:
		e.Type, e.Expected, e.Actual = MkeyBadRefTag, x&0xFFFFFFFF, a&0xFFFFFFFF
	case s.Syndrome&cq.SigErrAppTag != 0:
		e.Type, e.Expected, e.Actual = MkeyBadAppTag, x>>32&0xFFFF, a>>32&0xFFFF
	default:
		e.Type = MkeyBadGuard
		switch {
		case d != nil && d.Type == SigBlockCRC && d.CRC == CRC64XP10:
			e.Expected, e.Actual = x, a
		case d != nil && d.Type == SigBlockCRC:
			e.Expected, e.Actual = x>>32, a>>32
		default:
			e.Expected, e.Actual = x>>48, a>>48
		}
	}
	m.err = e
}

// blockSelector maps a signature block size to its BSF selector.
func blockSelector(n int) (uint8, bool) {
	switch n {
	case 512, 520, 4048, 4096, 4160:
		return psv.Selector(n), true
	}
	return 0, false
}

// checkDomain validates a domain as rdma-core's provider does.
func checkDomain(d *SigBlockDomain) error {
	if _, ok := blockSelector(d.BlockSize); !ok {
		return fmt.Errorf("signature block size %d: %w", d.BlockSize, ErrInvalid)
	}
	switch d.Type {
	case SigBlockT10DIF:
		if (d.Bg != 0 && d.Bg != 0xFFFF) || d.BgType > BgCSUM {
			return fmt.Errorf("T10-DIF guard %v seed %#x: %w", d.BgType, d.Bg, ErrInvalid)
		}
	case SigBlockCRC:
		ones := uint64(1)<<32 - 1
		if d.CRC == CRC64XP10 {
			ones = ^uint64(0)
		}
		if d.CRC > CRC64XP10 || (d.Seed != 0 && d.Seed != ones) {
			return fmt.Errorf("CRC %d seed %#x: %w", d.CRC, d.Seed, ErrInvalid)
		}
	default:
		return fmt.Errorf("signature type %d: %w", d.Type, ErrInvalid)
	}
	return nil
}
