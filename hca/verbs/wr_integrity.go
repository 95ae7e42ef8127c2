package verbs

import (
	"fmt"

	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/psv"
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/umr"
)

// The integrity registrations, as mlx5_ib posts them
// (mlx5-integrity.md §2.2): REG_MR_INTEGRITY is an optional UMR that
// registers the internal PI MR over the mapped pages (postPIMRUMR), the
// signature UMR (control, mkey context, 64-byte translation, BSF), then a
// SET_PSV for the memory domain and one for the wire domain. The old
// API's REG_SIG_MR posts the same signature UMR and SET_PSVs over the
// SGEs the WR carries.

// postIntegrity posts REG_MR_INTEGRITY's WQEs (§2.2) or REG_SIG_MR's.
// Called with smu held.
func (qp *QP) postIntegrity(wr *SendWR) error {
	mr := wr.MR
	switch {
	case !qp.integ:
		return fmt.Errorf("signature WR on QP %#x, created without QPInitAttr.Integrity: %w", qp.qpn, ErrInvalid)
	case mr == nil:
		return fmt.Errorf("signature WR without an MR (SendWR.MR is nil): %w", ErrInvalid)
	case mr.integ == nil:
		return fmt.Errorf("signature WR with MR %#x, which has no signature (not from AllocMRIntegrity or AllocMR(MRTypeSignature)): %w", mr.LKey, ErrInvalid)
	case wr.Access&AccessRemoteAtomic != 0:
		return fmt.Errorf("signature WR with AccessRemoteAtomic (a signature key allows no atomics): %w", ErrInvalid)
	}
	c := qp.ctx
	c.mu.Lock()
	checked := mr.integ.checked
	c.mu.Unlock()
	mr.mu.Lock()
	defer mr.mu.Unlock()
	g := mr.integ
	if g.attrErr != nil {
		return fmt.Errorf("signature attributes refused by SetSigAttrs: %w", g.attrErr)
	}
	if err := g.attrs.validate(); err != nil {
		return fmt.Errorf("signature attributes (SetSigAttrs not called?): %w", err)
	}
	// Both APIs need CheckMRStatus since the last registration (mlx5's
	// sig_status_checked; set_sig_umr_wr checked it for REG_SIG_MR too).
	if !checked {
		name := "REG_MR_INTEGRITY"
		if wr.Opcode == WRRegSigMR {
			name = "REG_SIG_MR"
		}
		return fmt.Errorf("%s before the status of the last registration was checked: %w", name, ErrInvalid)
	}
	var dataKey, protKey klm.Key
	interleaved := false
	fence := qp.umrFence()
	if wr.Opcode == WRRegMRIntegrity {
		if mr.typ != MRTypeIntegrity || len(wr.SG) != 0 {
			return fmt.Errorf("REG_MR_INTEGRITY with %d SGEs or a non-integrity MR: %w", len(wr.SG), ErrInvalid)
		}
		dataKey = klm.ReservedLKey
		if g.mode != piPA {
			pi := g.klmMR
			mode := klm.ModeKLM
			start := uint64(0)
			if g.mode == piMTT {
				pi, mode, start = g.mttMR, klm.ModeMTT, g.dataIOVA
			}
			if err := qp.postPIMRUMR(wr, pi, mode, start, g); err != nil {
				return err
			}
			dataKey = klm.Key(pi.LKey)
		}
		protKey = dataKey
	} else {
		if mr.typ != MRTypeSignature || len(wr.SG) != 1 {
			return fmt.Errorf("REG_SIG_MR needs a signature MR and exactly one data SGE: %w", ErrInvalid)
		}
		d := wr.SG[0]
		dataKey, g.dataIOVA, g.dataLen = klm.Key(d.LKey), d.Addr, uint64(d.Length)
		g.metaLen, g.piIOVA, protKey = 0, 0, dataKey
		if p := wr.Prot; p != nil {
			if p.LKey == d.LKey && p.Addr == d.Addr && p.Length == d.Length {
				interleaved = true
			} else {
				g.metaLen, g.piIOVA, protKey = uint64(p.Length), p.Addr, klm.Key(p.LKey)
			}
		}
		g.regionLen = g.dataLen + g.metaLen
		fence = qp.fence(wr)
	}
	// The signature UMR: 16 DS, inline translation and BSF, not-free check.
	w := qp.scratch[:]
	clear(w)
	seg := w[sq.CtrlSegSize:]
	umr.CtrlSeg(seg).Encode(&umr.CtrlFields{Flags: umr.FlagInline | umr.FlagCheckNotFree, XLTOctowords: 4, BSFOctowords: 4, Mask: umr.MaskSignature})
	umr.MkeySeg(seg[umr.CtrlSegSize:]).Encode(&umr.MkeyFields{
		Access: wr.Access.mkey(), UMREnabled: true, Mode: klm.ModeKLM, QPN: 0xFFFFFF, Variant: klm.Key(mr.RKey).Variant(),
		RemoteInvalidate: true, ExpectedSigErr: uint8(g.errCount & 1), BSFEnabled: true, PD: mr.pd.pdn,
		Len: g.regionLen, XLTOctowords: 4, BSFOctowords: 4,
	})
	x := seg[umr.CtrlSegSize+umr.MkeySegSize:]
	if err := g.sigXLT(x, dataKey, protKey, interleaved); err != nil {
		return err
	}
	g.bsf(x[64:128])
	if err := qp.postWQE(wr, w, sq.OpUMR, 16, fence, mr.RKey, false); err != nil {
		return err
	}
	// SET_PSV memory, then wire: small fence, solicited, unsignaled.
	psvFence := sq.FenceInitiatorSmall
	if wr.Opcode == WRRegSigMR {
		psvFence = fence
	}
	for _, p := range []struct {
		idx uint32
		d   *SigDomain
	}{{g.psvMem, &g.attrs.Mem}, {g.psvWire, &g.attrs.Wire}} {
		f := psv.SetPSVFields{Index: p.idx}
		if p.d.Type == SigTypeT10DIF {
			f.Guard, f.AppTag, f.RefTag = p.d.Bg, p.d.AppTag, p.d.RefTag
		}
		if err := qp.postSetPSV(wr, &f, psvFence, false, true); err != nil {
			return err
		}
	}
	qp.fmCache = sq.FenceInitiatorSmall
	if wr.Opcode == WRRegMRIntegrity {
		qp.postNext = sq.FenceInitiatorSmall // the rest of the post inherits it too
	}
	c.mu.Lock()
	g.checked = false
	c.mu.Unlock()
	return nil
}

