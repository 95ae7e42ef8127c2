package rw_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/rw"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
)

// node is one side: a context, PD, CQ, QP and a registered buffer.
type node struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

func newNode(t *testing.T, dev *hca.Device, integrity bool) *node {
	t.Helper()
	ctx, err := verbs.Open(dev)
	require.NoError(t, err)
	t.Cleanup(func() { ctx.Close() })
	n := &node{ctx: ctx}
	n.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	n.cq, err = ctx.CreateCQ(64, nil)
	require.NoError(t, err)
	n.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: n.cq, RecvCQ: n.cq, Integrity: integrity,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	buf, err := ctx.Alloc(1 << 16)
	require.NoError(t, err)
	n.mr, err = n.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	return n
}

// wait polls n's CQ for one work completion.
func (n *node) wait(t *testing.T) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	_, err := n.cq.PollWait(ctx, wc, 1)
	require.NoError(t, err)
	return wc[0]
}

const interval, blocks = 512, 8

// dif is the wire domain of the transfers: Type 1 T10-DIF, CRC guard, ref
// tag 0x200 incremented per block; guard and ref tag checked.
var dif = verbs.SigAttrs{
	CheckMask: verbs.SigCheckGuard | verbs.SigCheckRefTag,
	Wire: verbs.SigDomain{Type: verbs.SigTypeT10DIF, BgType: verbs.BgCRC, PIInterval: interval,
		RefTag: 0x200, RefRemap: true},
}

// A target's round trip through one context: a Write inserts PI on the
// wire, a Read of the same blocks checks and strips it, a corrupted block
// read back is reported by Status after the poll, and every chain after
// the first invalidates the MR before registering it again.
func TestSigCtx(t *testing.T) {
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	target, host := newNode(t, dev, true), newNode(t, dev, false)
	require.NoError(t, target.qp.Connect(host.qp.Info(), nil))
	require.NoError(t, host.qp.Connect(target.qp.Info(), nil))

	c, err := rw.NewSigCtx(target.pd, target.qp, 4)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	require.ErrorIs(t, c.Post(1), rw.ErrNotInitialized)

	const n = interval * blocks
	const wireLen = blocks * (interval + 8)
	data := target.mr.Buf[:n]
	for i := range data {
		data[i] = byte(i*7 + 3)
	}

	// Write: the host's buffer receives the data with PI inserted.
	require.NoError(t, c.Init(rw.Write, []verbs.SGE{target.mr.SGE(0, n)}, nil, dif, host.mr.Addr, host.mr.RKey))
	ops := func() []verbs.WROpcode {
		var o []verbs.WROpcode
		for _, w := range c.WRs() {
			o = append(o, w.Opcode)
		}
		return o
	}
	require.Equal(t, []verbs.WROpcode{verbs.WRRegMRIntegrity, verbs.WRRDMAWrite}, ops())
	require.Equal(t, uint32(wireLen), c.WRs()[1].SG[0].Length, "the RDMA carries the wire length")
	require.NoError(t, c.Post(10))
	wc := target.wait(t)
	require.Equal(t, verbs.WCSuccess, wc.Status, "%+v", wc)
	require.Equal(t, uint64(10), wc.WRID)
	e, err := c.Status()
	require.NoError(t, err)
	require.Nil(t, e)
	wire := host.mr.Buf[:wireLen]
	d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: interval, RefTag: 0x200}
	require.NoError(t, t10dif.Verify(d, t10dif.CheckAll, t10dif.Buf{Data: wire}))

	// Read it back into another place: checked, stripped.
	back := target.mr.Buf[n : 2*n]
	require.NoError(t, c.Init(rw.Read, []verbs.SGE{target.mr.SGE(n, n)}, nil, dif, host.mr.Addr, host.mr.RKey))
	require.Equal(t, []verbs.WROpcode{verbs.WRLocalInv, verbs.WRRegMRIntegrity, verbs.WRRDMARead}, ops(),
		"a registered MR is invalidated before it is registered again")
	require.NoError(t, c.Post(11))
	wc = target.wait(t)
	require.Equal(t, verbs.WCSuccess, wc.Status, "%+v", wc)
	require.Equal(t, uint64(11), wc.WRID)
	e, err = c.Status()
	require.NoError(t, err)
	require.Nil(t, e)
	require.Equal(t, data, back)

	// The peer's block 5 goes bad: the Read completes, and after the poll
	// Status names the block.
	wire[5*(interval+8)+17] ^= 0x40
	clear(back)
	require.NoError(t, c.Init(rw.Read, []verbs.SGE{target.mr.SGE(n, n)}, nil, dif, host.mr.Addr, host.mr.RKey))
	require.NoError(t, c.Post(12))
	wc = target.wait(t)
	require.Equal(t, verbs.WCSuccess, wc.Status, "a PI error is no error completion: %+v", wc)
	require.Equal(t, uint64(12), wc.WRID)
	e, err = c.Status()
	require.NoError(t, err)
	require.NotNil(t, e, "a corrupted block read with checks")
	require.Equal(t, verbs.SigBadGuard, e.Type)
	require.Equal(t, uint64(5), e.Offset/(interval+8))
}

func TestSigCtxBadInput(t *testing.T) {
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	a := newNode(t, dev, true)
	_, err := rw.NewSigCtx(a.pd, nil, 1)
	require.ErrorIs(t, err, verbs.ErrInvalid)
	c, err := rw.NewSigCtx(a.pd, a.qp, 1)
	require.NoError(t, err)
	defer c.Close()
	require.ErrorIs(t, c.Init(rw.Dir(9), []verbs.SGE{a.mr.SGE(0, 512)}, nil, dif, 0, 0), verbs.ErrInvalid)
	require.Error(t, c.Init(rw.Write, []verbs.SGE{a.mr.SGE(0, 512)}, nil, verbs.SigAttrs{}, 0, 0), "no PI in either domain")
	require.ErrorIs(t, c.Post(1), rw.ErrNotInitialized, "a failed Init leaves nothing to post")
	require.Equal(t, "read", rw.Read.String())
}
