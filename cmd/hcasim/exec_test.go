package main

import (
	"github.com/stretchr/testify/require"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hcasim/hcasim/internal/frontendtest"
)

// TestExecEnvAndStatus: the child gets the library and a private daemon's
// socket, its exit status is hcasim's, and the private daemon's socket is
// gone afterwards.
func TestExecEnvAndStatus(t *testing.T) {
	lib := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(lib, "libibverbs.so.1"), nil, 0o644))
	code, out, errOut := runCLI("exec", "--lib", lib, "--", "sh", "-c", `echo "$LD_LIBRARY_PATH"; echo "$HCASIM_SOCKET"; test -S "$HCASIM_SOCKET" && exit 3`)
	require.EqualValues(t, 3, code, "exit %d, want the child's 3; stdout %q stderr %q", code, out, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], lib) || !strings.HasSuffix(lines[1], "hcasim.sock") {
		t.Fatalf("child environment %q", out)
	}
	if _, err := os.Stat(lines[1]); !os.IsNotExist(err) {
		t.Errorf("the private daemon's socket %s is still there: %v", lines[1], err)
	}
	if code, _, _ := runCLI("exec", "--lib", lib, "--", "sh", "-c", "kill -9 $$"); code != 128+9 {
		t.Errorf("a child killed by SIGKILL: exit %d, want %d", code, 128+9)
	}
}

func TestExecErrors(t *testing.T) {
	lib := t.TempDir()
	os.WriteFile(filepath.Join(lib, "libibverbs.so.1"), nil, 0o644)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"exec"}, 2, "no command"},
		{[]string{"exec", "--lib", t.TempDir(), "--", "true"}, 1, "no libibverbs.so.1"},
		{[]string{"exec", "--lib", lib, "--socket", filepath.Join(t.TempDir(), "none.sock"), "--", "true"}, 1, "no daemon at"},
		{[]string{"exec", "--lib", lib, "--", "/nonexistent/program"}, 1, "no such file"},
	} {
		code, _, errOut := runCLI(c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("%v: exit %d, stderr %q: want %d and %q", c.args, code, errOut, c.code, c.msg)
		}
	}
}

// TestExecDevinfo runs the one-line way in: hcasim exec -- ibv_devinfo.
func TestExecDevinfo(t *testing.T) {
	lib := frontendtest.Lib(t)
	frontendtest.Need(t, "ibv_devinfo", "ibverbs-utils")
	t.Setenv("HCASIM_SOCKET", "")
	code, out, errOut := runCLI("exec", "--lib", lib, "--", "ibv_devinfo")
	if code != 0 || !strings.Contains(out, "hca_id:\thcasim0") || !strings.Contains(out, "PORT_ACTIVE") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
}
