package verbs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
)

type side struct {
	ctx  *verbs.Context
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	buf  []byte
	mr   *verbs.MR
	mkey *verbs.Mkey
}

func newSide(t *testing.T, dev *hca.Device) *side {
	t.Helper()
	ctx, err := verbs.Open(dev)
	require.NoError(t, err, "open")
	t.Cleanup(func() { ctx.Close() })
	s := &side{ctx: ctx}
	s.pd, err = ctx.AllocPD()
	require.NoError(t, err, "alloc PD")
	s.cq, err = ctx.CreateCQ(256, nil)
	require.NoError(t, err, "create CQ")
	s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 64}})
	require.NoError(t, err, "create QP")
	s.buf = make([]byte, 1<<16)
	s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	require.NoError(t, err, "register MR")
	return s
}

func connect(t *testing.T, a, b *side) {
	t.Helper()
	require.NoError(t, a.qp.Connect(b.qp.Info(), nil), "connect a to b")
	require.NoError(t, b.qp.Connect(a.qp.Info(), nil), "connect b to a")
}

// connectAgain resets both QPs (after an error) and connects them again.
func connectAgain(t *testing.T, a, b *side) {
	t.Helper()
	for _, s := range []*side{a, b} {
		require.NoError(t, s.qp.Modify(&verbs.QPAttr{State: verbs.StateReset}), "reset QP %#x", s.qp.QPN())
	}
	connect(t, a, b)
}

// wait waits up to 5 s for n completions on s's CQ.
func wait(t *testing.T, s *side, n int) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, n)
	k, err := s.cq.PollWait(ctx, wcs, n)
	require.NoError(t, err, "completions so far: %+v", wcs[:k])
	return wcs[:k]
}

func TestWriteSendReadAtomic(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	a, b := newSide(t, dev), newSide(t, dev)
	connect(t, a, b)
	copy(a.buf, "hello, hcasim")
	// RDMA WRITE a → b.
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 13)}, RemoteAddr: b.mr.Addr + 100, RKey: b.mr.RKey}})
	require.NoError(t, err, "post write")
	hcatest.Check(t, "write completion", wait(t, a, 1)[0], hcatest.Want{WRID: 1, Op: verbs.WCRDMAWrite, Len: 13})
	require.Equal(t, a.buf[:13], b.buf[100:113], "b got")
	// SEND with immediate a → b.
	_, err = b.qp.PostRecv([]verbs.RecvWR{{WRID: 7, SG: []verbs.SGE{b.mr.SGE(1000, 64)}}})
	require.NoError(t, err, "post recv")
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSendWithImm, Imm: 0x1234, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 5)}}})
	require.NoError(t, err, "post send with imm")
	hcatest.Check(t, "send completion", wait(t, a, 1)[0], hcatest.Want{WRID: 2, Op: verbs.WCSend, Len: hcatest.AnyLen})
	hcatest.Check(t, "recv completion", wait(t, b, 1)[0], hcatest.Want{WRID: 7, Op: verbs.WCRecv, Len: 5, Imm: 0x1234, WithImm: true})
	require.Equal(t, "hello", string(b.buf[1000:1005]), "recv data")
	// RDMA READ b → a.
	copy(b.buf[2000:], "remote data")
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(3000, 11)}, RemoteAddr: b.mr.Addr + 2000, RKey: b.mr.RKey}})
	require.NoError(t, err, "post read")
	hcatest.Check(t, "read completion", wait(t, a, 1)[0], hcatest.Want{WRID: 3, Op: verbs.WCRDMARead, Len: 11})
	require.Equal(t, "remote data", string(a.buf[3000:3011]), "read data")
	// Fetch-and-add and compare-and-swap on b.
	b.buf[4007] = 5
	_, err = a.qp.PostSend([]verbs.SendWR{
		{WRID: 4, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(4000, 8)}, RemoteAddr: b.mr.Addr + 4000, RKey: b.mr.RKey, CompareAdd: 10},
		{WRID: 5, Opcode: verbs.WRAtomicCmpSwp, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(4008, 8)}, RemoteAddr: b.mr.Addr + 4000, RKey: b.mr.RKey, CompareAdd: 15, Swap: 99},
	})
	require.NoError(t, err, "post atomics")
	wcs := wait(t, a, 2)
	hcatest.Check(t, "fetch-and-add completion", wcs[0], hcatest.Want{WRID: 4, Op: verbs.WCFetchAdd, Len: 8})
	hcatest.Check(t, "compare-and-swap completion", wcs[1], hcatest.Want{WRID: 5, Op: verbs.WCCompSwap, Len: 8})
	require.Equal(t, byte(5), a.buf[4007], "atomic values: fetch-and-add fetched")
	require.Equal(t, byte(15), a.buf[4015], "atomic values: compare-and-swap fetched")
	require.Equal(t, byte(99), b.buf[4007], "atomic values: remote now")
}
