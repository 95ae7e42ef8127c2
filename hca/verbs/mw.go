package verbs

import (
	"fmt"

	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/umr"
)

// MWType is a memory window's type (IBV_MW_TYPE_*).
type MWType uint8

// Memory window types: type 1 windows are bound by BindMW and serve any QP
// of their PD; type 2 (2B) windows are bound by a WRBindMW work request
// and serve only the QP that bound them.
const (
	MWType1 MWType = 1
	MWType2 MWType = 2
)

// WRBindMW binds SendWR.Bind's window (a type 2 window, or a type 1 one
// through BindMW).
const WRBindMW WROpcode = numWROpcodes + 3

// MW is a memory window: an mkey made as the kernel's mlx5 driver makes
// one (free, umr_en, local read, a KLM translation of four octowords,
// remote invalidation for type 2) that binds give a range of an MR.
type MW struct {
	pd *PD
	// RKey is the window's current key. BindMW moves it to the next
	// variant; a WRBindMW's new key is the caller's (MWBind.RKey).
	RKey uint32
	typ  MWType
}

// MWBind is a bind's description: the window, its new key, and the MR
// range and rights it gets. Length 0 unbinds.
type MWBind struct {
	MW           *MW
	RKey         uint32
	MR           *MR
	Addr, Length uint64
	Access       Access
}

// AllocMW allocates a memory window of type t in pd.
func (pd *PD) AllocMW(t MWType) (*MW, error) {
	if t != MWType1 && t != MWType2 {
		return nil, fmt.Errorf("alloc mw of type %d: %w", t, ErrInvalid)
	}
	variant := pd.ctx.nextVariant()
	key, err := pd.createMkey(umr.MkeyFields{Free: true, UMREnabled: true, Mode: klm.ModeKLM, Access: klm.LocalRead,
		QPN: klm.NoQPN, Variant: variant, PD: pd.pdn, XLTOctowords: 4, RemoteInvalidate: t == MWType2}, nil)
	if err != nil {
		return nil, fmt.Errorf("alloc mw: %w", err)
	}
	return &MW{pd: pd, RKey: uint32(key), typ: t}, nil
}

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// Dealloc destroys the window: access through it ends.
func (mw *MW) Dealloc() error {
	idx := klm.Key(mw.RKey).Index()
	if _, err := mw.pd.ctx.cmd(ifc.NewIn(ifc.CmdDestroyMkey, ifc.MkeyIdxOff+4).Put32(ifc.MkeyIdxOff, idx)); err != nil {
		return fmt.Errorf("dealloc mw: %w", err)
	}
	return nil
}

// BindMW binds a type 1 window as ibv_bind_mw does: a WRBindMW work
// request with the window's next key variant, which the window takes
// once posted.
func (qp *QP) BindMW(b MWBind, wrid uint64, flags SendFlags) error {
	if b.MW == nil || b.MW.typ != MWType1 {
		return fmt.Errorf("bind mw: not a type 1 window: %w", ErrInvalid)
	}
	k := klm.Key(b.MW.RKey)
	b.RKey = uint32(klm.MakeKey(k.Index(), k.Variant()+1))
	if _, err := qp.PostSend([]SendWR{{WRID: wrid, Opcode: WRBindMW, Flags: flags, Bind: &b}}); err != nil {
		return err
	}
	b.MW.RKey = b.RKey
	return nil
}

// postBindMW posts a bind as rdma-core's mlx5 provider builds it
// (set_bind_wr): UMR control (translation offset, inline; mask FREE and
// KEY, QPN for type 2, the range and rights with a length; type 2 checks
// the window is free, or with length 0 that it is this QP's), the mkey
// context, one KLM over the MR. Called with smu held.
func (qp *QP) postBindMW(wr *SendWR) error {
	b := wr.Bind
	if b == nil || b.MW == nil || (b.Length > 0 && b.MR == nil) {
		return fmt.Errorf("bind mw: %w", ErrInvalid)
	}
	if b.Length > 1<<31 {
		return fmt.Errorf("bind mw of %d bytes (one KLM maps 2 GiB): %w", b.Length, ErrInvalid)
	}
	w := qp.scratch[:]
	clear(w)
	seg := w[sq.CtrlSegSize:]
	c := umr.CtrlFields{Flags: umr.FlagXLTOffset | umr.FlagInline, Mask: umr.MaskFree | umr.MaskKey}
	m := umr.MkeyFields{QPN: klm.NoQPN, Variant: klm.Key(b.RKey).Variant()}
	type2 := b.MW.typ == MWType2
	if type2 {
		c.Mask |= umr.MaskQPN
	}
	n := umr.CtrlSegSize + umr.MkeySegSize
	if b.Length > 0 {
		if type2 {
			c.Flags |= umr.FlagCheckNotFree // rdma-core's CHECK_FREE
			m.QPN = qp.qpn
		}
		c.Mask |= umr.MaskLen | umr.MaskStartAddr | umr.MaskLW | umr.MaskRR | umr.MaskRW | umr.MaskA
		c.XLTOctowords = 4
		m.Access = b.Access.mkey() &^ klm.LocalRead
		m.StartAddr, m.Len = b.Addr, b.Length
		klm.KLM(seg[n:]).Encode(&klm.KLMFields{ByteCount: uint32(b.Length), Key: klm.Key(b.MR.LKey), VA: b.Addr})
		n += 64
	} else {
		m.Free = true
		if type2 {
			c.Flags |= umr.FlagCheckQPN
		}
	}
	umr.CtrlSeg(seg).Encode(&c)
	umr.MkeySeg(seg[umr.CtrlSegSize:]).Encode(&m)
	ds := uint8((sq.CtrlSegSize + n) / sq.SegSize)
	if err := qp.postWQE(wr, w, sq.OpUMR, ds, qp.fence(wr), b.MW.RKey, false); err != nil {
		return err
	}
	qp.postNext = sq.FenceInitiatorSmall
	qp.fmCache = qp.postNext
	return nil
}
