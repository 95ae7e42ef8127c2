package remote_test

import (
	"github.com/hcasim/hcasim/hca/ifc"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/psv"
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/umr"
)

// TestSignatureKeyPSVDestroyed: a signature key whose wire PSV the client
// destroys while the key is still registered fails its next access with
// a local protection error, instead of running on a seed nobody set;
// with the PSV in place the same access works.
func TestSignatureKeyPSVDestroyed(t *testing.T) {
	p := newCrossPair(t)
	b := p.b
	eb := loopback(t, b, true)
	mr, wqe := sigUMR(t, b, eb)
	own := psv.BSF(wqe[sq.CtrlSegSize+umr.CtrlSegSize+umr.MkeySegSize+64:]).Fields().WirePSV
	// A PSV of the key's PD that the test may destroy, named in the BSF.
	spare := createPSVs(t, b.ctx, b.pd.Handle(), 1)[0]
	require.NotEqual(t, own, spare)
	eb = loopback(t, b, true)
	repostUMR(t, eb, wqe, spare, 1)
	require.Equal(t, verbs.WCSuccess, hcatest.Poll1(t, eb.scq).Status, "signature UMR naming the spare PSV")

	// A WRITE through the key (its source: 512 data bytes, 520 on the wire).
	e := loopback(t, b, false)
	post(t, e, write(2, verbs.SGE{Addr: 0, Length: 520, LKey: mr.LKey}, b.mr.Addr+8192, b.mr.RKey))
	require.Equal(t, verbs.WCSuccess, hcatest.Poll1(t, e.scq).Status, "WRITE through the key with its PSV")

	out := command(b.ctx, ifc.NewIn(ifc.CmdDestroyPSV, ifc.PSVIdxOff+4).Put32(ifc.PSVIdxOff, spare))
	require.Equal(t, ifc.StatusOK, out.Status(), "DESTROY_PSV: %v", out.Err(ifc.CmdDestroyPSV))
	e = loopback(t, b, false)
	post(t, e, write(3, verbs.SGE{Addr: 0, Length: 520, LKey: mr.LKey}, b.mr.Addr+8192, b.mr.RKey))
	assert.Equal(t, verbs.WCLocProtErr, hcatest.Poll1(t, e.scq).Status, "WRITE through the key after its PSV was destroyed")
}
