package hcatest_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
)

// timeScale divides the in-process devices' transport timers.
const timeScale = 4

// opener opens contexts on dev.
func opener(dev *hca.Device) hcatest.Opener {
	return func(t testing.TB) *verbs.Context {
		t.Helper()
		ctx, err := verbs.Open(dev)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { ctx.Close() })
		return ctx
	}
}

// TestInProcess runs the suite on one in-process device.
func TestInProcess(t *testing.T) {
	fabric := hca.NewFabric()
	dev := hca.New(hca.Options{TimeScale: timeScale, Fabric: fabric})
	t.Cleanup(func() { dev.Close() })
	hcatest.RunOptions(t, hcatest.Options{Local: opener(dev), WireHook: fabric.SetWireHook})
}

// TestTwoDevices runs the suite across two in-process devices of one
// fabric: every scenario's remote side is on the second device.
func TestTwoDevices(t *testing.T) {
	fabric := hca.NewFabric()
	d1 := hca.New(hca.Options{TimeScale: timeScale, Fabric: fabric})
	d2 := hca.New(hca.Options{TimeScale: timeScale, Fabric: fabric})
	t.Cleanup(func() { d1.Close(); d2.Close() })
	if d1.LID() == d2.LID() {
		t.Fatalf("two devices of one fabric share LID %d", d1.LID())
	}
	hcatest.RunOptions(t, hcatest.Options{Local: opener(d1), Remote: opener(d2), WireHook: fabric.SetWireHook})
}

// wirePair returns two devices, each on a fabric of its own (two hosts),
// with RoCEv2 ports on 127.0.0.2 and 127.0.0.3 at one free UDP port, and
// a wire hook setter for both.
func wirePair(t *testing.T, faults hca.Faults) (d1, d2 *hca.Device, hook func(func(*hca.WireMsg))) {
	t.Helper()
	f1, f2 := hca.NewFabric(), hca.NewFabric()
	d1 = hca.New(hca.Options{TimeScale: timeScale, Fabric: f1, LID: 2})
	d2 = hca.New(hca.Options{TimeScale: timeScale, Fabric: f2, LID: 3})
	t.Cleanup(func() { d1.Close(); d2.Close() })
	a1, a2 := freeWirePorts(t)
	f := faults
	if err := d1.ListenRoCE(hca.WireOptions{Addr: a1, Faults: f}); err != nil {
		t.Fatal(err)
	}
	f.Seed++
	if err := d2.ListenRoCE(hca.WireOptions{Addr: a2, Faults: f}); err != nil {
		t.Fatal(err)
	}
	return d1, d2, func(h func(*hca.WireMsg)) { f1.SetWireHook(h); f2.SetWireHook(h) }
}

// freeWirePorts returns 127.0.0.2:P and 127.0.0.3:P for a UDP port P free
// on both.
func freeWirePorts(t *testing.T) (netip.AddrPort, netip.AddrPort) {
	t.Helper()
	for range 50 {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
		if err != nil {
			t.Fatal(err)
		}
		p := uint16(c.LocalAddr().(*net.UDPAddr).Port)
		c2, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3), Port: int(p)})
		c.Close()
		if err == nil {
			c2.Close()
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 2}), p), netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 3}), p)
		}
	}
	t.Fatal("no UDP port free on both 127.0.0.2 and 127.0.0.3")
	return netip.AddrPort{}, netip.AddrPort{}
}

// TestWire runs the suite across two devices that are two hosts: every
// scenario's QPs talk RoCEv2 over UDP on loopback.
func TestWire(t *testing.T) {
	d1, d2, hook := wirePair(t, hca.Faults{})
	t.Cleanup(func() { // after the parallel groups
		c1, c2 := d1.Counters(), d2.Counters()
		t.Logf("port 1: %+v", c1)
		t.Logf("port 2: %+v", c2)
		if c1.TxPackets == 0 || c2.RxPackets == 0 || c1.ICRCErrors+c2.ICRCErrors != 0 {
			t.Errorf("counters: %+v / %+v", c1, c2)
		}
	})
	hcatest.RunOptions(t, hcatest.Options{Local: opener(d1), Remote: opener(d2), WireHook: hook})
}

// TestWireLossy runs the suite across two hosts whose ports drop,
// duplicate, reorder and corrupt (caught by the ICRC) 1% of the packets
// they send each: every scenario still sees each signaled WR complete
// once, with the right data.
func TestWireLossy(t *testing.T) {
	d1, d2, hook := wirePair(t, hca.Faults{Loss: 0.01, Duplicate: 0.01, Reorder: 0.01, Corrupt: 0.01, Seed: 1})
	t.Cleanup(func() {
		c1, c2 := d1.Counters(), d2.Counters()
		t.Logf("port 1: %+v", c1)
		t.Logf("port 2: %+v", c2)
		if c1.InjectedLoss == 0 || c1.Retransmits == 0 || c2.ICRCErrors == 0 {
			t.Errorf("no faults injected or recovered from: %+v / %+v", c1, c2)
		}
	})
	hcatest.RunOptions(t, hcatest.Options{Local: opener(d1), Remote: opener(d2), WireHook: hook, Lossy: true})
}
