package verbs

import (
	"fmt"

	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/psv"
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/umr"
)

// The mlx5dv mkey configure, as rdma-core's mlx5 provider posts it
// (mkey.go has the API): one UMR WQE (control, mkey context, the layout's
// translation, the signature block's BSF) and the SET_PSVs that load the
// domains' seeds.

// postMkeyConfigure posts an mkey configure: the UMR (control, mkey
// context, translation, BSF) and the SET_PSVs that follow it. Called with
// smu held.
func (qp *QP) postMkeyConfigure(wr *SendWR) error {
	cfg := wr.Mkey
	if cfg == nil || cfg.Mkey == nil || cfg.Mkey.pd.ctx != qp.ctx || !qp.integ {
		return fmt.Errorf("mkey configure without an mkey, or on a QP without integrity: %w", ErrInvalid)
	}
	m := cfg.Mkey
	if cfg.Sig != nil && !m.sig {
		return fmt.Errorf("signature on an mkey without MkeyBlockSignature: %w", ErrInvalid)
	}
	if cfg.List != nil && cfg.Interleaved != nil {
		return fmt.Errorf("two layouts: %w", ErrInvalid)
	}
	if cfg.SetAccess && cfg.Access&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic) != 0 {
		return fmt.Errorf("mkey access %#x: %w", cfg.Access, ErrInvalid)
	}
	var w [sq.MaxWQEBBs * sq.WQEBBSize]byte
	const umrOff, mkcOff, xltOff = sq.CtrlSegSize, sq.CtrlSegSize + umr.CtrlSegSize, sq.CtrlSegSize + umr.CtrlSegSize + umr.MkeySegSize
	mask := umr.MaskFree | umr.MaskKey
	x := w[xltOff:]
	var xlt int // translation bytes
	length := m.length
	room := (len(w) - xltOff - psv.BSFSize) / klm.KLMSize
	switch {
	case cfg.List != nil:
		if len(cfg.List) > m.entries || len(cfg.List) > room {
			return fmt.Errorf("list of %d entries: %w", len(cfg.List), ErrMkeyLayout)
		}
		length = 0
		for i, s := range cfg.List {
			klm.KLM(x[i*klm.KLMSize:]).Encode(&klm.KLMFields{ByteCount: s.Length, Key: klm.Key(s.LKey), VA: s.Addr})
			length += uint64(s.Length)
		}
		xlt, mask = len(cfg.List)*klm.KLMSize, mask|umr.MaskLen
	case cfg.Interleaved != nil:
		il := cfg.Interleaved
		if len(il.Entries) > m.entries || len(il.Entries)+1 > room {
			return fmt.Errorf("interleaved layout of %d entries: %w", len(il.Entries), ErrMkeyLayout)
		}
		var cycle uint32
		for i, e := range il.Entries {
			klm.RepeatEntry(x[(i+1)*klm.KLMSize:]).Encode(&klm.RepeatEntryFields{Stride: uint16(e.Count + e.Skip),
				ByteCount: uint16(e.Count), Key: klm.Key(e.LKey), VA: e.Addr})
			cycle += e.Count
		}
		klm.RepeatCtrl(x).Encode(&klm.RepeatCtrlFields{BytesPerCycle: cycle, Op: klm.RepeatBlockOp, RepeatCount: il.Repeat,
			NumEntries: uint16(len(il.Entries))})
		length = uint64(cycle) * uint64(il.Repeat)
		xlt, mask = (len(il.Entries)+1)*klm.KLMSize, mask|umr.MaskLen
	}
	xlt = (xlt + 63) &^ 63
	m.mu.Lock()
	defer m.mu.Unlock()
	state := m.state
	if m.sig {
		switch {
		case cfg.ResetSig:
			state = bsfReset
		case state == bsfUpdated:
			state = bsfSet
		case state == bsfReset:
			state = bsfInit
		}
	}
	bsf, psvs := false, false
	if m.sig {
		switch {
		case cfg.Sig != nil:
			bsf, psvs = true, true
		case state == bsfSet:
			psvs = m.errUpdated
		default:
			mask |= umr.MaskBSFEnable // no signature: BSF_ENABLE with bsf_en 0
		}
	}
	n := xltOff + xlt
	if bsf {
		if err := m.sigBSF(w[n:n+psv.BSFSize], cfg.Sig); err != nil {
			return err
		}
		if length > 0xFFFFFFFF {
			return fmt.Errorf("signature mkey of %d bytes: %w", length, ErrInvalid)
		}
		n += psv.BSFSize
		mask |= umr.MaskBSFEnable
	}
	mk := umr.MkeyFields{QPN: 0xFFFFFF, Variant: klm.Key(m.LKey).Variant(), Len: length, BSFEnabled: bsf}
	if cfg.SetAccess {
		mask |= umr.MaskLW | umr.MaskRR | umr.MaskRW | umr.MaskA
		mk.Access = cfg.Access.mkey() &^ klm.LocalRead // the provider never sets LR in the UMR (LR is outside the mask)
	}
	expectUpdated := m.sig && m.errUpdated
	if expectUpdated {
		mask |= umr.MaskEnSigErr
		mk.ExpectedSigErr = uint8(m.errCount & 1)
	}
	c := umr.CtrlFields{Flags: umr.FlagInline, XLTOctowords: uint16(xlt / klm.OctowordSize), Mask: mask}
	if bsf {
		c.BSFOctowords = psv.BSFSize / klm.OctowordSize
	}
	umr.CtrlSeg(w[umrOff:]).Encode(&c)
	umr.MkeySeg(w[mkcOff:]).Encode(&mk)
	mem, wire := m.mem, m.wire
	if bsf {
		mem, wire = cfg.Sig.Mem, cfg.Sig.Wire
	}
	psvMem, psvWire := psvs && mem != nil, psvs && wire != nil
	umrWR := *wr
	if psvMem || psvWire {
		umrWR.Flags &^= SendSignaled // the last SET_PSV completes the configure
	}
	if err := qp.postWQE(&umrWR, w[:], sq.OpUMR, uint8(n/sq.SegSize), qp.fence(wr), m.LKey, false); err != nil {
		return err
	}
	qp.fmCache = sq.FenceInitiatorSmall
	for _, p := range []struct {
		on  bool
		idx uint32
		d   *SigBlockDomain
		end bool
	}{{psvMem, m.psvMem, mem, !psvWire}, {psvWire, m.psvWire, wire, true}} {
		if !p.on {
			continue
		}
		_, _, f := domainBSF(p.d)
		f.Index = p.idx
		if err := qp.postSetPSV(wr, &f, qp.fence(wr), p.end, false); err != nil {
			return err
		}
	}
	// Posted: the key's state moves on.
	m.state = state
	if bsf {
		m.mem, m.wire, m.state = cfg.Sig.Mem, cfg.Sig.Wire, bsfUpdated
	}
	if m.sig && cfg.ResetSig {
		m.mem, m.wire = nil, nil
	}
	if expectUpdated {
		m.errUpdated = false
	}
	if cfg.List != nil || cfg.Interleaved != nil {
		m.length = length
	}
	return nil
}

