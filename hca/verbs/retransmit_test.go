package verbs_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
)

// A READ that times out is retransmitted and served twice; the second
// service must not write the requester's memory once the READ completed
// (on the wire its response is a duplicate the requester drops). The
// first response is held on the wire past the ACK timeout.
func TestDuplicateReadAfterCompletion(t *testing.T) {
	fab := hca.NewFabric()
	dev := hca.New(hca.Options{Fabric: fab})
	defer dev.Close()
	a, b := newSide(t, dev), newSide(t, dev)
	require.NoError(t, a.qp.Connect(b.qp.Info(), &verbs.ConnectOptions{Timeout: 12}), "connect a to b") // 16.8 ms
	require.NoError(t, b.qp.Connect(a.qp.Info(), nil), "connect b to a")
	var held atomic.Bool
	fab.SetWireHook(func(m *hca.WireMsg) {
		if m.ReqQPN == a.qp.QPN() && !held.Swap(true) {
			time.Sleep(40 * time.Millisecond)
		}
	})
	defer fab.SetWireHook(nil)
	const n = 4096
	for i := range b.buf[:n] {
		b.buf[i] = byte(i)
	}
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}})
	require.NoError(t, err, "post read")
	hcatest.Check(t, "read", wait(t, a, 1)[0], hcatest.Want{WRID: 1, Op: verbs.WCRDMARead, Len: n})
	for i := range a.buf[:n] {
		require.Equal(t, byte(i), a.buf[i], "byte %d after the READ", i)
		a.buf[i] = 0xEE // the application reuses its buffer
	}
	time.Sleep(60 * time.Millisecond)
	for i, c := range a.buf[:n] {
		require.Equal(t, byte(0xEE), c, "byte %d rewritten after the READ completed", i)
	}
}

// Requests are recycled once their requester retired them and no copy is
// in flight: under retransmissions (messages held on the wire past the
// ACK timeout, so requests are served twice and answers come late) every
// WRITE lands its own data at its own address and every READ returns the
// right bytes into its own buffer.
func TestRequestsRecycledUnderRetransmission(t *testing.T) {
	fab := hca.NewFabric()
	dev := hca.New(hca.Options{Fabric: fab})
	defer dev.Close()
	a, b := newSide(t, dev), newSide(t, dev)
	require.NoError(t, a.qp.Connect(b.qp.Info(), &verbs.ConnectOptions{Timeout: 10}), "connect a to b") // 4.2 ms
	require.NoError(t, b.qp.Connect(a.qp.Info(), nil), "connect b to a")
	var n atomic.Int64
	fab.SetWireHook(func(m *hca.WireMsg) {
		if n.Add(1)%37 == 0 {
			time.Sleep(6 * time.Millisecond)
		}
	})
	defer fab.SetWireHook(nil)
	const chunk, chunks = 256, 64 // a.buf: [0,16K) WRITE sources, [16K,32K) READ targets
	for i := range b.buf[32<<10:] {
		b.buf[32<<10+i] = byte(i*7 + 3) // what READs fetch
	}
	for round := range 6 {
		for i := range chunks * chunk {
			a.buf[i] = byte(i + round)
			a.buf[16<<10+i] = 0
		}
		var wrs []verbs.SendWR
		for c := range chunks {
			off := c * chunk
			wrs = append(wrs, verbs.SendWR{WRID: uint64(2 * c), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SG: []verbs.SGE{a.mr.SGE(off, chunk)}, RemoteAddr: b.mr.Addr + uint64(off), RKey: b.mr.RKey},
				verbs.SendWR{WRID: uint64(2*c + 1), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
					SG: []verbs.SGE{a.mr.SGE(16<<10+off, chunk)}, RemoteAddr: b.mr.Addr + 32<<10 + uint64(off), RKey: b.mr.RKey})
		}
		for len(wrs) > 0 {
			k := min(len(wrs), 32)
			_, err := a.qp.PostSend(wrs[:k])
			require.NoError(t, err, "round %d: post %d WRs", round, k)
			for _, wc := range wait(t, a, k) {
				require.Equal(t, verbs.WCSuccess, wc.Status, "round %d: WR %d", round, wc.WRID)
			}
			wrs = wrs[k:]
		}
		for i := range chunks * chunk {
			require.Equal(t, byte(i+round), b.buf[i], "round %d: WRITE byte %d", round, i)
			require.Equal(t, byte(i*7+3), a.buf[16<<10+i], "round %d: READ byte %d", round, i)
		}
	}
	require.GreaterOrEqual(t, n.Load(), int64(37), "only %d wire messages: no retransmission was provoked", n.Load())
}

// A long message whose move outlasts the ACK timeout many times over is
// not timed out while it is being moved (on a wire its packets would be
// acknowledged as they arrive); a short one held as long is retried.
func TestLongMessageNotTimedOutInService(t *testing.T) {
	fab := hca.NewFabric()
	dev := hca.New(hca.Options{Fabric: fab})
	defer dev.Close()
	a, b := newSide(t, dev), newSide(t, dev)
	// 4.1 µs × 2^8 = 1 ms, one retry: 2 ms without an answer fails.
	require.NoError(t, a.qp.Connect(b.qp.Info(), &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}), "connect a to b")
	require.NoError(t, b.qp.Connect(a.qp.Info(), nil), "connect b to a")
	var slow atomic.Bool
	fab.SetWireHook(func(m *hca.WireMsg) {
		if slow.Load() {
			time.Sleep(20 * time.Millisecond)
		}
	})
	defer fab.SetWireHook(nil)
	slow.Store(true)
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 64<<10)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}})
	require.NoError(t, err, "post a 64 KiB WRITE")
	wc := wait(t, a, 1)[0]
	require.Equal(t, verbs.WCSuccess, wc.Status, "a 64 KiB WRITE moved in 20 ms with a 1 ms ACK timeout: %s", hcatest.FormatWC(wc))
	_, err = a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}})
	require.NoError(t, err, "post a 4 KiB WRITE")
	hcatest.CheckErr(t, "a 4 KiB WRITE held 20 ms per try with a 1 ms ACK timeout, want RETRY_EXC", wait(t, a, 1)[0], 2, verbs.WCRetryExcErr, 0)
}
