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
