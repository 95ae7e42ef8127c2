package hca_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
)

// wireEnd is one host's device, context, buffer and QP.
type wireEnd struct {
	dev *hca.Device
	ctx *verbs.Context
	mr  *verbs.MR
	cq  *verbs.CQ
	qp  *verbs.QP
}

// wireHosts returns two connected QPs on two devices whose ports talk over
// loopback UDP; faults apply to the first host's port.
func wireHosts(t *testing.T, faults hca.Faults, co *verbs.ConnectOptions) (a, b *wireEnd) {
	t.Helper()
	x, y := byte(1+rand.IntN(254)), byte(rand.IntN(256))
	var ends [2]*wireEnd
	for i := range ends {
		dev := hca.New(hca.Options{TimeScale: 100})
		t.Cleanup(func() { dev.Close() })
		o := hca.WireOptions{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, x, y, byte(2 + i)}), 4791)}
		if i == 0 {
			o.Faults = faults
		}
		require.NoError(t, dev.ListenRoCE(o))
		ctx, err := verbs.Open(dev)
		require.NoError(t, err)
		t.Cleanup(func() { ctx.Close() })
		pd, err := ctx.AllocPD()
		require.NoError(t, err)
		buf, err := ctx.Alloc(1 << 16)
		require.NoError(t, err)
		mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		require.NoError(t, err)
		cq, err := ctx.CreateCQ(64, nil)
		require.NoError(t, err)
		qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		ends[i] = &wireEnd{dev: dev, ctx: ctx, mr: mr, cq: cq, qp: qp}
	}
	require.NoError(t, ends[0].qp.Connect(ends[1].qp.Info(), co))
	require.NoError(t, ends[1].qp.Connect(ends[0].qp.Info(), co))
	return ends[0], ends[1]
}

func (e *wireEnd) wait(t *testing.T) verbs.WC {
	t.Helper()
	wc := make([]verbs.WC, 1)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Microsecond) {
		if n, _ := e.cq.Poll(wc); n == 1 {
			return wc[0]
		}
	}
	t.Fatal("no completion in 10 s")
	return verbs.WC{}
}

// Past the retry count the QP errors as hardware does: a WRITE whose
// packets are all lost completes with RETRY_EXC_ERR after retry_cnt+1 ACK
// timeouts, the next WR is flushed, and the counters say why.
func TestWireRetryExceeded(t *testing.T) {
	a, b := wireHosts(t, hca.Faults{Loss: 1}, &verbs.ConnectOptions{Timeout: 10, RetryCnt: 3})
	_, err := a.qp.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, 8192)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey},
		{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey},
	})
	require.NoError(t, err)
	wc := a.wait(t)
	require.Equal(t, uint64(1), wc.WRID)
	require.Equal(t, verbs.WCRetryExcErr, wc.Status, "%+v", wc)
	wc = a.wait(t)
	require.Equal(t, uint64(2), wc.WRID)
	require.Equal(t, verbs.WCWRFlushErr, wc.Status)
	c := a.dev.Counters()
	require.Equal(t, uint64(4), c.Timeouts, "%+v", c)
	require.Equal(t, uint64(1), c.RetryExceeded, "%+v", c)
	require.Positive(t, c.InjectedLoss)
	require.Zero(t, c.TxPackets, "every packet was dropped")
	require.Zero(t, b.dev.Counters().RxPackets)
}

// Under loss, duplication and reordering a window of WRITEs and READs
// completes exactly once each, in order, with the right data.
func TestWireLossyWindow(t *testing.T) {
	a, b := wireHosts(t, hca.Faults{Loss: 0.05, Duplicate: 0.05, Reorder: 0.05, Seed: 3}, nil)
	buf := a.mr.Buf
	for round := range 10 {
		for i := range buf {
			buf[i] = byte(i*7 + round)
		}
		lossyWindow(t, a, b)
	}
	c := a.dev.Counters()
	require.Positive(t, c.InjectedLoss, "%+v", c)
	require.Positive(t, c.InjectedDup, "%+v", c)
	require.Positive(t, c.InjectedReorder, "%+v", c)
	require.Positive(t, c.Retransmits, "%+v", c)
	t.Logf("%+v", c)
}

func lossyWindow(t *testing.T, a, b *wireEnd) {
	buf := a.mr.Buf
	var wrs []verbs.SendWR
	for i := range 12 {
		off := i * 4096
		op := verbs.WRRDMAWrite
		if i%3 == 2 {
			op = verbs.WRRDMARead // reads back what the write before it wrote
			off -= 4096
		}
		wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: op, Flags: verbs.SendSignaled,
			SG: []verbs.SGE{a.mr.SGE(i*4096, 4096)}, RemoteAddr: b.mr.Addr + uint64(off), RKey: b.mr.RKey})
	}
	_, err := a.qp.PostSend(wrs)
	require.NoError(t, err)
	for i := range wrs {
		wc := a.wait(t)
		require.Equal(t, uint64(i), wc.WRID, "completions in order")
		require.Equal(t, verbs.WCSuccess, wc.Status, "%+v", wc)
	}
	for i := range 12 {
		if i%3 == 2 {
			require.Equal(t, buf[(i-1)*4096:i*4096], buf[i*4096:(i+1)*4096], fmt.Sprintf("READ %d", i))
		}
	}
}

// A WRITE from the wire goes to memory packet by packet, as a NIC places
// it, after its whole range was checked at the first packet: a WRITE that
// runs past the remote key's end is NAKed with nothing of it placed, one
// that fits lands whole, and the responder acknowledges both.
func TestWireWritePlacement(t *testing.T) {
	a, b := wireHosts(t, hca.Faults{}, nil)
	src, dst := a.mr.Buf, b.mr.Buf
	for i := range src {
		src[i] = byte(i*13 + 1)
	}
	clear(dst)
	const n = 16 << 10 // four packets at the default MTU
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr + uint64(len(dst)) - n + 4096, RKey: b.mr.RKey}})
	require.NoError(t, err)
	wc := a.wait(t)
	require.Equal(t, verbs.WCRemAccessErr, wc.Status, "%+v", wc)
	require.Equal(t, make([]byte, len(dst)), dst, "a WRITE past the key's end placed data")

	a, b = wireHosts(t, hca.Faults{}, nil)
	src, dst = a.mr.Buf, b.mr.Buf
	for i := range src {
		src[i] = byte(i*13 + 1)
	}
	clear(dst)
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(100, n)}, RemoteAddr: b.mr.Addr + 300, RKey: b.mr.RKey}})
	require.NoError(t, err)
	wc = a.wait(t)
	require.Equal(t, verbs.WCSuccess, wc.Status, "%+v", wc)
	require.Equal(t, src[100:100+n], dst[300:300+n])
	require.Equal(t, make([]byte, 300), dst[:300])
	require.Equal(t, make([]byte, len(dst)-300-n), dst[300+n:])
	require.GreaterOrEqual(t, b.dev.Counters().RxPackets, uint64(4))
}
