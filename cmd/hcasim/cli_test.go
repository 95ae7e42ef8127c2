package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
)

// The CLI as a new user tries it (issue 15).

// syncBuffer is an output buffer a test may read while a child writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// piped is a child hcasim whose standard output is read line by line.
type piped struct {
	cmd    *exec.Cmd
	lines  chan string // standard output, closed at its end
	stderr *syncBuffer
	done   chan struct{} // closed when the child has exited
	err    error         // Wait's result, once done
}

// hcasimPiped starts hcasim with args as a child process, with extra
// files as descriptors 3 and on.
func hcasimPiped(t *testing.T, extra []*os.File, args ...string) *piped {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "HCASIM_TEST_MAIN=1")
	cmd.ExtraFiles = extra
	p := &piped{cmd: cmd, lines: make(chan string, 1024), stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	go func() {
		wg.Wait() // Wait closes the pipe: read it to its end first
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	return p
}

// line returns the next line of standard output that contains want.
func (p *piped) line(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			require.True(t, ok, "standard output ended without %q; stderr %s", want, p.stderr)
			if strings.Contains(l, want) {
				return l
			}
		case <-timeout:
			t.Fatalf("no line with %q in 10 s; stderr %s", want, p.stderr)
		}
	}
}

// wait waits up to d for the child to exit and returns its status.
func (p *piped) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		if p.err == nil {
			return 0
		}
		var ee *exec.ExitError
		require.ErrorAs(t, p.err, &ee)
		return ee.ExitCode()
	case <-time.After(d):
		t.Fatalf("still running after %v; stderr %s", d, p.stderr)
		return -1
	}
}

// Every command's -h and --help, and hcasim help COMMAND, print its usage
// once, on standard output.
func TestHelpOnce(t *testing.T) {
	var cases [][]string
	for _, c := range commands {
		cases = append(cases, []string{c.name, "-h"}, []string{c.name, "--help"}, []string{"help", c.name})
	}
	cases = append(cases, []string{"perf", "write", "-h"}, []string{"perf", "read", "--size", "4096", "--help"},
		[]string{"conform", "testvectors", "-h"})
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(args...)
			name := args[0]
			if name == "help" {
				name = args[1]
			}
			assert.Equal(t, 0, code)
			assert.Empty(t, errOut)
			assert.Equal(t, 1, strings.Count(out, "usage: hcasim "+name), "stdout %q", out)
			assert.Equal(t, 1, strings.Count(out, "example: hcasim "+name), "stdout %q", out)
		})
	}
	// A bad flag prints the flag package's message and the usage once, on
	// standard error, and exits 2.
	code, out, errOut := runCLI("perf", "--bogus")
	assert.Equal(t, 2, code)
	assert.Empty(t, out)
	assert.Equal(t, 1, strings.Count(errOut, "usage: hcasim perf"), "stderr %q", errOut)
	assert.Contains(t, errOut, "flag provided but not defined: -bogus")
	code, _, errOut = runCLI("help", "teleport")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `no command "teleport"`)
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := runCLI(args...)
		require.Equal(t, 0, code, errOut)
		require.Regexp(t, `^hcasim (devel|v\S+) go\S+ \S+/\S+\n$`, out)
	}
	code, _, _ := runCLI("version", "extra")
	require.Equal(t, 2, code)
}

// perf's range errors name their flag, state the limit and exit 2.
func TestPerfLimits(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"write", "--size", "0"}, "--size 0: want 1..264241152 (252 MiB"},
		{[]string{"write", "--size", "264241153"}, "--size 264241153: want 1..264241152"},
		{[]string{"write", "--size", "1073741824"}, "--size 1073741824: want 1..264241152"},
		{[]string{"write", "--qd", "0"}, "--qd 0: want 1..3640"},
		{[]string{"write", "--qd", "4096"}, "--qd 4096: want 1..3640"},
		{[]string{"--qd", "3641", "read"}, "--qd 3641: want 1..3640"},
		{[]string{"write", "--qps", "0"}, "--qps 0: want 1..1024"},
		{[]string{"write", "--qps", "1025"}, "--qps 1025: want 1..1024"},
		{[]string{"write", "--duration", "0s"}, "--duration 0s: want a positive duration"},
		{[]string{"write", "--duration", "-1s"}, "--duration -1s: want a positive duration"},
		{[]string{"write", "--pi", "insert", "--size", "1000"}, "--size 1000 is not a multiple of the protection interval 4096 (--interval: 512, or 4096 by default)"},
		{[]string{"write", "--pi", "insert", "--size", "4096", "--interval", "1024"}, "--interval 1024: want 512 or 4096"},
		{[]string{"send", "--pi", "strip", "--size", "4096"}, "--pi strip works with write and read, not send"},
		{[]string{"write", "--pi", "sideways"}, `--pi "sideways": want none, insert, strip or pass`},
		{[]string{"write", "--role", "server"}, "--role needs --connect"},
		{[]string{"write", "--role", "sideways", "--connect", "x.sock"}, `--role "sideways": want both, server or client`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(append([]string{"perf"}, tc.args...)...)
			assert.Equal(t, 2, code)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tc.want)
			assert.Contains(t, errOut, "Run 'hcasim help perf'")
		})
	}
}

