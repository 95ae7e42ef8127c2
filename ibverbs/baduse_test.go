package ibverbs_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hcasim/hcasim/internal/frontendtest"
)

// TestBadUse builds c/test/baduse.c against the installed libibverbs and
// runs it on hcasim: bad arguments get the errno, NULL or error completion
// libibverbs gives on hardware, and registered memory behaves as
// docs/CONFORMANCE.md says (malloc, stack, unaligned, overlapping, fork).
// The daemon keeps serving afterwards.
func TestBadUse(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := filepath.Join(t.TempDir(), "baduse")
	if out, err := exec.Command("cc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-o", bin, filepath.Join("c", "test", "baduse.c"), "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("build baduse: %v\n%s", err, out)
	}
	sock := frontendtest.Daemon(t)
	out := frontendtest.Run(t, 60*time.Second, lib, sock, bin)
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ok ") {
			n++
		} else if strings.HasPrefix(l, "FAIL") {
			t.Error(l)
		}
	}
	if n < 40 {
		t.Errorf("only %d checks passed:\n%s", n, out)
	}
	frontendtest.Run(t, 20*time.Second, lib, sock, "ibv_devices")
}
