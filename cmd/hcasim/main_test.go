package main

import (
	"bytes"
	"encoding/json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hcasim/hcasim/hca/verbs"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"conform", "--help"}, {"speed", "--help"}, {"speed", "-h"}} {
		code, out, _ := runCLI(args...)
		if code != 0 || !strings.Contains(out, "usage: hcasim") || !strings.Contains(out, "example: hcasim") {
			t.Errorf("%v: exit %d, output %q: want exit 0 with a usage line and an example", args, code, out)
		}
	}
}

func TestErrorsGoToStderr(t *testing.T) {
	for _, args := range [][]string{{}, {"nosuch"}, {"conform"}, {"conform", "/nonexistent"}, {"speed", "extra"}, {"conform", "--bogus"}} {
		code, out, errOut := runCLI(args...)
		if code == 0 || errOut == "" || strings.Contains(out, "error") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q: want non-zero exit and a message on stderr", args, code, out, errOut)
		}
	}
}

func TestConformVectors(t *testing.T) {
	code, out, errOut := runCLI("conform", "../../testvectors")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q, output tail %q", code, errOut, tail(out))
	}
	if !regexpLine(out, " passed, 0 failed") {
		t.Fatalf("no summary line in %q", tail(out))
	}
}

func TestConformFailuresAndMalformed(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile("../../testvectors/public.jsonl")
	require.NoError(t, err)
	lines := strings.SplitN(string(good), "\n", 3)
	// A case whose expected value is wrong fails with its id and what differed.
	bad := strings.Replace(lines[0], `"value":"0xd0db"`, `"value":"0xd0dc"`, 1)
	require.NotEqualValues(t, lines[0], bad, "first public case changed; update the test")
	f1 := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(f1, []byte(lines[1]+"\n"+bad+"\n"), 0o644)
	code, out, _ := runCLI("conform", f1)
	if code == 0 || !strings.Contains(out, "FAIL pub-0001") || !strings.Contains(out, "value: got 0xd0db, want 0xd0dc") ||
		!strings.Contains(out, "1 passed, 1 failed") {
		t.Errorf("failing case: exit %d, output %q", code, out)
	}
	// -v prints passing cases too.
	_, out, _ = runCLI("conform", "-v", f1)
	if !strings.Contains(out, "ok   pub-0002") {
		t.Errorf("-v: output %q", out)
	}
	// A malformed line is reported with its line number.
	f2 := filepath.Join(dir, "malformed.jsonl")
	os.WriteFile(f2, []byte(lines[1]+"\n{\"id\": 5}\n"), 0o644)
	code, _, errOut := runCLI("conform", f2)
	if code == 0 || !strings.Contains(errOut, "malformed.jsonl:2:") {
		t.Errorf("malformed file: exit %d, stderr %q", code, errOut)
	}
}

func TestSpeedJSON(t *testing.T) {
	code, out, errOut := runCLI("speed", "--json", "--runs", "1", "--time", "1ms", "--filter", "/4096/")
	require.EqualValues(t, 0, code, "exit %d, stderr %q", code, errOut)
	var rows []struct {
		Kernel   string   `json:"kernel"`
		Impl     string   `json:"impl"`
		Size     int      `json:"size"`
		Interval *int     `json:"interval"`
		GBps     *float64 `json:"gbps"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("stdout is not a JSON array: %v\n%s", err, out)
	}
	kernels := map[string]bool{}
	for _, r := range rows {
		kernels[r.Kernel] = true
		if r.Size != 4096 || r.Impl == "" || r.Interval == nil || r.GBps == nil || *r.GBps <= 0 {
			t.Errorf("bad row %+v", r)
		}
	}
	for _, k := range []string{"crc16", "crc64nvme", "crc32c", "ipcsum", "insert", "verify", "strip"} {
		assert.True(t, kernels[k], "no %s row", k)
	}
}

func tail(s string) string {
	if len(s) > 300 {
		return s[len(s)-300:]
	}
	return s
}

func regexpLine(out, suffix string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(l, suffix) {
			return true
		}
	}
	return false
}

func TestPerfJSON(t *testing.T) {
	for _, op := range []string{"write", "read", "send"} {
		code, out, errOut := runCLI("perf", op, "--size", "128", "--qd", "4", "--duration", "200ms", "--json")
		require.EqualValues(t, 0, code, "%s: exit %d, stderr %q", op, code, errOut)
		var r struct {
			Op           string   `json:"op"`
			Size         int      `json:"size"`
			QD           int      `json:"qd"`
			PI           string   `json:"pi"`
			OpsPerSec    *float64 `json:"ops_per_sec"`
			GBytesPerSec *float64 `json:"gbytes_per_sec"`
			Lat          *struct {
				P50 *float64 `json:"p50"`
				P99 *float64 `json:"p99"`
			} `json:"lat_us"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: stdout is not one JSON object: %v\n%s", op, err, out)
		}
		if r.Op != op || r.Size != 128 || r.QD != 4 || r.PI != "none" || r.OpsPerSec == nil || *r.OpsPerSec <= 0 ||
			r.GBytesPerSec == nil || r.Lat == nil || r.Lat.P50 == nil || r.Lat.P99 == nil || *r.Lat.P50 <= 0 {
			t.Fatalf("%s: %s", op, out)
		}
	}
	if code, _, _ := runCLI("perf", "teleport"); code == 0 {
		t.Fatal("unknown operation accepted")
	}
}

