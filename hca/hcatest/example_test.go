package hcatest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
)

// The suite against an in-process device, from a test of your own: every
// scenario is a subtest (TestDevice/SendRecv/PingPong, …). The Opener
// gives each scenario fresh contexts, closed when the scenario ends; for a
// daemon, an Opener that calls verbs.Dial(path) instead runs the same
// suite over the socket.
//
// Run needs the *testing.T of a test, which an example does not have, so
// this example is compiled but not run; this package's TestInProcess runs
// the same thing.
func ExampleRun() {
	t := new(testing.T) // in your test: func TestDevice(t *testing.T) { ... }

	dev := hca.New(hca.Options{TimeScale: 4}) // divide the retry timers: the suite runs faster
	t.Cleanup(func() { dev.Close() })
	hcatest.Run(t, func(t testing.TB) *verbs.Context {
		ctx, err := verbs.Open(dev)
		require.NoError(t, err)
		t.Cleanup(func() { ctx.Close() })
		return ctx
	})
}

// RunOptions selects groups, and with a wire hook (here the fabric's)
// also runs the scenarios that corrupt data on the wire, such as the
// integrity errors. Compiled but not run, as the Run example.
func ExampleRunOptions() {
	t := new(testing.T) // in your test: func TestDeviceIntegrity(t *testing.T) { ... }

	fabric := hca.NewFabric()
	dev := hca.New(hca.Options{Fabric: fabric, TimeScale: 4})
	t.Cleanup(func() { dev.Close() })
	hcatest.RunOptions(t, hcatest.Options{
		Local: func(t testing.TB) *verbs.Context {
			ctx, err := verbs.Open(dev)
			require.NoError(t, err)
			t.Cleanup(func() { ctx.Close() })
			return ctx
		},
		WireHook: fabric.SetWireHook,
		Groups:   []string{"Integrity", "IntegrityErrors"},
	})
}