// The limits perf states are the device's: the largest --size's buffer
// registers and the next page's does not, the largest --qd's QP is
// created and the next one's is not.
func TestPerfLimitsAreTheDevice(t *testing.T) {
	dev := hca.New(hca.Options{})
	defer dev.Close()
	open := func() (*verbs.Context, error) { return verbs.Open(dev) }
	for _, tc := range []struct {
		name    string
		qd, buf int
		ok      bool
	}{
		{"max qd", perfMaxQD, 64, true},
		{"max qd + 1", perfMaxQD + 1, 64, false},
		{"max size", 1, perfBufSize(perfMaxSize), true},
		{"256 MiB", 1, 256 << 20, true},
		{"256 MiB + 1", 1, 256<<20 + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := perfSide(open, tc.qd, 1, tc.buf)
			if e != nil {
				defer e.ctx.Close()
			}
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
	require.LessOrEqual(t, perfBufSize(perfMaxSize), 256<<20)
	require.Greater(t, perfBufSize(perfMaxSize+1<<20), 256<<20, "the limit could be higher")
}

// conform: an empty file is an error, a malformed line is reported as
// FILE:LINE while the file's other lines run, and flags may follow paths.
func TestConformLines(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile("../../testvectors/public.jsonl")
	require.NoError(t, err)
	lines := strings.Split(string(good), "\n")
	write := func(name string, ls ...string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(strings.Join(ls, "\n")), 0o644))
		return p
	}
	empty := write("empty.jsonl")
	mixed := write("mixed.jsonl", lines[0], "{\"id\": 5}", lines[1], lines[0], lines[2]+"\n")
	ok := write("ok.jsonl", lines[0], lines[1]+"\n")
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		out, notIn []string
		errOut     []string
	}{
		{"empty", []string{empty}, 1, []string{"0 passed, 0 failed"}, nil,
			[]string{"no vectors in " + empty}},
		{"empty among good", []string{ok, empty}, 1, []string{"2 passed, 0 failed"}, nil,
			[]string{"no vectors in " + empty}},
		{"bad lines", []string{mixed}, 1, []string{"3 passed, 0 failed, 2 malformed"}, nil,
			[]string{"MALFORMED " + mixed + ":2: ", "MALFORMED " + mixed + ":4: id \"pub-0001\" already used on line 1", "2 malformed line(s)"}},
		{"flag after a path", []string{ok, "-v"}, 0, []string{"ok   pub-0001", "ok   pub-0002", "2 passed, 0 failed"}, nil, nil},
		{"flag between paths", []string{ok, "-v", ok}, 0, []string{"ok   pub-0001", "4 passed, 0 failed"}, nil, nil},
		{"-- ends the flags", []string{ok, "--", "-v"}, 1, nil, []string{"ok   pub-0001"}, []string{"-v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(append([]string{"conform"}, tc.args...)...)
			assert.Equal(t, tc.code, code, "stdout %q, stderr %q", out, errOut)
			for _, w := range tc.out {
				assert.Contains(t, out, w)
			}
			for _, w := range tc.notIn {
				assert.NotContains(t, out, w)
			}
			for _, w := range tc.errOut {
				assert.Contains(t, errOut, w)
			}
		})
	}
}

