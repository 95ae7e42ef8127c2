package verbs_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
)

// BenchmarkWrite keeps qd RDMA WRITEs of size bytes outstanding between
// two QPs of one in-process device; ns/op is per completed WRITE.
func BenchmarkWrite(b *testing.B) {
	for _, c := range []struct{ size, qd int }{{64, 1}, {64, 32}, {4096, 32}, {65536, 8}} {
		b.Run(fmt.Sprintf("size=%d/qd=%d", c.size, c.qd), func(b *testing.B) {
			dev := hca.New(hca.Options{})
			defer dev.Close()
			mk := func() *side {
				ctx, err := verbs.Open(dev)
				if err != nil {
					b.Fatal(err)
				}
				s := &side{ctx: ctx}
				s.pd, _ = ctx.AllocPD()
				s.cq, _ = ctx.CreateCQ(2*c.qd+8, nil)
				s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: verbs.QPCap{MaxSendWR: c.qd, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
				if err != nil {
					b.Fatal(err)
				}
				s.buf, _ = ctx.Alloc(c.size)
				s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
				if err != nil {
					b.Fatal(err)
				}
				return s
			}
			a, r := mk(), mk()
			defer a.ctx.Close()
			defer r.ctx.Close()
			if err := a.qp.Connect(r.qp.Info(), nil); err != nil {
				b.Fatal(err)
			}
			if err := r.qp.Connect(a.qp.Info(), nil); err != nil {
				b.Fatal(err)
			}
			wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, c.size)}, RemoteAddr: r.mr.Addr, RKey: r.mr.RKey}
			batch := make([]verbs.SendWR, c.qd)
			for i := range batch {
				batch[i] = wr
			}
			wcs := make([]verbs.WC, c.qd)
			b.SetBytes(int64(c.size))
			b.ResetTimer()
			outstanding, posted, done := 0, 0, 0
			for done < b.N {
				if k := min(c.qd-outstanding, b.N-posted); k > 0 {
					if _, err := a.qp.PostSend(batch[:k]); err != nil {
						b.Fatal(err)
					}
					outstanding += k
					posted += k
				}
				n, _ := a.cq.Poll(wcs)
				if n == 0 {
					runtime.Gosched()
				}
				for _, wc := range wcs[:n] {
					if wc.Status != verbs.WCSuccess {
						b.Fatal(wc.Status)
					}
				}
				outstanding -= n
				done += n
			}
		})
	}
}
