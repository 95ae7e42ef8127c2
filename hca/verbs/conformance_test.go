package verbs_test

import (
	"errors"
	"github.com/hcasim/hcasim/hca/ifc"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/umr"
)

// The WQE bytes follow current mlx5_ib_post_send (docs/CONFORMANCE.md).

// posted posts wrs on s and returns the WQEs the driver wrote for them.
func posted(t *testing.T, s *side, wrs ...verbs.SendWR) []verbs.PostedWQE {
	t.Helper()
	from := s.qp.CurPost()
	_, err := s.qp.PostSend(wrs)
	require.NoError(t, err)
	return s.qp.PostedWQEs(from)
}

func fences(ws []verbs.PostedWQE) []sq.Fence {
	var f []sq.Fence
	for _, w := range ws {
		f = append(f, w.Ctrl.Fence)
	}
	return f
}

// frwr allocates a fast-registration MR mapping n bytes of s's buffer.
func frwr(t *testing.T, s *side, n int) *verbs.MR {
	t.Helper()
	mr, err := s.pd.AllocMR(verbs.MRTypeMemReg, 8)
	require.NoError(t, err)
	_, err = mr.MapSG([]verbs.SGE{s.mr.SGE(0, n)})
	require.NoError(t, err)
	return mr
}

func conformancePair(t *testing.T, umrFence uint8) (*side, *side) {
	caps := hca.ConnectX5Caps
	caps.UMRFence = umrFence
	dev := hca.New(hca.Options{Caps: &caps})
	t.Cleanup(func() { dev.Close() })
	a, b := intSide(t, dev), intSide(t, dev)
	connect(t, a, b)
	return a, b
}

// A REG_MR arms INITIATOR_SMALL for every later WR of its post and the
// first WR of the next post; it takes the umr_fence cap's fence itself.
func TestNextFenceAfterRegistration(t *testing.T) {
	a, b := conformancePair(t, 0)
	write := func(id uint64, f verbs.SendFlags) verbs.SendWR {
		return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: f, SG: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}
	}
	mr := frwr(t, a, 4096)
	ws := posted(t, a, verbs.SendWR{WRID: 1, Opcode: verbs.WRRegMR, MR: mr, Key: mr.RKey, Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead},
		write(2, 0), write(3, verbs.SendFence), write(4, 0))
	assert.Equal(t, []sq.Fence{sq.FenceStrongOrdering, sq.FenceInitiatorSmall, sq.FenceSmallAndFence, sq.FenceInitiatorSmall}, fences(ws))
	ws = posted(t, a, write(5, 0), write(6, verbs.SendSignaled))
	assert.Equal(t, []sq.Fence{sq.FenceInitiatorSmall, sq.FenceNone}, fences(ws))
	wait(t, a, 1)

	// The same after a REG_MR_INTEGRITY (PA mode: the signature UMR and
	// two SET_PSVs).
	imr, err := a.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err)
	require.NoError(t, imr.MapSGPI([]verbs.SGE{a.mr.SGE(0, 4096)}, nil))
	require.NoError(t, imr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xFF, Wire: verbs.SigDomain{Type: verbs.SigTypeT10DIF, PIInterval: 512, ApptagCheckMask: 0xFFFF}}))
	imr.IncKey()
	ws = posted(t, a, verbs.SendWR{WRID: 7, Opcode: verbs.WRRegMRIntegrity, MR: imr, Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead},
		write(8, 0), write(9, 0))
	assert.Equal(t, []sq.Fence{sq.FenceStrongOrdering, sq.FenceInitiatorSmall, sq.FenceInitiatorSmall, sq.FenceInitiatorSmall, sq.FenceInitiatorSmall}, fences(ws))
	ws = posted(t, a, write(10, 0), write(11, verbs.SendSignaled))
	assert.Equal(t, []sq.Fence{sq.FenceInitiatorSmall, sq.FenceNone}, fences(ws))
	wc := wait(t, a, 1)[0]
	assert.Equal(t, verbs.WCSuccess, wc.Status, "%+v", wc)
}

