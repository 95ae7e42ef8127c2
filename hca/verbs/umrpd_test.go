package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/umr"
)

// TestUMRMovesPD: a UMR that moves a key to another PD (as ibv_rereg_mr's
// IBV_REREG_MR_CHANGE_PD does) moves the key's PD reference: the new PD is
// busy until the key goes, and then free.
func TestUMRMovesPD(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	a, b := newSide(t, dev), newSide(t, dev)
	connect(t, a, b)
	pd2, err := a.ctx.AllocPD()
	require.NoError(t, err, "alloc the second PD")
	mr, err := a.pd.AllocMR(1 /* MRTypeMemReg */, 8)
	require.NoError(t, err, "alloc MR")
	w := make([]byte, 2*sq.WQEBBSize)
	n := sq.CtrlSegSize + umr.CtrlSegSize + umr.MkeySegSize
	sq.CtrlSeg(w).Encode(&sq.CtrlFields{WQEIndex: a.qp.CurPost(), Opcode: sq.OpUMR, QPN: a.qp.QPN(), DS: uint8(n / sq.SegSize),
		CE: sq.CECQUpdate, Imm: mr.LKey})
	umr.CtrlSeg(w[sq.CtrlSegSize:]).Encode(&umr.CtrlFields{Mask: umr.MaskPD})
	umr.MkeySeg(w[sq.CtrlSegSize+umr.CtrlSegSize:]).Encode(&umr.MkeyFields{PD: pd2.Handle(), Free: true, UMREnabled: true, Mode: klm.ModeMTT})
	require.NoError(t, a.qp.PostRawWQE(w[:n], 7), "post the UMR WQE")
	wc := wait(t, a, 1)[0]
	require.Equal(t, verbs.WCSuccess, wc.Status, "UMR: %s", hcatest.FormatWC(wc))
	require.Error(t, pd2.Dealloc(), "the PD the key moved to was deallocated while the key is in it")
	require.NoError(t, mr.Dereg(), "dereg the key")
	require.NoError(t, pd2.Dealloc(), "dealloc the PD once the key is gone")
}
