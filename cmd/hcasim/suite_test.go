package main

import (
	"fmt"
	"github.com/stretchr/testify/require"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/hcasim/hcasim/hca/hcatest"
	"github.com/hcasim/hcasim/hca/verbs"
)

// dialOpener opens contexts on the daemon at path.
func dialOpener(path string) hcatest.Opener {
	return func(t testing.TB) *verbs.Context {
		t.Helper()
		ctx, err := verbs.Dial(path)
		require.NoError(t, err, "dial")
		t.Cleanup(func() { ctx.Close() })
		return ctx
	}
}

// TestSuiteServe runs the hcatest suite against an hcasim serve child
// process with scaled timers: every context is a client of the daemon.
// The scenarios that corrupt one chosen message on the wire skip (a wire
// hook is a function in the device's process).
func TestSuiteServe(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	hcasimChild(t, "serve", "--socket", sock, "--log-level", "warn", "--time-scale", suiteScale)
	waitSocket(t, sock)
	hcatest.RunOptions(t, hcatest.Options{Local: dialOpener(sock)})
}

// TestSuiteServeWire runs the suite across two hcasim serve children that
// are two RoCEv2 hosts on loopback, as one lossless and as one lossy wire
// (--loss, --dup, --reorder, --corrupt on both ports: Options.Lossy).
func TestSuiteServeWire(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []string
	}{
		{"Lossless", nil},
		{"Lossy", []string{"--loss", "0.01", "--dup", "0.01", "--reorder", "0.01", "--corrupt", "0.01"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			x, y := 1+rand.IntN(254), rand.IntN(256)
			var socks [2]string
			for i := range socks {
				socks[i] = filepath.Join(dir, fmt.Sprintf("%d.sock", i))
				// The real ACK timeout on the wire (see hcatest's wirePair):
				// the scenarios with timers choose short codes themselves.
				args := []string{"serve", "--socket", socks[i], "--log-level", "warn", "--lid", fmt.Sprint(2 + i),
					"--roce", fmt.Sprintf("127.%d.%d.%d", x, y, 2+i), "--fault-seed", fmt.Sprint(1 + i)}
				hcasimChild(t, append(args, tc.faults...)...)
			}
			for _, s := range socks {
				waitSocket(t, s)
			}
			hcatest.RunOptions(t, hcatest.Options{Local: dialOpener(socks[0]), Remote: dialOpener(socks[1]), Lossy: tc.faults != nil})
		})
	}
}