// LOCAL_INV neither arms the next fence nor takes strong ordering with
// SendFence.
func TestLocalInvFence(t *testing.T) {
	a, b := conformancePair(t, 1)
	mr := frwr(t, a, 4096)
	ws := posted(t, a, verbs.SendWR{WRID: 1, Opcode: verbs.WRLocalInv, Flags: verbs.SendFence, InvalidateRKey: mr.RKey},
		verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
	assert.Equal(t, []sq.Fence{sq.FenceFence, sq.FenceNone}, fences(ws))
	wait(t, a, 1)
	// After a REG_MR in the same post, LOCAL_INV inherits the small fence.
	ws = posted(t, a, verbs.SendWR{WRID: 3, Opcode: verbs.WRRegMR, MR: mr, Key: mr.RKey, Access: verbs.AccessLocalWrite},
		verbs.SendWR{WRID: 4, Opcode: verbs.WRLocalInv, Flags: verbs.SendFence | verbs.SendSignaled, InvalidateRKey: mr.RKey})
	assert.Equal(t, []sq.Fence{sq.FenceInitiatorSmall, sq.FenceSmallAndFence}, fences(ws))
	wc := wait(t, a, 1)[0]
	assert.Equal(t, verbs.WCSuccess, wc.Status, "%+v", wc)
}

// REG_MR's UMR checks that the key is free (flags 0xA0 inline), so the
// device refuses to register a key that was not invalidated.
func TestRegMRChecksFree(t *testing.T) {
	a, _ := conformancePair(t, 1)
	mr := frwr(t, a, 4096)
	reg := verbs.SendWR{WRID: 1, Opcode: verbs.WRRegMR, Flags: verbs.SendSignaled, MR: mr, Key: mr.RKey, Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead}
	ws := posted(t, a, reg)
	require.Len(t, ws, 1)
	c := umr.CtrlSeg(ws[0].Bytes[sq.CtrlSegSize:]).Fields()
	assert.Equal(t, uint8(umr.FlagInline|umr.FlagCheckNotFree), c.Flags)
	assert.Equal(t, uint8(0xA0), ws[0].Bytes[sq.CtrlSegSize])
	assert.Equal(t, sq.FenceInitiatorSmall, ws[0].Ctrl.Fence, "umr_fence 1")
	require.Equal(t, verbs.WCSuccess, wait(t, a, 1)[0].Status)
	// Invalidated, the key registers again.
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRLocalInv, InvalidateRKey: mr.RKey}, reg})
	require.NoError(t, err)
	require.Equal(t, verbs.WCSuccess, wait(t, a, 1)[0].Status)
	// Not invalidated, it does not.
	_, err = a.qp.PostSend([]verbs.SendWR{reg})
	require.NoError(t, err)
	wc := wait(t, a, 1)[0]
	assert.Equal(t, verbs.WCLocProtErr, wc.Status, "%+v", wc)
}

// The internal PI-MR UMR has the access the registration asked for.
func TestPIMRAccess(t *testing.T) {
	a, _ := conformancePair(t, 1)
	for _, tc := range []struct {
		access verbs.Access
		flags  uint8
	}{
		{verbs.AccessRemoteRead, 0x96},
		{verbs.AccessLocalWrite | verbs.AccessRemoteRead, 0x9e},
		{verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite, 0xbe},
	} {
		imr, err := a.pd.AllocMRIntegrity(4, 4)
		require.NoError(t, err)
		// Two unaligned data entries: KLM mode, with a PI-MR UMR.
		require.NoError(t, imr.MapSGPI([]verbs.SGE{a.mr.SGE(0, 512), a.mr.SGE(1000, 512)}, nil))
		require.NoError(t, imr.SetSigAttrs(verbs.SigAttrs{CheckMask: 0xFF, Wire: verbs.SigDomain{Type: verbs.SigTypeT10DIF, PIInterval: 512, ApptagCheckMask: 0xFFFF}}))
		imr.IncKey()
		ws := posted(t, a, verbs.SendWR{WRID: 1, Opcode: verbs.WRRegMRIntegrity, Flags: verbs.SendSignaled, MR: imr, Access: tc.access})
		require.Len(t, ws, 4, "PI-MR UMR, signature UMR, two SET_PSVs")
		pi := ws[0]
		require.NotEqual(t, imr.RKey, pi.Ctrl.Imm, "the first UMR is the PI MR's")
		mk := pi.Bytes[sq.CtrlSegSize+umr.CtrlSegSize:]
		assert.Equal(t, tc.flags, mk[2], "access %#x", tc.access)
		assert.Equal(t, klm.ModeKLM, umr.MkeySeg(mk).Fields().Mode)
		assert.Zero(t, umr.CtrlSeg(pi.Bytes[sq.CtrlSegSize:]).Fields().Flags&(umr.FlagCheckFree|umr.FlagCheckNotFree), "no free check")
		for range 2 {
			wc := wait(t, a, 1)[0]
			require.Equal(t, verbs.WCSuccess, wc.Status, "%+v", wc)
		}
		_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: imr.RKey}})
		require.NoError(t, err)
		require.Equal(t, verbs.WCSuccess, wait(t, a, 1)[0].Status)
		_, err = imr.CheckMRStatus()
		require.NoError(t, err)
	}
}