// postPIMRUMR posts the UMR that registers the internal PI MR as
// set_reg_wr(check_not_free = false) does: no free check, the key not
// bumped, and the access the registration asked for (get_umr_flags: local
// read always, nothing added).
func (qp *QP) postPIMRUMR(wr *SendWR, pi *MR, mode klm.AccessMode, start uint64, g *integ) error {
	logPage := uint8(0)
	descs := (g.descBytes/klm.MTTSize + 7) &^ 7 / 2 // MTT: ALIGN(n, 8) / 2
	if mode == klm.ModeMTT {
		logPage = pageShift
	} else {
		descs = (g.descBytes/klm.KLMSize + 7) &^ 7 // KLM: ALIGN(n, 8)
	}
	mk := umr.MkeyFields{
		Access: wr.Access.mkey(), UMREnabled: true, Mode: mode, QPN: 0xFFFFFF, Variant: klm.Key(pi.LKey).Variant(),
		RemoteInvalidate: true, StartAddr: start, Len: g.regionLen, XLTOctowords: uint32(descs), LogPageSize: logPage,
	}
	w := qp.scratch[:]
	clear(w)
	n := regUMRSegs(w[sq.CtrlSegSize:], umr.CtrlFields{Mask: umr.MaskFastReg}, &mk, pi.descs[:g.descBytes], pi.descIO)
	return qp.postWQE(wr, w, sq.OpUMR, uint8((sq.CtrlSegSize+n)/sq.SegSize), qp.umrFence(), pi.RKey, false)
}