// sigBSF builds a signature block's BSF (the provider's
// mlx5_umr_fill_sig_bsf), with m's PSVs.
func (m *Mkey) sigBSF(b []byte, s *SigBlock) error {
	for _, d := range []*SigBlockDomain{s.Mem, s.Wire} {
		if d != nil {
			if err := checkDomain(d); err != nil {
				return err
			}
		}
	}
	if s.Mem == nil && s.Wire == nil {
		return fmt.Errorf("signature block without a domain: %w", ErrInvalid)
	}
	f := psv.BSFFields{Size: psv.BSFWithInline, CheckMask: s.CheckMask, RawDataSize: 0xFFFFFFFF}
	sbs := s.Mem != nil && s.Wire != nil && s.Mem.Type == s.Wire.Type && s.Mem.BlockSize == s.Wire.BlockSize &&
		(s.Mem.Type == SigBlockT10DIF || s.Mem.CRC == s.Wire.CRC)
	var copyMask uint8
	if sbs && s.Mem.Type == SigBlockT10DIF {
		if s.Mem.BgType == s.Wire.BgType && s.Mem.Bg == s.Wire.Bg {
			copyMask |= 0xC0
		}
		if s.Mem.AppTag == s.Wire.AppTag {
			copyMask |= 0x30
		}
		if s.Mem.RefTag == s.Wire.RefTag {
			copyMask |= 0x0F
		}
	} else if sbs {
		copyMask = 0xF0
		if s.Mem.CRC == CRC64XP10 {
			copyMask = 0xFF
		}
	}
	if s.CopyMask != nil {
		if !sbs {
			return fmt.Errorf("copy mask without the same block structure: %w", ErrInvalid)
		}
		copyMask = *s.CopyMask
	}
	f.SBS = sbs
	if s.Wire != nil {
		sel, _ := blockSelector(s.Wire.BlockSize)
		f.WireByte = sel
		f.WireBFS, f.Wire, _ = domainBSF(s.Wire)
		f.WirePSV = m.psvWire
	}
	if sbs {
		f.WireByte = copyMask
	}
	if s.Mem != nil {
		f.MemSelector, _ = blockSelector(s.Mem.BlockSize)
		f.MemBFS, f.Mem, _ = domainBSF(s.Mem)
		f.MemPSV = m.psvMem
	}
	psv.BSF(b).Encode(&f)
	return nil
}

// domainBSF returns a domain's block format selector, its inline section
// and its PSV's transient signature (as guard, app tag, ref tag).
func domainBSF(d *SigBlockDomain) (bfs uint8, in psv.InlineFields, f psv.SetPSVFields) {
	if d.Type == SigBlockT10DIF {
		in = psv.InlineFields{Valid: true, Refresh: true, AppTag: d.AppTag, RefTag: d.RefTag, SigType: psv.SigTypeCRC,
			RepeatBlock: true, Seed: d.Bg != 0, IncRefTag: d.RefRemap, AppTagMask: 0xFFFF}
		if d.BgType == BgCSUM {
			in.SigType = psv.SigTypeIPCS
		}
		switch {
		case d.AppRefEscape:
			in.Escape = psv.EscapeAppRef
		case d.AppEscape:
			in.Escape = psv.EscapeApp
		}
		return 0, in, psv.SetPSVFields{Guard: d.Bg, AppTag: d.AppTag, RefTag: d.RefTag}
	}
	bfs = [...]uint8{psv.BFSCRC32, psv.BFSCRC32C, psv.BFSCRC64XP10}[d.CRC] | psv.BFSRepeat
	if d.Seed == 0 {
		bfs |= psv.BFSSeedZero
	}
	tsig := d.Seed << 32 // transient signature: CRC32 seed << 32, CRC64 the seed
	if d.CRC == CRC64XP10 {
		tsig = d.Seed
	}
	return bfs, in, psv.SetPSVFields{Guard: uint16(tsig >> 48), AppTag: uint16(tsig >> 32), RefTag: uint32(tsig)}
}