func TestDemo(t *testing.T) {
	code, out, errOut := runCLI("demo")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q, output tail %q", code, errOut, tail(out))
	}
	for _, want := range []string{"REG_MR_INTEGRITY", "the stream equals t10dif's INSERT", "IB_SIG_BAD_GUARD at offset 2600", "exit 0"} {
		assert.True(t, strings.Contains(out, want), "demo output lacks %q", want)
	}
}

// TestMain lets a test run the binary's main as a child process
// (HCASIM_TEST_MAIN=1), for commands that need signals.
func TestMain(m *testing.M) {
	if os.Getenv("HCASIM_TEST_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// hcasimChild starts hcasim with args as a child process.
func hcasimChild(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "HCASIM_TEST_MAIN=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, &out
}

// waitSocket waits until the daemon at path accepts connections (the
// socket file appears at bind, a moment before listen).
func waitSocket(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if c, err := net.Dial("unixpacket", path); err == nil {
				c.Close()
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket at %s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hcasim serve in its own process: a client drives it, perf --connect runs
// against it, and on SIGTERM the client's posted receives complete with
// flush errors before the daemon exits 0 and removes its socket.
func TestServe(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	cmd, out := hcasimChild(t, "serve", "--socket", sock, "--grace", "2s", "--log-level", "debug")
	waitSocket(t, sock)
	if fi, _ := os.Stat(sock); fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	code, pout, perr := runCLI("perf", "write", "--size", "4096", "--qd", "4", "--duration", "200ms", "--connect", sock, "--json")
	var r perfResult
	if code != 0 || json.Unmarshal([]byte(pout), &r) != nil || r.OpsPerSec <= 0 {
		t.Fatalf("perf --connect: exit %d, %q, %q", code, pout, perr)
	}

	ctx, err := verbs.Dial(sock)
	require.NoError(t, err)
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	cq, err := ctx.CreateCQ(16, nil)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	if err := qp.Connect(qp.Info(), nil); err != nil { // looped back to itself
		t.Fatal(err)
	}
	buf, _ := ctx.Alloc(4096)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	require.NoError(t, err)
	if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: 7, SG: []verbs.SGE{mr.SGE(0, 64)}}, {WRID: 8, SG: []verbs.SGE{mr.SGE(64, 64)}}}); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	var got []verbs.WC
	wcs := make([]verbs.WC, 4)
	for deadline := time.Now().Add(5 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
		n, _ := cq.Poll(wcs)
		got = append(got, wcs[:n]...)
		time.Sleep(time.Millisecond)
	}
	if len(got) != 2 || got[0].WRID != 7 || got[1].WRID != 8 || got[0].Status != verbs.WCWRFlushErr || got[1].Status != verbs.WCWRFlushErr {
		t.Errorf("completions after SIGTERM: %+v, want receives 7 and 8 flushed", got)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, out)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	assert.True(t, strings.Contains(out.String(), "stopped"), "no stop record in the log:\n%s", out)
	if _, err := pd.AllocMR(verbs.MRTypeMemReg, 4); err == nil {
		t.Error("a command succeeded after the daemon stopped")
	}
}

// perf --role server and --role client in two processes against one
// daemon: the server takes the run from the client, and both report the
// same number of operations (for SEND, the receives the server took).
func TestPerfRoles(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	hcasimChild(t, "serve", "--socket", sock, "--log-level", "warn")
	waitSocket(t, sock)
	for _, run := range [][]string{
		{"write", "--size", "256", "--qd", "4"},
		{"send", "--size", "256", "--qd", "4"},
		{"read", "--size", "4096", "--qd", "2", "--pi", "strip", "--interval", "512"},
	} {
		srv, sout := hcasimChild(t, "perf", "--role", "server", "--connect", sock, "--json")
		code, out, errOut := runCLI(append(append([]string{"perf"}, run...), "--role", "client", "--connect", sock, "--duration", "200ms", "--json")...)
		require.EqualValues(t, 0, code, "%v: client exit %d, stderr %q", run, code, errOut)
		var r perfResult
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Op != run[0] || r.OpsPerSec <= 0 {
			t.Fatalf("%v: client output %q", run, out)
		}
		if err := srv.Wait(); err != nil {
			t.Fatalf("%v: server: %v\n%s", run, err, sout)
		}
		var s perfServerResult
		line := sout.String()[strings.LastIndex(strings.TrimSpace(sout.String()), "\n")+1:]
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("%v: server output %q: %v", run, sout, err)
		}
		if s.Role != "server" || s.Op != run[0] || s.Ops <= 0 {
			t.Errorf("%v: server reported %+v", run, s)
		}
		if run[0] == "send" && s.Received != s.Ops {
			t.Errorf("send: the server received %d SENDs, the client completed %d", s.Received, s.Ops)
		}
	}
	// Bad combinations are refused.
	for _, args := range [][]string{{"perf", "write", "--role", "server"}, {"perf", "write", "--role", "sideways", "--connect", sock}} {
		if code, _, _ := runCLI(args...); code == 0 {
			t.Errorf("%v accepted", args)
		}
	}
}
