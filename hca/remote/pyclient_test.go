package remote_test

import (
	"bytes"
	"context"
	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/hca/remote/daemon"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/remote"
)

// pyDaemon serves a fresh device on a fresh socket and returns its path.
func pyDaemon(t *testing.T) string {
	t.Helper()
	dev := hca.New(hca.Options{})
	t.Cleanup(func() { dev.Close() })
	path := filepath.Join(t.TempDir(), "hcasim.sock")
	l, err := daemon.Listen(path)
	require.NoError(t, err)
	s := &daemon.Server{Dev: dev}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Shutdown(0)
		assert.NoError(t, <-done, "serve")
	})
	return path
}

// runPyClient runs scripts/pyclient.py against the socket and returns its
// combined output, failing the test on a non-zero exit.
func runPyClient(t *testing.T, python, sock string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, filepath.Join("..", "..", "scripts", "pyclient.py"), sock)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	// assert, not require: the test runs it in goroutines too.
	assert.NoError(t, err, "pyclient:\n%s", out.String())
	return out.String()
}

// TestPyClient runs the Python client written from docs/PROTOCOL.md: HELLO,
// memfd mappings, commands, a connected QP pair, MTT and PA mkeys, RDMA
// WRITEs completed by polling and by an armed CQ's event, teardown and
// shutdown(SHUT_WR).
func TestPyClient(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	sock := pyDaemon(t)
	t.Log(runPyClient(t, python, sock))

	// Two clients at once are two functions of the device; then the daemon
	// still serves a Go client.
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runPyClient(t, python, sock)
		}()
	}
	wg.Wait()
	c, err := remote.Dial(sock)
	require.NoError(t, err, "dial after the Python clients")
	out := ifc.Out(c.Command(ifc.NewIn(ifc.CmdQueryHCACap, ifc.InHeaderSize)))
	assert.Equal(t, ifc.StatusOK, out.Status(), "QUERY_HCA_CAP after the Python clients: %v", out.Err(ifc.CmdQueryHCACap))
	c.Close()
}

// TestPyClientFails checks that the Python client reports a failure with a
// message and a non-zero exit status (here: no daemon at the path).
func TestPyClientFails(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	cmd := exec.Command(python, filepath.Join("..", "..", "scripts", "pyclient.py"), filepath.Join(t.TempDir(), "none.sock"))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "pyclient without a daemon:\n%s", out)
	require.Contains(t, string(out), "pyclient: FAIL", "pyclient without a daemon: %v", err)
}
