package verbs_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// BenchmarkWrite keeps qd RDMA WRITEs of size bytes outstanding between
// two QPs of one in-process device; ns/op is per completed WRITE.
func BenchmarkWrite(b *testing.B) {
	for _, c := range []struct{ size, qd int }{{64, 1}, {64, 32}, {4096, 32}, {65536, 8}} {
		b.Run(fmt.Sprintf("size=%d/qd=%d", c.size, c.qd), func(b *testing.B) {
			dev := hca.New(hca.Options{})
			defer dev.Close()
			a, r := benchPair(b, dev, c.qd, c.size)
			b.SetBytes(int64(c.size))
			b.ResetTimer()
			if err := benchWrites(a, r, c.qd, c.size, b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkWriteQPs: qps QP pairs of one device, each kept at QD 32 with
// 4 KiB WRITEs by its own goroutine; ns/op is per completed WRITE of all
// of them (issue 13's scale goal: 64 pairs ≥ 0.8× the throughput of one).
func BenchmarkWriteQPs(b *testing.B) {
	const qd, size = 32, 4096
	for _, qps := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("qps=%d", qps), func(b *testing.B) {
			dev := hca.New(hca.Options{})
			defer dev.Close()
			pairs := make([][2]*side, qps)
			for i := range pairs {
				a, r := benchPair(b, dev, qd, size)
				defer a.ctx.Close()
				defer r.ctx.Close()
				pairs[i] = [2]*side{a, r}
			}
			b.SetBytes(size)
			b.ResetTimer()
			var g errgroup.Group
			for i, p := range pairs {
				// b.N WRITEs in all, spread over the pairs.
				n := b.N / qps
				if i < b.N%qps {
					n++
				}
				g.Go(func() error { return benchWrites(p[0], p[1], qd, size, n) })
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkWritePI: 128 KiB WRITEs at QD 8 through the requester's
// signature key (REG_MR_INTEGRITY): none (a plain key), insert (memory
// plain, wire T10-DIF) and pass (T10-DIF in both, memory PI as separate
// metadata), at 4096- and 512-byte intervals; MB/s counts data bytes
// (issue 13: insert and pass ≥ 0.7× none at 4096, ≥ 0.5× at 512).
func BenchmarkWritePI(b *testing.B) {
	const qd, size = 8, 128 << 10
	for _, iv := range []int{4096, 512} {
		for _, mode := range []string{"none", "insert", "pass"} {
			if mode == "none" && iv == 512 {
				continue
			}
			b.Run(fmt.Sprintf("pi=%s/interval=%d", mode, iv), func(b *testing.B) {
				dev := hca.New(hca.Options{})
				defer dev.Close()
				blocks := size / iv
				a, r := benchPairQP(b, dev, qd, size+blocks*8, true)
				defer a.ctx.Close()
				defer r.ctx.Close()
				sg := a.mr.SGE(0, size)
				if mode != "none" {
					sg = benchSigKey(b, a, mode, iv, size)
				}
				b.SetBytes(size)
				b.ResetTimer()
				if err := benchWritesSG(a, r, qd, sg, b.N); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// benchSigKey registers an integrity MR over a's buffer (the data, then
// separate metadata for pass) and returns the source SGE of a WRITE of
// size data bytes through it.
func benchSigKey(b testing.TB, a *side, mode string, iv, size int) verbs.SGE {
	blocks := size / iv
	dom := verbs.SigDomain{Type: verbs.SigTypeT10DIF, PIInterval: uint32(iv), RefTag: 0x100, RefRemap: true, AppEscape: true, ApptagCheckMask: 0xFFFF}
	attrs := verbs.SigAttrs{CheckMask: 0xFF, Wire: dom}
	var meta []verbs.SGE
	if mode == "pass" {
		attrs.Mem = dom
		d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 0x100, Separate: true}
		if _, err := t10dif.Generate(d, t10dif.Buf{Data: a.buf[:size], Meta: a.buf[size : size+blocks*8]}, append([]byte(nil), a.buf[:size]...)); err != nil {
			b.Fatal(err)
		}
		meta = []verbs.SGE{a.mr.SGE(size, blocks*8)}
	}
	mr, err := a.pd.AllocMRIntegrity(4, 4)
	if err != nil {
		b.Fatal(err)
	}
	if err := mr.MapSGPI([]verbs.SGE{a.mr.SGE(0, size)}, meta); err != nil {
		b.Fatal(err)
	}
	mr.SetSigAttrs(attrs)
	mr.IncKey()
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite}}); err != nil {
		b.Fatal(err)
	}
	wcs := make([]verbs.WC, 1)
	for range 1000000 {
		if n, _ := a.cq.Poll(wcs); n == 1 {
			if wcs[0].Status != verbs.WCSuccess {
				b.Fatalf("registration: %v", wcs[0].Status)
			}
			return verbs.SGE{Addr: 0, Length: uint32(blocks * (iv + 8)), LKey: mr.LKey}
		}
		runtime.Gosched()
	}
	b.Fatal("registration: no completion")
	return verbs.SGE{}
}

// BenchmarkIdleQPs: 1,000 QPs (500 connected pairs, each of which has
// moved one WRITE) cost no CPU while idle: it reports the process's CPU
// time per second of wall time with the QPs idle, with the send engine
// sleeping at once and with it polling after work (Options.Poll, as the
// daemon does), beside the same with no QPs (the benchmark's own cost).
func BenchmarkIdleQPs(b *testing.B) {
	for _, c := range []struct {
		qps  int
		poll time.Duration
	}{{0, 0}, {1000, 0}, {1000, 50 * time.Microsecond}} {
		b.Run(fmt.Sprintf("qps=%d/poll=%v", c.qps, c.poll), func(b *testing.B) {
			dev := hca.New(hca.Options{Poll: c.poll})
			defer dev.Close()
			for range c.qps / 2 {
				a, r := benchPair(b, dev, 1, 64)
				defer a.ctx.Close()
				defer r.ctx.Close()
				if err := benchWrites(a, r, 1, 64, 1); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(100 * time.Millisecond) // polling and ACK timers run out
			c0, t0 := cpuTime(b), time.Now()
			for b.Loop() {
				time.Sleep(10 * time.Millisecond)
			}
			b.ReportMetric(float64(cpuTime(b)-c0)/float64(time.Since(t0)), "cpu/wall")
		})
	}
}

// cpuTime returns the process's user and system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchPair returns two connected sides of dev for WRITEs of size bytes
// at qd.
func benchPair(b testing.TB, dev *hca.Device, qd, size int) (*side, *side) {
	return benchPairQP(b, dev, qd, size, false)
}

// benchPairQP is benchPair with buffers of size bytes and, with
// integrity, QPs that take signature work requests.
func benchPairQP(b testing.TB, dev *hca.Device, qd, size int, integrity bool) (*side, *side) {
	mk := func() *side {
		ctx, err := verbs.Open(dev)
		if err != nil {
			b.Fatal(err)
		}
		s := &side{ctx: ctx}
		s.pd, _ = ctx.AllocPD()
		s.cq, _ = ctx.CreateCQ(2*qd+8, nil)
		s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Integrity: integrity,
			Cap: verbs.QPCap{MaxSendWR: qd, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			b.Fatal(err)
		}
		s.buf, _ = ctx.Alloc(size)
		// Data in every page: memory never written maps the kernel's
		// shared zero page, which would make reads of it unrealistically
		// cheap (docs/PERFORMANCE.md).
		for i := range s.buf {
			s.buf[i] = byte(i*7 + i>>10)
		}
		s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	a, r := mk(), mk()
	if err := a.qp.Connect(r.qp.Info(), nil); err != nil {
		b.Fatal(err)
	}
	if err := r.qp.Connect(a.qp.Info(), nil); err != nil {
		b.Fatal(err)
	}
	return a, r
}

// benchWrites moves n WRITEs of size bytes from a to r, qd outstanding.
func benchWrites(a, r *side, qd, size, n int) error {
	return benchWritesSG(a, r, qd, a.mr.SGE(0, size), n)
}

// benchWritesSG moves n WRITEs of the source sg from a to r, qd
// outstanding.
func benchWritesSG(a, r *side, qd int, sg verbs.SGE, n int) error {
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SG: []verbs.SGE{sg}, RemoteAddr: r.mr.Addr, RKey: r.mr.RKey}
	batch := make([]verbs.SendWR, qd)
	for i := range batch {
		batch[i] = wr
	}
	wcs := make([]verbs.WC, qd)
	outstanding, posted, done := 0, 0, 0
	for done < n {
		if k := min(qd-outstanding, n-posted); k > 0 {
			if _, err := a.qp.PostSend(batch[:k]); err != nil {
				return err
			}
			outstanding += k
			posted += k
		}
		k, _ := a.cq.Poll(wcs)
		if k == 0 {
			runtime.Gosched()
		}
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("WRITE completion %v", wc.Status)
			}
		}
		outstanding -= k
		done += k
	}
	return nil
}
