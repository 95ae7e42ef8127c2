package cm_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/cm"
	"github.com/hcasim/hcasim/hca/verbs"
)

type end struct {
	cq *verbs.CQ
	qp *verbs.QP
	mr *verbs.MR
}

func newEnd(t *testing.T, dev *hca.Device) *end {
	t.Helper()
	ctx, err := verbs.Open(dev)
	require.NoError(t, err)
	t.Cleanup(func() { ctx.Close() })
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	cq, err := ctx.CreateCQ(16, nil)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	buf, err := ctx.Alloc(4096)
	require.NoError(t, err)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	return &end{cq: cq, qp: qp, mr: mr}
}

// write has a WRITE a to b and checks it landed.
func write(t *testing.T, a, b *end) {
	t.Helper()
	copy(a.mr.Buf, "connected")
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 9)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	_, err = a.cq.PollWait(ctx, wc, 1)
	require.NoError(t, err)
	require.Equal(t, verbs.WCSuccess, wc[0].Status, "%+v", wc[0])
	require.Equal(t, "connected", string(b.mr.Buf[:9]))
}

// Accept and Dial over loopback TCP connect two QPs, each learning the
// other's information.
func TestAcceptDial(t *testing.T) {
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	a, b := newEnd(t, dev), newEnd(t, dev)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var fromA, fromB verbs.QPInfo
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { fromB, err = cm.Accept(gctx, l, a.qp, nil); return })
	g.Go(func() (err error) { fromA, err = cm.Dial(gctx, "tcp", l.Addr().String(), b.qp, nil); return })
	require.NoError(t, g.Wait())
	require.Equal(t, b.qp.Info(), fromB)
	require.Equal(t, a.qp.Info(), fromA)
	require.Equal(t, verbs.StateRTS, a.qp.State())
	write(t, a, b)
	write(t, b, a)
}

func TestPair(t *testing.T) {
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	a, b := newEnd(t, dev), newEnd(t, dev)
	require.NoError(t, cm.Pair(a.qp, b.qp, nil))
	write(t, a, b)
	require.Error(t, cm.Pair(a.qp, b.qp, nil), "connecting a connected QP again")
}

// A peer that is no exchange, or goes away, is an error, never a hang:
// Connect returns when the stream ends, Dial when its context does.
func TestBadPeer(t *testing.T) {
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	a := newEnd(t, dev)
	x, y := net.Pipe()
	go func() {
		buf := make([]byte, 64)
		y.Read(buf)
		y.Write([]byte("GET / HTTP/1.1\r\nHost: example.org\r\n\r\n"))
		y.Close()
	}()
	_, err := cm.Connect(x, a.qp, nil)
	require.ErrorIs(t, err, cm.ErrProtocol)

	x, y = net.Pipe()
	go func() { y.Read(make([]byte, 64)); y.Close() }()
	_, err = cm.Connect(x, a.qp, nil)
	require.Error(t, err)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		c, err := l.Accept()
		if err == nil {
			defer c.Close()
			<-done // says nothing
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = cm.Dial(ctx, "tcp", l.Addr().String(), a.qp, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestInfoEncoding(t *testing.T) {
	in := verbs.QPInfo{LID: 0x1234, QPN: 0xABCDEF, PSN: 0x123456}
	in.GID[15] = 9
	b := cm.AppendInfo(nil, in)
	require.Len(t, b, 30)
	out, err := cm.ParseInfo(b)
	require.NoError(t, err)
	require.Equal(t, in, out)
	_, err = cm.ParseInfo(b[:29])
	require.ErrorIs(t, err, cm.ErrProtocol)
	b[0] = 'X'
	_, err = cm.ParseInfo(b)
	require.ErrorIs(t, err, cm.ErrProtocol)
}

// FuzzParseInfo: any bytes decode to an error or to information that
// encodes back to the same bytes (QPN and PSN masked to 24 bits).
func FuzzParseInfo(f *testing.F) {
	f.Add(cm.AppendInfo(nil, verbs.QPInfo{LID: 2, QPN: 0x100, PSN: 7}))
	f.Add([]byte("HCM1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := cm.ParseInfo(b)
		if err != nil {
			require.ErrorIs(t, err, cm.ErrProtocol)
			return
		}
		again, err := cm.ParseInfo(cm.AppendInfo(nil, info))
		require.NoError(t, err)
		require.Equal(t, info, again)
		require.LessOrEqual(t, info.QPN, uint32(0xFFFFFF))
	})
}
