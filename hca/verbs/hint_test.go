package verbs_test

import (
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
)

// ringCounter counts the send doorbells a driver rings.
type ringCounter struct {
	ifc.Function
	rings atomic.Int64
}

func (r *ringCounter) RingSQ(qpn uint32) {
	r.rings.Add(1)
	r.Function.RingSQ(qpn)
}

// hintPair is a connected pair whose first side counts its doorbells.
func hintPair(t *testing.T, dev *hca.Device) (*side, *side, *ringCounter) {
	t.Helper()
	fn, err := dev.Open()
	require.NoError(t, err, "open function")
	rc := &ringCounter{Function: fn}
	ctx, err := verbs.New(rc)
	require.NoError(t, err, "new context on the counting function")
	t.Cleanup(func() { ctx.Close() })
	a := &side{ctx: ctx}
	a.pd, err = ctx.AllocPD()
	require.NoError(t, err, "alloc PD")
	a.cq, err = ctx.CreateCQ(64, nil)
	require.NoError(t, err, "create CQ")
	a.qp, err = a.pd.CreateQP(&verbs.QPInitAttr{SendCQ: a.cq, RecvCQ: a.cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err, "create QP")
	a.buf, err = ctx.Alloc(4096)
	require.NoError(t, err, "alloc buffer")
	a.mr, err = a.pd.RegMR(a.buf, verbs.AccessLocalWrite)
	require.NoError(t, err, "register MR")
	b := newSide(t, dev)
	connect(t, a, b)
	return a, b, rc
}

func writeOnce(t *testing.T, a, b *side, i int) {
	t.Helper()
	a.buf[0] = byte(i)
	_, err := a.qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}})
	require.NoError(t, err, "post write %d", i)
	hcatest.Check(t, fmt.Sprintf("write %d", i), wait(t, a, 1)[0], hcatest.Want{WRID: uint64(i), Op: verbs.WCRDMAWrite, Len: 64})
	require.Equal(t, byte(i), b.buf[0], "write %d: the responder's memory", i)
}

// TestDoorbellHintPolling: while the send engine polls (Options.Poll) it
// keeps the activity hint set and the driver does not ring: a sleeping
// engine needs the first doorbell (none if a state change woke it), none
// of the next posts do.
func TestDoorbellHintPolling(t *testing.T) {
	dev := hca.New(hca.Options{Poll: time.Minute})
	defer dev.Close()
	a, b, rc := hintPair(t, dev)
	for i := range 200 {
		writeOnce(t, a, b, i)
	}
	n := rc.rings.Load()
	require.LessOrEqual(t, n, int64(1), "%d send doorbells for 200 posts to a polling engine, want at most 1", n)
}

// TestDoorbellHintNoLostWakeup: posts timed at random against an engine
// going to sleep (no polling, or a short poll) all complete: a driver that
// skips the doorbell because the hint is set is always seen by the
// engine's last look. Doorbells are never more than posts; there may be
// none at all, when the state change to RTS woke the engine and every post
// found it still polling (seen under -race with a 2µs poll).
func TestDoorbellHintNoLostWakeup(t *testing.T) {
	for _, poll := range []time.Duration{0, 2 * time.Microsecond} {
		dev := hca.New(hca.Options{Poll: poll})
		a, b, rc := hintPair(t, dev)
		const n = 500
		for i := range n {
			if rand.IntN(4) == 0 {
				time.Sleep(time.Duration(rand.IntN(5)) * time.Microsecond)
			}
			writeOnce(t, a, b, i)
		}
		r := rc.rings.Load()
		require.LessOrEqual(t, r, int64(n), "poll %v: %d doorbells for %d posts", poll, r, n)
		t.Logf("poll %v: %d doorbells for %d posts", poll, rc.rings.Load(), n)
		dev.Close()
	}
}
