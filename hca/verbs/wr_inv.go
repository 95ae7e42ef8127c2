package verbs

import (
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/umr"
)

// postLocalInv posts LOCAL_INV as mlx5 does: a UMR WQE whose control
// segment masks only the free bit and whose mkey context sets it
// (mlx5-integrity.md §2.7), the key to invalidate in the immediate. Its
// fence is any other WR's: current kernels neither arm the next fence nor
// order it strongly. Called with smu held.
func (qp *QP) postLocalInv(wr *SendWR) error {
	w := qp.scratch[:]
	clear(w)
	seg := w[sq.CtrlSegSize:]
	umr.CtrlSeg(seg).Encode(&umr.CtrlFields{Flags: umr.FlagInline, Mask: umr.MaskInvalidate})
	umr.MkeySeg(seg[umr.CtrlSegSize:]).Encode(&umr.MkeyFields{Free: true})
	const ds = (sq.CtrlSegSize + umr.CtrlSegSize + umr.MkeySegSize) / sq.SegSize
	if err := qp.postWQE(wr, w, sq.OpUMR, ds, qp.fence(wr), wr.InvalidateRKey, false); err != nil {
		return err
	}
	qp.fmCache = qp.postNext
	return nil
}
