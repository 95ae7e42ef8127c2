package remote_test

import (
	"github.com/hcasim/hcasim/hca/remote/daemon"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
)

// daemon starts a server for dev on a fresh socket and returns its path.
func serveDevice(t testing.TB, dev *hca.Device) (string, *daemon.Server) {
	t.Helper()
	s := &daemon.Server{Dev: dev}
	return serveWith(t, s), s
}

func dialer(path string) hcatest.Opener {
	return func(t testing.TB) *verbs.Context {
		t.Helper()
		ctx, err := verbs.Dial(path)
		require.NoError(t, err, "dial")
		t.Cleanup(func() { ctx.Close() })
		return ctx
	}
}

// TestSuiteOverSocket runs the whole hcatest suite with every context a
// client of the daemon: each scenario's two sides are two functions of
// one device, connected as two processes on one host would be. The send
// engines poll as hcasim serve's do by default.
func TestSuiteOverSocket(t *testing.T) {
	fabric := hca.NewFabric()
	dev := hca.New(hca.Options{TimeScale: 4, Fabric: fabric, Poll: 50 * time.Microsecond})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	hcatest.RunOptions(t, hcatest.Options{Local: dialer(path), WireHook: fabric.SetWireHook})
}

// The suite with one side in process and the other over the socket.
// Not under the race detector: the two sides synchronise through CQEs in
// shared (mmap) memory, which the detector does not see, so it would
// report the in-process side's buffers as raced.
func TestSuiteMixed(t *testing.T) {
	if raceEnabled {
		t.Skip("synchronisation through shared memory is invisible to the race detector")
	}
	fabric := hca.NewFabric()
	dev := hca.New(hca.Options{TimeScale: 4, Fabric: fabric})
	t.Cleanup(func() { dev.Close() })
	path, _ := serveDevice(t, dev)
	local := func(t testing.TB) *verbs.Context {
		ctx, err := verbs.Open(dev)
		require.NoError(t, err)
		t.Cleanup(func() { ctx.Close() })
		return ctx
	}
	hcatest.RunOptions(t, hcatest.Options{Local: local, Remote: dialer(path), WireHook: fabric.SetWireHook})
}

// TestSuiteTwoDaemons runs the whole suite across two daemons that are two
// hosts: every context is a socket client, one side's of the daemon whose
// port is 127.X.Y.2, the other's of the daemon at 127.X.Y.3, and their QPs
// talk RoCEv2 over UDP — as hcasim serve --roce does.
func TestSuiteTwoDaemons(t *testing.T) {
	x, y := byte(1+rand.IntN(254)), byte(rand.IntN(256))
	var paths [2]string
	var fabrics [2]*hca.Fabric
	for i := range paths {
		fabrics[i] = hca.NewFabric()
		dev := hca.New(hca.Options{Fabric: fabrics[i], LID: uint16(2 + i), Poll: 50 * time.Microsecond}) // the real ACK timeout (see hcatest's wirePair)
		t.Cleanup(func() { dev.Close() })
		require.NoError(t, dev.ListenRoCE(hca.WireOptions{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, x, y, byte(2 + i)}), 4791)}))
		paths[i], _ = serveDevice(t, dev)
	}
	hook := func(h func(*hca.WireMsg)) { fabrics[0].SetWireHook(h); fabrics[1].SetWireHook(h) }
	hcatest.RunOptions(t, hcatest.Options{Local: dialer(paths[0]), Remote: dialer(paths[1]), WireHook: hook})
}
