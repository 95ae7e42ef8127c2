package umr

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/klm"
)

// bindWQE builds the UMR segments rdma-core's mlx5 provider posts for a
// memory window bind (set_bind_wr): type 1 or 2, a window of length bytes
// at addr of the MR mrKey granting access, with the new variant; length 0
// unbinds (type 2: the invalidation form rdma-core uses for LOCAL_INV).
func bindWQE(typ int, variant uint8, qpn uint32, mrKey klm.Key, addr, length uint64, access klm.Access) []byte {
	c := CtrlFields{Flags: FlagXLTOffset | FlagInline, Mask: MaskFree | MaskKey}
	if typ == 2 {
		c.Mask |= MaskQPN
	}
	m := MkeyFields{QPN: klm.NoQPN, Variant: variant}
	if typ == 2 && length > 0 {
		m.QPN = qpn
	}
	var xlt []byte
	if length > 0 {
		if typ == 2 {
			c.Flags |= FlagCheckNotFree // rdma-core's MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE, 0x20
		}
		c.Mask |= MaskLen | MaskStartAddr | MaskLW | MaskRR | MaskRW | MaskA
		m.Access, m.StartAddr, m.Len = access, addr, length
		xlt = klmList(klm.KLMFields{ByteCount: uint32(length), Key: mrKey, VA: addr})
	} else {
		m.Free = true
		if typ == 2 {
			c.Flags |= FlagCheckQPN
		}
	}
	return wqe(c, m, xlt, nil)
}

// createWindow makes a key the way the kernel's mlx5_ib_alloc_mw does:
// free, umr_en, KLM, local read, four octowords, bound to no QP, remote
// invalidation for type 2.
func createWindow(t *testing.T, e *env, typ int, pd uint32) klm.Key {
	t.Helper()
	k, err := e.tab.Create(klm.Mkey{Free: true, UMREnabled: true, Mode: klm.ModeKLM, PD: pd, Access: klm.LocalRead,
		XLTOctowords: 4, Variant: 0x40, QPN: klm.NoQPN, RemoteInvalidate: typ == 2})
	require.NoError(t, err)
	return k
}

func applyAs(t *testing.T, e *env, b []byte, target klm.Key, poster uint32) error {
	t.Helper()
	op := mustDecode(t, b, target)
	op.Poster = poster
	return Apply(e.tab, op)
}

// A type 2 window: bound to the QP that binds it, reachable only through
// that QP, not rebindable while bound, invalidated only by that QP.
func TestWindowType2(t *testing.T) {
	e := newEnv(t)
	const pd, qp, other = 3, 0x42, 0x43
	mr, err := e.tab.Create(klm.Mkey{PD: pd, Access: klm.LocalRead | klm.LocalWrite, Mode: klm.ModePA, StartAddr: 0, Len: 1 << 20, QPN: klm.NoQPN})
	require.NoError(t, err)
	w := createWindow(t, e, 2, pd)
	rw := klm.LocalWrite | klm.RemoteWrite | klm.RemoteRead
	bind := bindWQE(2, 0x41, qp, mr, 0x10100, 64, rw)
	require.NoError(t, applyAs(t, e, bind, w, qp), "bind")
	rkey := klm.MakeKey(w.Index(), 0x41)
	m := e.tab.Lookup(w.Index())
	require.EqualValues(t, qp, m.QPN, "bound to the binding QP")
	require.False(t, m.Free, "bound")

	segs, err := e.tab.Resolve(nil, klm.Request{Key: rkey, PD: pd, Addr: 0x10100, Len: 64, Access: klm.RemoteWrite, QPN: qp})
	require.NoError(t, err, "remote write through the window on its QP")
	require.Len(t, segs, 1)
	_, err = e.tab.Resolve(nil, klm.Request{Key: rkey, PD: pd, Addr: 0x10100, Len: 64, Access: klm.RemoteWrite, QPN: other})
	requireFault(t, err, klm.FaultQP, "the same window from another QP")
	_, err = e.tab.Resolve(nil, klm.Request{Key: rkey, PD: pd, Addr: 0x10100, Len: 65, Access: klm.RemoteRead, QPN: qp})
	requireFault(t, err, klm.FaultRange, "past the window")
	_, err = e.tab.Resolve(nil, klm.Request{Key: rkey, PD: pd, Addr: 0x10100, Len: 8, Access: klm.Atomic, QPN: qp})
	requireFault(t, err, klm.FaultAccess, "a right the bind did not grant")

	require.ErrorIs(t, applyAs(t, e, bindWQE(2, 0x42, qp, mr, 0x10100, 64, rw), w, qp), ErrNotFree, "rebind while bound")
	require.ErrorIs(t, applyAs(t, e, bindWQE(2, 0, qp, mr, 0, 0, 0), w, other), ErrQPN, "invalidate from another QP")
	require.NoError(t, applyAs(t, e, bindWQE(2, 0, qp, mr, 0, 0, 0), w, qp), "invalidate from the bound QP")
	_, err = e.tab.Resolve(nil, klm.Request{Key: rkey, PD: pd, Addr: 0x10100, Len: 64, Access: klm.RemoteWrite, QPN: qp})
	requireFault(t, err, klm.FaultFree, "after invalidation")
	require.EqualValues(t, klm.NoQPN, e.tab.Lookup(w.Index()).QPN, "unbound from the QP")
	require.NoError(t, applyAs(t, e, bind, w, other), "bind again, on another QP")
}

// A type 1 window: bound to no QP, rebound freely, unbound by a
// zero-length bind.
func TestWindowType1(t *testing.T) {
	e := newEnv(t)
	const pd = 3
	mr, err := e.tab.Create(klm.Mkey{PD: pd, Access: klm.LocalRead | klm.LocalWrite, Mode: klm.ModePA, StartAddr: 0, Len: 1 << 20, QPN: klm.NoQPN})
	require.NoError(t, err)
	w := createWindow(t, e, 1, pd)
	require.NoError(t, applyAs(t, e, bindWQE(1, 0x41, 7, mr, 0x10000, 32, klm.LocalWrite|klm.RemoteWrite), w, 7))
	for _, qpn := range []uint32{7, 8} {
		_, err = e.tab.Resolve(nil, klm.Request{Key: klm.MakeKey(w.Index(), 0x41), PD: pd, Addr: 0x10000, Len: 32, Access: klm.RemoteWrite, QPN: qpn})
		require.NoError(t, err, "any QP of the PD, qp %#x", qpn)
	}
	require.NoError(t, applyAs(t, e, bindWQE(1, 0x42, 7, mr, 0x10020, 16, klm.LocalWrite|klm.RemoteWrite), w, 7), "rebind")
	_, err = e.tab.Resolve(nil, klm.Request{Key: klm.MakeKey(w.Index(), 0x41), PD: pd, Addr: 0x10020, Len: 16, Access: klm.RemoteWrite})
	requireFault(t, err, klm.FaultVariant, "the rkey before the rebind")
	require.NoError(t, applyAs(t, e, bindWQE(1, 0x43, 7, mr, 0, 0, 0), w, 7), "zero-length bind")
	_, err = e.tab.Resolve(nil, klm.Request{Key: klm.MakeKey(w.Index(), 0x43), PD: pd, Addr: 0x10020, Len: 16, Access: klm.RemoteWrite})
	requireFault(t, err, klm.FaultFree, "after the zero-length bind")
}