// serve's bad arguments are usage errors that say what is wrong.
func TestServeArgs(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("s", 120)+".sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--socket", ""}, `--socket "": give the socket's path`},
		{[]string{"--socket", long}, "over the Unix socket limit of 107 (108 with the terminating NUL)"},
		{[]string{"--socket", "x.sock", "--ready-fd", "1"}, "--ready-fd 1: want an inherited descriptor of 3 or more"},
		{[]string{"--socket", "x.sock", "--ready-fd", "999"}, "--ready-fd 999: not an open descriptor"},
		{[]string{"--socket", "x.sock", "--caps", "cx9"}, `--caps "cx9": want one of`},
		{[]string{"--socket", "x.sock", "--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"--socket", "x.sock", "--pcap", "x.pcap"}, "--pcap needs --roce"},
		{[]string{"--socket", "x.sock", "--roce", "nonsense"}, `--roce "nonsense": want ADDR or ADDR:PORT`},
		{[]string{"--socket", "x.sock", "--roce", "127.0.0.1", "--loss", "2"}, "fault rates (--loss"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, errOut := runCLI(append([]string{"serve"}, tc.args...)...)
			assert.Equal(t, 2, code)
			assert.Contains(t, errOut, tc.want)
		})
	}
	_, err := os.Stat("x.sock")
	require.True(t, os.IsNotExist(err), "a refused serve made its socket")
}

// serve signals readiness (its first line on standard output, and a
// newline on --ready-fd) once clients can connect, logs clients and
// commands at debug level, and removes its socket on SIGINT, SIGTERM and
// SIGHUP.
func TestServeReadyAndSignals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fd    bool
		level string
		sig   syscall.Signal
		extra []string
	}{
		{"stdout line, SIGHUP", false, "debug", syscall.SIGHUP, nil},
		{"stdout line first with --roce", false, "info", syscall.SIGTERM,
			[]string{"--roce", fmt.Sprintf("127.%d.%d.4", 1+rand.IntN(254), rand.IntN(256))}},
		{"ready fd, SIGTERM", true, "info", syscall.SIGTERM, nil},
		{"ready fd, SIGINT", true, "debug", syscall.SIGINT, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "d.sock")
			args := append([]string{"serve", "--socket", sock, "--log-level", tc.level, "--grace", "0s"}, tc.extra...)
			var extra []*os.File
			var r *os.File
			if tc.fd {
				var w *os.File
				var err error
				r, w, err = os.Pipe()
				require.NoError(t, err)
				defer r.Close()
				extra = []*os.File{w}
				args = append(args, "--ready-fd", "3")
				defer w.Close()
			}
			p := hcasimPiped(t, extra, args...)
			if tc.fd {
				extra[0].Close() // the child has its copy
				b := make([]byte, 2)
				r.SetReadDeadline(time.Now().Add(10 * time.Second))
				n, err := r.Read(b)
				require.NoError(t, err, "no readiness byte; stderr %s", p.stderr)
				require.Equal(t, "\n", string(b[:n]))
				// The daemon closed its end: nothing more comes.
				_, err = r.Read(b)
				require.ErrorIs(t, err, io.EOF)
			} else {
				first := p.line(t, "")
				require.True(t, strings.HasPrefix(first, "hcasim serve: listening on "+sock+" "), "first line %q", first)
			}
			// Ready means a client connects now, without waiting.
			ctx, err := verbs.Dial(sock)
			require.NoError(t, err)
			_, err = ctx.AllocPD()
			require.NoError(t, err)
			require.NoError(t, ctx.Close())

			require.NoError(t, p.cmd.Process.Signal(tc.sig))
			require.Equal(t, 0, p.wait(t, 10*time.Second), "stderr %s", p.stderr)
			_, err = os.Stat(sock)
			require.True(t, os.IsNotExist(err), "socket left behind after %v: %v", tc.sig, err)
			log := p.stderr.String()
			require.Contains(t, log, "client connected")
			if tc.level == "debug" {
				require.Regexp(t, `level=DEBUG msg=message .*type=HELLO`, log)
				require.Regexp(t, `level=DEBUG msg=command .*opcode=0x800 status=OK`, log) // ALLOC_PD
			} else {
				require.NotContains(t, log, "level=DEBUG")
			}
		})
	}
}

