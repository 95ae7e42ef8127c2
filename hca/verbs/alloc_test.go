package verbs_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
)

// A steady flow of WRITEs allocates nothing from PostSend to the CQE, with
// a plain key or through a signature key inserting or passing PI (issue
// 13): requests, pending records, answers, CQEs and signature streams are
// all reused.
func TestWritesDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	const qd, iv, size = 8, 512, 16 << 10
	for _, mode := range []string{"none", "insert", "pass"} {
		t.Run(mode, func(t *testing.T) {
			dev := hca.New(hca.Options{})
			defer dev.Close()
			a, r := benchPairQP(t, dev, qd, size+size/iv*8, true)
			defer a.ctx.Close()
			defer r.ctx.Close()
			sg := a.mr.SGE(0, size)
			if mode != "none" {
				sg = benchSigKey(t, a, mode, iv, size)
			}
			wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{sg}, RemoteAddr: r.mr.Addr, RKey: r.mr.RKey}
			batch := []verbs.SendWR{wr, wr, wr, wr, wr, wr, wr, wr}
			wcs := make([]verbs.WC, qd)
			round := func() {
				_, err := a.qp.PostSend(batch)
				require.NoError(t, err)
				for done := 0; done < qd; {
					n, err := a.cq.Poll(wcs)
					require.NoError(t, err)
					for _, wc := range wcs[:n] {
						require.Equal(t, verbs.WCSuccess, wc.Status)
					}
					if done += n; n == 0 {
						runtime.Gosched()
					}
				}
			}
			round()
			require.Zero(t, testing.AllocsPerRun(50, round), "allocations per %d WRITEs", qd)
		})
	}
}
