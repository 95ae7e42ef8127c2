package umr

import (
	"errors"
	"fmt"

	"github.com/hcasim/hcasim/klm"
)

// Errors of a UMR. Each becomes an error completion (the QP then moves to
// error); the mkey table is left unchanged.
var (
	ErrShortWQE         = errors.New("umr: work request shorter than its segments")
	ErrUnknownMask      = errors.New("umr: mkey_mask has bits the device does not know")
	ErrShortTranslation = errors.New("umr: translation larger than supplied")
	ErrTooManyEntries   = klm.ErrTooManyEntries // translation larger than the mkey or the device holds
	ErrNotFree          = errors.New("umr: mkey is not free")
	ErrFree             = errors.New("umr: mkey is free")
	ErrNotUMR           = errors.New("umr: mkey was not created with umr_en")
	ErrQPN              = errors.New("umr: mkey is bound to another QP")
	ErrBadBSF           = errors.New("umr: BSF missing or not 64 bytes")
	ErrBadFlags         = errors.New("umr: flags not supported")
	ErrFetch            = errors.New("umr: cannot read the translation through its data segment")
	ErrAccess           = klm.ErrBadAccess // remote write or atomic without local write
)

// Fetcher reads n bytes of a translation that a UMR points to through a
// data segment {key, addr}, checking the key as a local read of the QP
// posting the UMR.
type Fetcher func(key klm.Key, addr uint64, n int) ([]byte, error)

// Op is a decoded UMR work request.
type Op struct {
	// Target is the mkey to modify, from the control segment's immediate
	// (umr_mkey). Only its index is used: the variant the key gets is the
	// mkey segment's, under MaskKey.
	Target klm.Key
	Ctrl   CtrlFields
	Mkey   MkeyFields
	// XLT is the translation (inline, or fetched), XLTOffset where it goes
	// in the mkey's translation, in octowords.
	XLT       []byte
	XLTOffset uint64
	// BSF is the BSF when the mask enables one.
	BSF []byte
	// Poster is the number of the QP that posted the UMR, for
	// FlagCheckQPN (set by the caller; Decode leaves it 0).
	Poster uint32
}

// IsLocalInvalidate reports whether op is a LOCAL_INV: it only sets the
// free bit.
func (op *Op) IsLocalInvalidate() bool {
	return op.Ctrl.Mask == MaskFree && op.Mkey.Free && len(op.XLT) == 0
}

// Decode decodes the segments of a UMR work request that follow its WQE
// control segment: UMR control segment, mkey context segment, then the
// translation (inline, or a data segment fetched with fetch), then the BSF
// when the mask enables one. target is the control segment's immediate.
// The slices of op alias body unless fetched.
func Decode(body []byte, target klm.Key, fetch Fetcher) (*Op, error) {
	if len(body) < CtrlSegSize+MkeySegSize {
		return nil, fmt.Errorf("%d bytes: %w", len(body), ErrShortWQE)
	}
	op := &Op{Target: target, Ctrl: CtrlSeg(body).Fields(), Mkey: MkeySeg(body[CtrlSegSize:]).Fields()}
	c := &op.Ctrl
	rest := body[CtrlSegSize+MkeySegSize:]
	if bad := c.Mask &^ MaskKnown; bad != 0 {
		return nil, fmt.Errorf("mask %#x: unknown bits %#x: %w", uint64(c.Mask), uint64(bad), ErrUnknownMask)
	}
	if c.Flags&0x07 != 0 || c.Flags&(FlagCheckFree|FlagCheckNotFree) == FlagCheckFree|FlagCheckNotFree {
		return nil, fmt.Errorf("flags %#02x: %w", c.Flags, ErrBadFlags)
	}
	bsf := c.Mask&MaskBSFEnable != 0 && op.Mkey.BSFEnabled
	if c.Flags&FlagXLTOffset != 0 {
		if bsf {
			return nil, fmt.Errorf("translation offset together with a BSF: %w", ErrBadFlags)
		}
		op.XLTOffset = c.XLTOffset()
	}
	if n := int(c.XLTOctowords) * klm.OctowordSize; n > 0 {
		if c.Flags&FlagInline != 0 {
			if len(rest) < n {
				return nil, fmt.Errorf("%d translation bytes inline, %d present: %w", n, len(rest), ErrShortTranslation)
			}
			op.XLT, rest = rest[:n], rest[n:]
		} else {
			if len(rest) < DataSegSize {
				return nil, fmt.Errorf("no data segment for the translation: %w", ErrShortWQE)
			}
			d := klm.KLM(rest).Fields()
			rest = rest[DataSegSize:]
			if int64(d.ByteCount) < int64(n) {
				return nil, fmt.Errorf("%d translation bytes, data segment holds %d: %w", n, d.ByteCount, ErrShortTranslation)
			}
			if fetch == nil {
				return nil, fmt.Errorf("no fetcher: %w", ErrFetch)
			}
			b, err := fetch(d.Key, d.VA, n)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrFetch, err)
			}
			if len(b) != n {
				return nil, fmt.Errorf("fetched %d of %d bytes: %w", len(b), n, ErrFetch)
			}
			op.XLT = b
		}
	}
	if bsf {
		if int(c.BSFOctowords)*klm.OctowordSize != BSFSize || len(rest) < BSFSize {
			return nil, fmt.Errorf("bsf_octowords %d with %d bytes left: %w", c.BSFOctowords, len(rest), ErrBadBSF)
		}
		op.BSF = rest[:BSFSize]
	}
	return op, nil
}

