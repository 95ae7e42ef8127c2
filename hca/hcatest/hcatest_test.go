package hcatest_test

import (
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
