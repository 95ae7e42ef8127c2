package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/roce"
)

// Two daemons with RoCEv2 ports on two loopback hosts (one capturing, one
// losing 1% of what it sends): perf --role server on one and client on
// the other run over the wire, hcasim counters reads both ports, and the
// capture holds well-formed RoCEv2 frames once the daemon has stopped.
func TestServeRoCE(t *testing.T) {
	dir := t.TempDir()
	x, y := 1+rand.IntN(254), rand.IntN(256)
	ipA, ipB := fmt.Sprintf("127.%d.%d.2", x, y), fmt.Sprintf("127.%d.%d.3", x, y)
	sockA, sockB, pcap := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock"), filepath.Join(dir, "a.pcap")
	a, outA := hcasimChild(t, "serve", "--socket", sockA, "--roce", ipA, "--pcap", pcap, "--lid", "2")
	_, outB := hcasimChild(t, "serve", "--socket", sockB, "--roce", ipB, "--loss", "0.01", "--lid", "3")
	waitSocket(t, sockA)
	waitSocket(t, sockB)
	peer := filepath.Join(dir, "perf.sock")
	srv, srvOut := hcasimChild(t, "perf", "write", "--connect", sockA, "--role", "server", "--peer", peer, "--json")
	code, out, errOut := runCLI("perf", "write", "--size", "16384", "--qd", "4", "--duration", "300ms", "--connect", sockB,
		"--role", "client", "--peer", peer, "--json")
	require.Equal(t, 0, code, "perf client: %s %s\ndaemon A: %s\ndaemon B: %s", out, errOut, outA, outB)
	var r perfResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Positive(t, r.OpsPerSec)
	require.NoError(t, srv.Wait(), "perf server: %s", srvOut)
	var s perfServerResult
	lines := strings.Split(strings.TrimSpace(srvOut.String()), "\n") // progress, then the JSON line
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &s), "%s", srvOut)
	require.Positive(t, s.Ops)

	for _, sock := range []string{sockA, sockB} {
		code, out, errOut := runCLI("counters", "--socket", sock)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "tx_packets")
		require.Contains(t, out, "rx_packets")
	}
	_, out, _ = runCLI("counters", "--socket", sockB)
	require.Contains(t, out, "injected_loss", "daemon B lost nothing")
	require.NoError(t, a.Process.Signal(syscall.SIGTERM))
	require.NoError(t, a.Wait(), "%s", outA)
	require.Contains(t, outA.String(), "port counters")

	raw, err := os.ReadFile(pcap)
	require.NoError(t, err)
	require.Greater(t, len(raw), 24+16)
	// Walk the pcap records: every frame decodes as RoCEv2 with a good ICRC.
	p := roce.NewParser()
	n := 0
	for off := 24; off+16 <= len(raw); n++ {
		l := int(uint32(raw[off+8]) | uint32(raw[off+9])<<8 | uint32(raw[off+10])<<16 | uint32(raw[off+11])<<24)
		frame := raw[off+16 : off+16+l]
		require.NoError(t, p.Decode(frame), "frame %d", n+1)
		off += 16 + l
	}
	require.Positive(t, n)
	t.Logf("%d frames captured; client %.0f ops/s", n, r.OpsPerSec)
}
