package verbs_test

import (
	"github.com/hcasim/hcasim/hca/remote/daemon"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/remote"
	"github.com/hcasim/hcasim/hca/verbs"
)

// A Dial'd context whose daemon goes away is lost: Lost closes, Err says
// why, and a CQ poll returns the completions already in the ring and then
// the error, so that a poller waiting for completions does not wait for
// ever.
func TestDeviceLost(t *testing.T) {
	// Several rounds and several QPs: a QP's engines may see the connection
	// close before the move to ERR that Shutdown made, and must flush the
	// receive all the same.
	for round := range 10 {
		deviceLostRound(t, round)
	}
}

func deviceLostRound(t *testing.T, round int) {
	const nqp = 8
	dev := hca.New(hca.Options{})
	defer dev.Close()
	path := filepath.Join(t.TempDir(), "d.sock")
	l, err := daemon.Listen(path)
	require.NoError(t, err)
	srv := &daemon.Server{Dev: dev}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			srv.Shutdown(0)
			require.NoError(t, <-served)
		}
	}
	defer stop()

	ctx, err := verbs.Dial(path)
	require.NoError(t, err)
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	cq, err := ctx.CreateCQ(2*nqp, nil)
	require.NoError(t, err)
	buf, err := ctx.Alloc(4096)
	require.NoError(t, err)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	require.NoError(t, err)
	for i := range nqp {
		qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, qp.Connect(qp.Info(), nil))
		_, err = qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SG: []verbs.SGE{mr.SGE(0, 64)}}})
		require.NoError(t, err)
	}

	wcs := make([]verbs.WC, nqp)
	n, err := cq.Poll(wcs)
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, ctx.Err())

	stop() // the receives flush into the CQ, then the connection closes
	select {
	case <-ctx.Lost():
	case <-time.After(5 * time.Second):
		require.Fail(t, "the context did not notice its daemon stopping")
	}
	if round == 0 {
		t.Logf("lost: %v", ctx.Err())
	}
	require.ErrorIs(t, ctx.Err(), verbs.ErrDeviceLost)
	require.ErrorIs(t, ctx.Err(), remote.ErrClosed)

	var got []verbs.WC
	for {
		n, err := cq.Poll(wcs)
		got = append(got, wcs[:n]...)
		if err != nil {
			require.Zero(t, n, "a poll that found completions returned an error")
			require.ErrorIs(t, err, verbs.ErrDeviceLost)
			break
		}
		require.NotZero(t, n, "a poll of a lost context found nothing and returned no error")
	}
	require.Len(t, got, nqp, "round %d: one flush per posted receive", round)
	seen := make(map[uint64]bool)
	for _, wc := range got {
		assert.Equal(t, verbs.WCWRFlushErr, wc.Status)
		seen[wc.WRID] = true
	}
	assert.Len(t, seen, nqp)
}

// An in-process context is never lost.
func TestInProcessNotLost(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	ctx, err := verbs.Open(dev)
	require.NoError(t, err)
	defer ctx.Close()
	cq, err := ctx.CreateCQ(4, nil)
	require.NoError(t, err)
	n, err := cq.Poll(make([]verbs.WC, 4))
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, ctx.Err())
	select {
	case <-ctx.Lost():
		require.Fail(t, "an in-process context is lost")
	default:
	}
}