// postSetPSV posts a SET_PSV WQE that loads f into a PSV, for wr: it
// keeps wr's SendSignaled only when keepSignal (the last WQE of a chain
// completes it) and is solicited when solicited is. Called with smu held.
func (qp *QP) postSetPSV(wr *SendWR, f *psv.SetPSVFields, fence sq.Fence, keepSignal, solicited bool) error {
	w := qp.scratch[:sq.WQEBBSize]
	clear(w)
	psv.SetPSVSeg(w[sq.CtrlSegSize:]).Encode(f)
	psvWR := *wr
	if !keepSignal {
		psvWR.Flags &^= SendSignaled
	}
	return qp.postWQE(&psvWR, w, sq.OpSetPSV, 2, fence, 0, solicited)
}

// bsSelector is mlx5's bs_selector: 0 for intervals without one.
func bsSelector(iv uint32) uint8 { return psv.Selector(int(iv)) }

// bsf builds the BSF as mlx5_set_bsf does.
func (g *integ) bsf(b []byte) {
	a := &g.attrs
	mem, wire := &a.Mem, &a.Wire
	f := psv.BSFFields{Size: psv.BSFWithInline, CheckMask: a.CheckMask, RawDataSize: uint32(g.dataLen)}
	inline := func(d *SigDomain) psv.InlineFields {
		in := psv.InlineFields{Valid: true, Refresh: true, AppTag: d.AppTag, RefTag: d.RefTag, SigType: psv.SigTypeCRC,
			RepeatBlock: true, IncRefTag: d.RefRemap, AppTagMask: d.ApptagCheckMask}
		if d.BgType == BgCSUM {
			in.SigType = psv.SigTypeIPCS
		}
		switch {
		case d.AppEscape && d.RefEscape:
			in.Escape = psv.EscapeAppRef
		case d.AppEscape:
			in.Escape = psv.EscapeApp
		}
		return in
	}
	if mem.Type == SigTypeT10DIF {
		f.MemSelector = bsSelector(mem.PIInterval)
		f.MemPSV = g.psvMem
		f.Mem = inline(mem)
	}
	if wire.Type == SigTypeT10DIF {
		f.WirePSV = g.psvWire
		f.Wire = inline(wire)
		if mem.Type == SigTypeT10DIF && mem.PIInterval == wire.PIInterval {
			f.SBS = true
			if mem.BgType == wire.BgType {
				f.WireByte |= 0xC0
			}
			if mem.AppTag == wire.AppTag {
				f.WireByte |= 0x30
			}
			if mem.RefTag == wire.RefTag {
				f.WireByte |= 0x0F
			}
		} else {
			f.WireByte = bsSelector(wire.PIInterval)
		}
	}
	psv.BSF(b).Encode(&f)
}

// sigXLT writes the signature key's 64-byte translation (§2.4): one KLM
// when memory holds no separate metadata, else the strided repeat block
// that interleaves data and PI.
func (g *integ) sigXLT(b []byte, dataKey, protKey klm.Key, interleaved bool) error {
	clear(b[:64])
	if g.metaLen == 0 || interleaved {
		klm.KLM(b).Encode(&klm.KLMFields{ByteCount: uint32(g.dataLen), Key: dataKey, VA: g.dataIOVA})
		return nil
	}
	iv := g.attrs.Mem.PIInterval
	if g.attrs.Mem.Type != SigTypeT10DIF || iv == 0 {
		return fmt.Errorf("bad block size: metadata in memory without a T10-DIF memory domain: %w", ErrInvalid)
	}
	klm.RepeatCtrl(b).Encode(&klm.RepeatCtrlFields{BytesPerCycle: iv + 8, Op: klm.RepeatBlockOp, RepeatCount: uint32(g.dataLen) / iv, NumEntries: 2})
	klm.RepeatEntry(b[16:]).Encode(&klm.RepeatEntryFields{Stride: uint16(iv), ByteCount: uint16(iv), Key: dataKey, VA: g.dataIOVA})
	klm.RepeatEntry(b[32:]).Encode(&klm.RepeatEntryFields{Stride: 8, ByteCount: 8, Key: protKey, VA: g.piIOVA})
	return nil
}