// Apply carries op out on the table: the free checks, then every field
// under the mask (fields outside it keep their values), the translation,
// the BSF. The change is atomic; on error the table is unchanged.
func Apply(t *klm.Table, op *Op) error {
	err := t.Update(op.Target.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
		return next(cur, op)
	})
	if err != nil {
		return fmt.Errorf("umr on mkey %v: %w", op.Target, err)
	}
	return nil
}

// next builds the mkey context op leaves behind.
func next(cur *klm.Mkey, op *Op) (*klm.Mkey, error) {
	c, f := &op.Ctrl, &op.Mkey
	if !cur.UMREnabled {
		return nil, ErrNotUMR
	}
	if c.Flags&FlagCheckNotFree != 0 && !cur.Free {
		return nil, ErrNotFree
	}
	if c.Flags&FlagCheckFree != 0 && cur.Free {
		return nil, ErrFree
	}
	if c.Flags&FlagCheckQPN != 0 && cur.QPN != klm.NoQPN && cur.QPN != op.Poster {
		return nil, ErrQPN
	}
	m := cur.Clone()
	mask := c.Mask
	if mask&MaskLen != 0 {
		m.Len, m.Length64 = f.Len, f.Length64
	}
	if mask&MaskPageSize != 0 {
		m.LogPageSize = f.LogPageSize
	}
	if mask&MaskStartAddr != 0 {
		m.StartAddr = f.StartAddr
	}
	if mask&MaskPD != 0 {
		m.PD = f.PD
	}
	if mask&MaskEnRInval != 0 {
		m.RemoteInvalidate = f.RemoteInvalidate
	}
	if mask&MaskEnSigErr != 0 {
		m.ExpectedSigErr = f.ExpectedSigErr
	}
	if mask&MaskBSFEnable != 0 {
		m.BSFEnabled = f.BSFEnabled
		m.BSF = nil
		if f.BSFEnabled {
			if len(op.BSF) != BSFSize {
				return nil, ErrBadBSF
			}
			m.BSF = append([]byte(nil), op.BSF...)
		}
	}
	if mask&MaskKey != 0 {
		m.Variant = f.Variant
	}
	if mask&MaskQPN != 0 {
		m.QPN = f.QPN
	}
	for _, b := range []struct {
		mask Mask
		bit  klm.Access
	}{{MaskLR, klm.LocalRead}, {MaskLW, klm.LocalWrite}, {MaskRR, klm.RemoteRead}, {MaskRW, klm.RemoteWrite}, {MaskA, klm.Atomic}} {
		if mask&b.mask != 0 {
			m.Access = m.Access&^b.bit | f.Access&b.bit
		}
	}
	if mask&MaskSmallFence != 0 {
		m.SmallFence = f.SmallFence
	}
	if mask&MaskFree != 0 {
		m.Free = f.Free
	}
	if len(op.XLT) > 0 {
		capBytes := uint64(cur.XLTOctowords) * klm.OctowordSize
		off := op.XLTOffset * klm.OctowordSize
		if off > capBytes || uint64(len(op.XLT)) > capBytes-off {
			return nil, fmt.Errorf("%d translation bytes at offset %d, the mkey holds %d: %w", len(op.XLT), off, capBytes, ErrTooManyEntries)
		}
		if off == 0 {
			// A translation written from the start replaces the old one:
			// entries past it are stale and never used.
			m.XLT = append([]byte(nil), op.XLT...)
		} else {
			x := make([]byte, max(uint64(len(cur.XLT)), off+uint64(len(op.XLT))))
			copy(x, cur.XLT)
			copy(x[off:], op.XLT)
			m.XLT = x
		}
	}
	if !m.Access.Valid() {
		return nil, fmt.Errorf("access %v: %w", m.Access, ErrAccess)
	}
	return m, nil
}
