package hcatest_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/internal/tooltest"
)

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
// with RoCEv2 ports on two loopback addresses (freeWirePorts), and a wire
// hook setter for both.
func wirePair(t *testing.T, faults hca.Faults) (d1, d2 *hca.Device, hook func(func(*hca.WireMsg))) {
	t.Helper()
	f1, f2 := hca.NewFabric(), hca.NewFabric()
	// The real ACK timeout: a wire's messages take real time (under the
	// race detector on a loaded machine, a scaled timeout fires while the
	// answer is on its way, and a retransmission passes the wire hook
	// again); the timer scenarios choose short codes themselves.
	d1 = hca.New(hca.Options{Fabric: f1, LID: 2})
	d2 = hca.New(hca.Options{Fabric: f2, LID: 3})
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

// freeWirePorts returns two hosts' RoCEv2 endpoints on loopback, at UDP
// port 4791 as RoCEv2 has it: 127.X.Y.2 and 127.X.Y.3 for an X.Y no other
// test holds.
func freeWirePorts(t *testing.T) (netip.AddrPort, netip.AddrPort) {
	t.Helper()
	for range 100 {
		x, y := byte(1+rand.IntN(254)), byte(rand.IntN(256))
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, x, y, 2}), 4791)
		b := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, x, y, 3}), 4791)
		c1, err1 := net.ListenUDP("udp", net.UDPAddrFromAddrPort(a))
		c2, err2 := net.ListenUDP("udp", net.UDPAddrFromAddrPort(b))
		if c1 != nil {
			c1.Close()
		}
		if c2 != nil {
			c2.Close()
		}
		if err1 == nil && err2 == nil {
			return a, b
		}
	}
	t.Fatal("no free pair of loopback RoCEv2 endpoints")
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

// TestWireCapture captures a mixed run across the wire — WRITE, READ, SEND
// with immediate, atomics, integrity WRITEs and READs with PI on the wire,
// retries after loss — and has two independent decoders read it: tshark
// decodes every frame as InfiniBand with nothing malformed, and scapy's
// BTH layer agrees with every ICRC.
func TestWireCapture(t *testing.T) {
	tshark := needTool(t, "tshark", "tshark")
	py := needTool(t, "/usr/bin/python3", "python3-scapy")
	f1, f2 := hca.NewFabric(), hca.NewFabric()
	d1 := hca.New(hca.Options{TimeScale: timeScale, Fabric: f1, LID: 2})
	d2 := hca.New(hca.Options{TimeScale: timeScale, Fabric: f2, LID: 3})
	a1, a2 := freeWirePorts(t)
	path := filepath.Join(t.TempDir(), "wire.pcap")
	if d := os.Getenv("HCASIM_KEEP_PCAP"); d != "" {
		path = filepath.Join(d, "wire.pcap")
	}
	out, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, d1.ListenRoCE(hca.WireOptions{Addr: a1, Pcap: out}))
	require.NoError(t, d2.ListenRoCE(hca.WireOptions{Addr: a2, Faults: hca.Faults{Loss: 0.005, Seed: 7}}))
	t.Cleanup(func() {
		d1.Close()
		d2.Close()
		require.NoError(t, out.Close())
		c1, c2 := d1.Counters(), d2.Counters()
		require.NotZero(t, c2.InjectedLoss, "no loss injected")
		require.NotZero(t, c1.Retransmits+c2.Retransmits, "no retry after loss")
		frames := int(c1.TxPackets + c1.RxPackets)

		var stderr bytes.Buffer
		cmd := exec.Command(tshark, "-r", path, "--disable-protocol", "rpcordma", "-T", "fields", "-e", "infiniband.bth.opcode")
		cmd.Stderr = &stderr
		ops, err := cmd.Output()
		require.NoError(t, err, "%s", stderr.String())
		lines := strings.Split(strings.TrimSpace(string(ops)), "\n")
		require.Len(t, lines, frames, "tshark frames")
		seen := map[string]int{}
		for _, l := range lines {
			seen[l]++
		}
		t.Logf("%d frames; opcodes %v", frames, seen)
		for _, op := range []string{"6", "7", "8", "10", "12", "13", "14", "15", "16", "17", "18", "20", "5", "4"} {
			require.NotZero(t, seen[op], "no frame with opcode %s", op)
		}
		cmd = exec.Command(tshark, "-r", path, "--disable-protocol", "rpcordma", "-Y", "_ws.malformed || _ws.expert.severity >= warning || !infiniband")
		cmd.Stderr = &stderr
		bad, err := cmd.Output()
		require.NoError(t, err, "%s", stderr.String())
		require.Empty(t, strings.TrimSpace(string(bad)), "malformed, warned-about or undecoded frames")

		icrc, err := exec.Command(py, filepath.Join("..", "..", "roce", "testdata", "icrc_check.py"), path).CombinedOutput()
		require.NoError(t, err, "%s", icrc)
		res := strings.Split(strings.TrimSpace(string(icrc)), "\n")
		require.Equal(t, fmt.Sprintf("frames %d", frames), res[len(res)-1])
		for i, l := range res[:len(res)-1] {
			require.Equal(t, fmt.Sprintf("ok %d", i+1), l, "scapy's ICRC check")
		}
	})
	hcatest.RunOptions(t, hcatest.Options{Local: opener(d1), Remote: opener(d2), Lossy: true,
		Groups: []string{"SendRecv", "RDMA", "Integrity"}})
}

// needTool is tooltest.Need.
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	return tooltest.Need(t, name, pkg)
}

// TestRCSourceHardware: with hca.Options.RCSourceHardware the device
// serves an injected request whose PSN fits, as hardware does.
func TestRCSourceHardware(t *testing.T) {
	dev := hca.New(hca.Options{TimeScale: timeScale, RCSourceHardware: true})
	t.Cleanup(func() { dev.Close() })
	hcatest.RunOptions(t, hcatest.Options{Local: opener(dev), Groups: []string{"Isolation"}, RCSourceHardware: true})
}
