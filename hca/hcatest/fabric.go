package hcatest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/hcasim/hcasim/hca/verbs"
)

var fabricScenarios = []scenario{
	{"MoveData", fabricMoveData},
	{"ConcurrentQPs", fabricConcurrentQPs},
	{"ManyContexts", fabricManyContexts},
}

// fabricMoveData: QPs of the two contexts (under RunPeers, of two
// devices) connect and move data every way.
func fabricMoveData(t *testing.T, s *suite) {
	a, b := s.pair(t)
	t.Logf("local LID %d, remote LID %d", a.ctx.LID(), b.ctx.LID())
	ea, eb := link(t, a, b)
	fill(a.buf, 0x41)
	fill(b.buf, 0x42)
	eb.recv(rwr(1, b.mr.SGE(60000, 1000)))
	ea.post(send(2, a.mr.SGE(0, 1000)))
	Check(t, "send", Poll1(t, ea.scq), Want{WRID: 2, Op: verbs.WCSend, Len: AnyLen})
	Check(t, "recv", Poll1(t, eb.rcq), Want{WRID: 1, Op: verbs.WCRecv, Len: 1000})
	sameBytes(t, "sent", b.buf[60000:61000], a.buf[:1000])
	ea.post(write(3, a.mr.SGE(1000, 20000), b.mr.Addr+1000, b.mr.RKey))
	Check(t, "write", Poll1(t, ea.scq), Want{WRID: 3, Op: verbs.WCRDMAWrite, Len: AnyLen})
	sameBytes(t, "written", b.buf[1000:21000], a.buf[1000:21000])
	fill(b.buf[30000:40000], 0x43)
	eb.post(write(4, b.mr.SGE(30000, 10000), a.mr.Addr+30000, a.mr.RKey))
	Check(t, "reverse write", Poll1(t, eb.scq), Want{WRID: 4, Op: verbs.WCRDMAWrite, Len: AnyLen})
	sameBytes(t, "reverse written", a.buf[30000:40000], b.buf[30000:40000])
	ea.post(read(5, a.mr.SGE(50000, 5000), b.mr.Addr+21000, b.mr.RKey))
	Check(t, "read", Poll1(t, ea.scq), Want{WRID: 5, Op: verbs.WCRDMARead, Len: 5000})
	sameBytes(t, "read", a.buf[50000:55000], b.buf[21000:26000])
	putBE64(b.buf[64000:], 7)
	ea.post(verbs.SendWR{WRID: 6, Opcode: verbs.WRAtomicFetchAdd, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(64000, 8)},
		RemoteAddr: b.mr.Addr + 64000, RKey: b.mr.RKey, CompareAdd: 5})
	Check(t, "fetch-add", Poll1(t, ea.scq), Want{WRID: 6, Op: verbs.WCFetchAdd, Len: 8})
	if be64(a.buf[64000:]) != 7 || be64(b.buf[64000:]) != 12 {
		t.Errorf("fetch-add: fetched %d, now %d; want 7, 12", be64(a.buf[64000:]), be64(b.buf[64000:]))
	}
}

// fabricConcurrentQPs: several QP pairs move data at the same time, each
// driven by its own goroutine.
func fabricConcurrentQPs(t *testing.T, s *suite) {
	a, b := s.pair(t)
	const pairs, rounds, size = 6, 150, 1024
	var wg sync.WaitGroup
	for p := range pairs {
		ea, eb := link(t, a, b)
		wg.Go(func() {
			if err := pairTraffic(a, b, ea, eb, p, rounds, size); err != nil {
				t.Errorf("pair %d: %v", p, err)
			}
		})
	}
	wg.Wait()
}

// pairTraffic runs rounds of WRITE + SEND over one pair, in its own region
// of the buffers; it may run in any goroutine.
func pairTraffic(a, b *node, ea, eb *ep, p, rounds, size int) error {
	dst := b.buf[p*8192 : p*8192+size]
	wdst := b.buf[p*8192+4096 : p*8192+4096+size]
	for r := range rounds {
		msg := pattern(size, byte(p*31+r))
		copy(a.buf[p*8192:], msg)
		if _, err := eb.qp.PostRecv([]verbs.RecvWR{rwr(uint64(r), b.mr.SGE(p*8192, size))}); err != nil {
			return err
		}
		w := write(uint64(r)<<1, a.mr.SGE(p*8192, size), b.mr.Addr+uint64(p*8192+4096), b.mr.RKey)
		w.Flags = 0
		if _, err := ea.qp.PostSend([]verbs.SendWR{w, send(uint64(r)<<1|1, a.mr.SGE(p*8192, size))}); err != nil {
			return err
		}
		sw, err := PollErr(ea.scq, 1)
		if err != nil {
			return err
		}
		rw, err := PollErr(eb.rcq, 1)
		if err != nil {
			return err
		}
		if w := sw[0]; w.Status != verbs.WCSuccess || w.WRID != uint64(r)<<1|1 || w.Opcode != verbs.WCSend || w.QPN != ea.qp.QPN() {
			return fmt.Errorf("round %d: send completion %s", r, FormatWC(w))
		}
		if w := rw[0]; w.Status != verbs.WCSuccess || w.WRID != uint64(r) || w.Opcode != verbs.WCRecv || w.ByteLen != uint32(size) || w.QPN != eb.qp.QPN() {
			return fmt.Errorf("round %d: receive completion %s", r, FormatWC(w))
		}
		if !bytes.Equal(dst, msg) || !bytes.Equal(wdst, msg) {
			return fmt.Errorf("round %d: data differs", r)
		}
	}
	return nil
}

// fabricManyContexts: a chain of contexts, each QP connected to the next
// context's, passes one message along.
func fabricManyContexts(t *testing.T, s *suite) {
	nodes := []*node{newNode(t, s.local), newNode(t, s.remote), newNode(t, s.local), newNode(t, s.remote)}
	copy(nodes[0].buf, "relay")
	for i := 0; i+1 < len(nodes); i++ {
		from, to := nodes[i], nodes[i+1]
		ef, et := link(t, from, to)
		et.recv(rwr(uint64(i), to.mr.SGE(0, 64)))
		ef.post(send(uint64(100+i), from.mr.SGE(0, 5)))
		Check(t, "relay send", Poll1(t, ef.scq), Want{WRID: uint64(100 + i), Op: verbs.WCSend, Len: AnyLen})
		Check(t, "relay recv", Poll1(t, et.rcq), Want{WRID: uint64(i), Op: verbs.WCRecv, Len: 5})
	}
	sameBytes(t, "relayed", nodes[len(nodes)-1].buf[:5], []byte("relay"))
}