// perf --connect notices its daemon dying mid-run (SIGKILL: the socket
// just closes) and exits 1 at once, long before --duration ends.
func TestPerfDaemonDies(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"write", []string{"write", "--size", "4096", "--qd", "8"}},
		{"send", []string{"send", "--size", "64", "--qd", "8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "d.sock")
			daemon, _ := hcasimChild(t, "serve", "--socket", sock, "--log-level", "warn")
			waitSocket(t, sock)
			perf := hcasimPiped(t, nil, append(append([]string{"perf"}, tc.args...), "--connect", sock, "--duration", "60s")...)
			perf.line(t, "ops/s") // running
			require.NoError(t, daemon.Process.Kill())
			start := time.Now()
			require.Equal(t, 1, perf.wait(t, 5*time.Second))
			require.Less(t, time.Since(start), 5*time.Second)
			require.Contains(t, perf.stderr.String(), "the daemon at "+sock+" went away")
		})
	}
}

// perf --role server notices its daemon stopping while it waits for a
// client, exits 1 and removes its rendezvous socket.
func TestPerfServerDaemonDies(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(*exec.Cmd) error
	}{
		{"SIGKILL", func(c *exec.Cmd) error { return c.Process.Kill() }},
		{"SIGTERM", func(c *exec.Cmd) error { return c.Process.Signal(syscall.SIGTERM) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "d.sock")
			daemon, _ := hcasimChild(t, "serve", "--socket", sock, "--log-level", "warn", "--grace", "0s")
			waitSocket(t, sock)
			srv := hcasimPiped(t, nil, "perf", "--role", "server", "--connect", sock)
			srv.line(t, "waiting for a client")
			require.NoError(t, tc.stop(daemon))
			require.Equal(t, 1, srv.wait(t, 5*time.Second))
			require.Contains(t, srv.stderr.String(), "perf server: the daemon went away")
			_, err := os.Stat(sock + ".perf")
			require.True(t, os.IsNotExist(err), "rendezvous socket left behind: %v", err)
		})
	}
}

// perf --role server: a second server on the same rendezvous socket is
// refused (and the first keeps waiting, and serves), a stale socket is
// replaced, and a signal leaves no socket behind.
func TestPerfServerRendezvous(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	hcasimChild(t, "serve", "--socket", sock, "--log-level", "warn")
	waitSocket(t, sock)
	peer := sock + ".perf"

	first := hcasimPiped(t, nil, "perf", "--role", "server", "--connect", sock, "--json")
	waitFor(t, func() bool { _, err := os.Stat(peer); return err == nil })
	code, _, errOut := runCLI("perf", "--role", "server", "--connect", sock)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "another perf server is waiting at "+peer)
	code, out, errOut := runCLI("perf", "write", "--role", "client", "--connect", sock, "--duration", "100ms", "--json")
	require.Equal(t, 0, code, "client: %s %s; first server: %s", out, errOut, first.stderr)
	require.Equal(t, 0, first.wait(t, 10*time.Second), "first server: %s", first.stderr)
	_, err := os.Stat(peer)
	require.True(t, os.IsNotExist(err), "rendezvous socket left behind: %v", err)

	// A stale socket (its server gone without removing it) is replaced.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: peer, Net: "unix"})
	require.NoError(t, err)
	l.SetUnlinkOnClose(false)
	l.Close()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			srv := hcasimPiped(t, nil, "perf", "--role", "server", "--connect", sock)
			srv.line(t, "waiting for a client at "+peer)
			require.NoError(t, srv.cmd.Process.Signal(sig))
			require.Equal(t, 1, srv.wait(t, 5*time.Second))
			require.Contains(t, srv.stderr.String(), "perf server: stopped by "+sig.String())
			_, err := os.Stat(peer)
			require.True(t, os.IsNotExist(err), "rendezvous socket left behind: %v", err)
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		require.False(t, time.Now().After(deadline), "condition not met in 10 s")
	}
}

// TestPerfFill: perf's buffers hold data in every 4 KiB page (none left to
// map the shared zero page) and in their last bytes, whatever the length.
func TestPerfFill(t *testing.T) {
	for _, n := range []int{1, 7, 64, 4096, 3*4096 + 5} {
		buf := make([]byte, n)
		perfFill(buf)
		for p := 0; p < n; p += 4096 {
			assert.NotEqual(t, make([]byte, min(4096, n-p)), buf[p:min(p+4096, n)], "length %d: page at %d", n, p)
		}
		assert.NotZero(t, buf[n-1]|buf[max(n-2, 0)], "length %d: the last bytes", n)
	}
}
