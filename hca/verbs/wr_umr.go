package verbs

import (
	"fmt"

	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/umr"
)

// Fast registration (IB_WR_REG_MR): a UMR WQE that loads an FRWR key's
// translation and access (mlx5-integrity.md §2.3). regUMRSegs also builds
// the UMR that registers an integrity MR's internal PI MR
// (wr_integrity.go).

// postRegMR posts REG_MR as mlx5's set_reg_wr(check_not_free = true):
// the UMR fails on a key that is not free, so an FRWR key must be
// invalidated before it is registered again. It takes the umr_fence cap's
// fence and arms INITIATOR_SMALL for the rest of the post and the next
// post's first WR. Called with smu held.
func (qp *QP) postRegMR(wr *SendWR) error {
	mr := wr.MR
	if mr == nil || mr.typ != MRTypeMemReg {
		return fmt.Errorf("REG_MR without a fast-registration MR: %w", ErrInvalid)
	}
	if wr.Access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && wr.Access&AccessLocalWrite == 0 {
		return fmt.Errorf("REG_MR access %#x: %w", wr.Access, ErrInvalid)
	}
	mr.mu.Lock()
	ndescs, addr, length := mr.ndescs, mr.Addr, mr.Len
	mr.mu.Unlock()
	c := umr.CtrlFields{Flags: umr.FlagCheckNotFree, Mask: umr.MaskFastReg}
	if wr.Access&AccessRemoteAtomic != 0 {
		c.Mask |= umr.MaskA // mlx5's frwr_mkey_mask(atomic)
	}
	mk := umr.MkeyFields{
		Access: wr.Access.mkey(), UMREnabled: true, Mode: klm.ModeMTT, QPN: 0xFFFFFF, Variant: klm.Key(wr.Key).Variant(),
		RemoteInvalidate: true, StartAddr: addr, Len: length, XLTOctowords: uint32((ndescs + 7) &^ 7 / 2), LogPageSize: pageShift,
	}
	w := qp.scratch[:]
	clear(w)
	n := regUMRSegs(w[sq.CtrlSegSize:], c, &mk, mr.descs[:ndescs*klm.MTTSize], mr.descIO)
	if err := qp.postWQE(wr, w, sq.OpUMR, uint8((sq.CtrlSegSize+n)/sq.SegSize), qp.umrFence(), wr.Key, false); err != nil {
		return err
	}
	qp.postNext = sq.FenceInitiatorSmall
	qp.fmCache = qp.postNext
	return nil
}

// regUMRSegs writes a registration UMR's segments after the control
// segment, as set_reg_wr does: the UMR control segment c (its translation
// size and inline flag filled in here), the mkey context mk, and the
// translation descs: inline when it fits in 64 bytes, else a data
// segment pointing to it at descIO. It returns the bytes written.
func regUMRSegs(seg []byte, c umr.CtrlFields, mk *umr.MkeyFields, descs []byte, descIO uint64) int {
	xltOcto := (len(descs) + 63) &^ 63 / klm.OctowordSize
	inline := len(descs) <= 64
	c.XLTOctowords = uint16(xltOcto)
	if inline {
		c.Flags |= umr.FlagInline
	}
	umr.CtrlSeg(seg).Encode(&c)
	umr.MkeySeg(seg[umr.CtrlSegSize:]).Encode(mk)
	n := umr.CtrlSegSize + umr.MkeySegSize
	if inline {
		copy(seg[n:], descs)
		return n + 64
	}
	sq.DataSeg(seg[n:]).Encode(&sq.DataFields{ByteCount: uint32(xltOcto * klm.OctowordSize), LKey: uint32(klm.ReservedLKey), Addr: descIO})
	return n + sq.DataSegSize
}
