package verbs_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcasim/hcasim/hca"
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
	if err := a.qp.Connect(b.qp.Info(), &verbs.ConnectOptions{Timeout: 12}); err != nil { // 16.8 ms
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), nil); err != nil {
		t.Fatal(err)
	}
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
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a, 1)[0]; wc.Status != verbs.WCSuccess || wc.ByteLen != n {
		t.Fatalf("read %+v", wc)
	}
	for i := range a.buf[:n] {
		if a.buf[i] != byte(i) {
			t.Fatalf("byte %d = %#x after the READ", i, a.buf[i])
		}
		a.buf[i] = 0xEE // the application reuses its buffer
	}
	time.Sleep(60 * time.Millisecond)
	for i, c := range a.buf[:n] {
		if c != 0xEE {
			t.Fatalf("byte %d rewritten after the READ completed", i)
		}
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
	if err := a.qp.Connect(b.qp.Info(), &verbs.ConnectOptions{Timeout: 10}); err != nil { // 4.2 ms
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), nil); err != nil {
		t.Fatal(err)
	}
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
			if _, err := a.qp.PostSend(wrs[:k]); err != nil {
				t.Fatal(err)
			}
			for _, wc := range wait(t, a, k) {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("round %d: WR %d: %v", round, wc.WRID, wc.Status)
				}
			}
			wrs = wrs[k:]
		}
		for i := range chunks * chunk {
			if b.buf[i] != byte(i+round) {
				t.Fatalf("round %d: WRITE byte %d = %#x, want %#x", round, i, b.buf[i], byte(i+round))
			}
			if a.buf[16<<10+i] != byte(i*7+3) {
				t.Fatalf("round %d: READ byte %d = %#x, want %#x", round, i, a.buf[16<<10+i], byte(i*7+3))
			}
		}
	}
	if n.Load() < 37 {
		t.Fatalf("only %d wire messages: no retransmission was provoked", n.Load())
	}
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
	if err := a.qp.Connect(b.qp.Info(), &verbs.ConnectOptions{Timeout: 8, RetryCnt: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), nil); err != nil {
		t.Fatal(err)
	}
	var slow atomic.Bool
	fab.SetWireHook(func(m *hca.WireMsg) {
		if slow.Load() {
			time.Sleep(20 * time.Millisecond)
		}
	})
	defer fab.SetWireHook(nil)
	slow.Store(true)
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 64<<10)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a, 1)[0]; wc.Status != verbs.WCSuccess {
		t.Fatalf("a 64 KiB WRITE moved in 20 ms with a 1 ms ACK timeout: %v", wc.Status)
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SG: []verbs.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a, 1)[0]; wc.Status != verbs.WCRetryExcErr {
		t.Fatalf("a 4 KiB WRITE held 20 ms per try with a 1 ms ACK timeout: %v, want RETRY_EXC", wc.Status)
	}
}