// SGEs of length 0 get no data segment; SendInline without SGEs writes no
// inline segment.
func TestZeroLengthSGEs(t *testing.T) {
	a, b := conformancePair(t, 1)
	copy(a.buf, "abcdefgh")
	ws := posted(t, a, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(100, 0), a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
	require.Len(t, ws, 1)
	assert.Equal(t, uint8(3), ws[0].Ctrl.DS, "ctrl, raddr, one data segment")
	d := sq.DataSeg(ws[0].Bytes[sq.CtrlSegSize+sq.RaddrSegSize:]).Fields()
	assert.Equal(t, uint32(8), d.ByteCount)
	wc := wait(t, a, 1)[0]
	require.Equal(t, verbs.WCSuccess, wc.Status)
	assert.Equal(t, "abcdefgh", string(b.buf[:8]))

	ws = posted(t, a, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey})
	require.Len(t, ws, 1)
	assert.Equal(t, uint8(2), ws[0].Ctrl.DS, "ctrl and raddr only")
	require.Equal(t, verbs.WCSuccess, wait(t, a, 1)[0].Status)
}

// A full mkey table is EXCEED_LIM, like the other object limits.
func TestMkeyTableFull(t *testing.T) {
	caps := hca.ConnectX5Caps
	caps.Mkey.MaxMkeys = klm.FirstIndex + 8
	dev := hca.New(hca.Options{Caps: &caps})
	defer dev.Close()
	ctx, err := verbs.Open(dev)
	require.NoError(t, err)
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	for range 100 {
		if _, err = pd.AllocMR(verbs.MRTypeMemReg, 4); err != nil {
			break
		}
	}
	var ce *ifc.CmdError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, ifc.StatusExceedLim, ce.Status)
}

// A guard error's CQE carries the whole T10 transient signature: the app
// tag half is the block's (and the configured) app tag, not 0.
func TestSigErrCQEAppTagHalf(t *testing.T) {
	host, target := conformancePair(t, 1)
	const iv, blocks = 512, 4
	for i := range host.buf[:iv*blocks] {
		host.buf[i] = byte(i * 3)
	}
	mr, err := host.pd.AllocMRIntegrity(4, 4)
	require.NoError(t, err)
	register := func() {
		require.NoError(t, mr.MapSGPI([]verbs.SGE{host.mr.SGE(0, iv*blocks)}, nil))
		require.NoError(t, mr.SetSigAttrs(verbs.SigAttrs{CheckMask: verbs.SigCheckGuard, Wire: verbs.SigDomain{Type: verbs.SigTypeT10DIF, PIInterval: iv, AppTag: 0x42, ApptagCheckMask: 0xFFFF}}))
		mr.IncKey()
		_, err := host.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMRIntegrity, Flags: verbs.SendSignaled, MR: mr,
			Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite}})
		require.NoError(t, err)
		require.Equal(t, verbs.WCSuccess, wait(t, host, 1)[0].Status)
	}
	register()
	wlen := blocks * (iv + 8)
	_, err = target.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SG: []verbs.SGE{target.mr.SGE(0, wlen)}, RKey: mr.RKey}})
	require.NoError(t, err)
	require.Equal(t, verbs.WCSuccess, wait(t, target, 1)[0].Status)
	tuple := target.buf[2*(iv+8)+iv:]
	require.Equal(t, []byte{0x00, 0x42}, tuple[2:4], "the inserted app tag")
	stored := uint32(tuple[0])<<8 | uint32(tuple[1])
	_, err = host.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRLocalInv, InvalidateRKey: mr.RKey}})
	require.NoError(t, err)
	_, err = mr.CheckMRStatus()
	require.NoError(t, err)
	register()
	target.buf[2*(iv+8)+7] ^= 1 // block 2's data: a guard error
	_, err = target.qp.PostSend([]verbs.SendWR{{WRID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{target.mr.SGE(0, wlen)}, RKey: mr.RKey}})
	require.NoError(t, err)
	require.Equal(t, verbs.WCSuccess, wait(t, target, 1)[0].Status)
	var s cq.SigFields
	require.Eventually(t, func() bool { var ok bool; s, ok = verbs.PeekSigErr(host.cq); return ok }, 5*time.Second, time.Millisecond)
	assert.Equal(t, uint16(cq.SigErrGuard), s.Syndrome)
	// The mlx5dv_mkey_check man page's words: expected is what the
	// signature field holds, actual what was calculated (or configured).
	assert.Equal(t, uint32(0x42), s.ActualTransSig&0xFFFF, "configured app tag")
	assert.Equal(t, uint32(0x42), s.ExpectedTransSig&0xFFFF, "the block's app tag")
	assert.Equal(t, stored, s.ExpectedTransSig>>16, "the block's guard")
	assert.NotEqual(t, stored, s.ActualTransSig>>16, "the guard calculated from the changed data")
	var wcs [2]verbs.WC
	_, err = host.cq.Poll(wcs[:])
	require.NoError(t, err)
	e, err := mr.CheckMRStatus()
	require.NoError(t, err)
	require.NotNil(t, e)
	assert.Equal(t, verbs.SigErr{Type: verbs.SigBadGuard, Expected: stored, Actual: s.ActualTransSig >> 16, Offset: 2 * (iv + 8), Key: mr.RKey}, *e)
}
