package verbs_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// TestQPFootprint: an idle QP costs at most 64 KiB beyond its rings, and
// 10,000 QPs created and destroyed leave the goroutine count and the heap
// at their baseline.
func TestQPFootprint(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("slow, and the race detector's memory distorts the figures")
	}
	dev := hca.New(hca.Options{})
	defer dev.Close()
	ctx, err := verbs.Open(dev)
	require.NoError(t, err, "open")
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	cq, err := ctx.CreateCQ(16, nil)
	require.NoError(t, err, "create CQ")
	attr := &verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	// Rings of this QP: 2^6 WQEBBs (16 WRs × 3 WQEBBs, rounded up) + 16
	// receive WQEs of 16 bytes + a doorbell record, each allocation padded.
	const n = 1000
	g0, h0 := runtime.NumGoroutine(), heapInUse()
	qps := make([]*verbs.QP, 0, n)
	for range n {
		qp, err := pd.CreateQP(attr)
		require.NoError(t, err, "create QP %d", len(qps))
		qps = append(qps, qp)
	}
	h1 := heapInUse()
	rings := uint64(64*64+64+4096) + uint64(16*16+64+4096) + uint64(8+64+64)
	per := (h1 - h0) / n
	t.Logf("per idle QP: %d bytes in use, %d of them rings and their padding", per, rings)
	assert.LessOrEqual(t, per, rings+64<<10, "an idle QP costs %d bytes, more than 64 KiB beyond its %d bytes of rings", per, rings)
	for _, qp := range qps {
		require.NoError(t, qp.Destroy(), "destroy QP %#x", qp.QPN())
	}
	clear(qps)
	qps = qps[:0]
	// The baseline after a first thousand came and went (maps keep their
	// capacity); then 10,000 more, created and destroyed.
	g0, h0 = runtime.NumGoroutine(), heapInUse()
	for range 10 {
		for range n {
			qp, err := pd.CreateQP(attr)
			require.NoError(t, err, "create QP %d", len(qps))
			qps = append(qps, qp)
		}
		for _, qp := range qps {
			require.NoError(t, qp.Destroy(), "destroy QP %#x", qp.QPN())
		}
		clear(qps)
		qps = qps[:0]
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > g0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	g2, h2 := runtime.NumGoroutine(), heapInUse()
	t.Logf("goroutines %d -> %d, heap %d -> %d", g0, g2, h0, h2)
	assert.LessOrEqual(t, g2, g0, "%d goroutines left behind", g2-g0)
	assert.LessOrEqual(t, h2, h0+1<<20, "heap grew by %d bytes after 10,000 QPs came and went", h2-h0)
}
