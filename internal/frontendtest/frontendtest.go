// Package frontendtest has the helpers of the tests that run unmodified
// libibverbs programs on hcasim through its libibverbs.so.1 (ibverbs/):
// building the library, finding the programs, a daemon to run them
// against, and running them with the library in place.
//
// A test that needs something the machine lacks (the rdma-core headers,
// ibverbs-utils, perftest, python3-pyverbs) skips, saying what to install,
// unless HCASIM_REQUIRE_FRONTEND is set (CI sets it), in which case it
// fails.
package frontendtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/hcasim/hcasim/hca/remote/daemon"
	"github.com/hcasim/hcasim/hca/ucma"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcasim/hcasim/hca"
)

// Root returns the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Missing skips the test for a missing prerequisite, or fails it when
// HCASIM_REQUIRE_FRONTEND is set.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("HCASIM_REQUIRE_FRONTEND") != "" {
		t.Fatalf("%s (HCASIM_REQUIRE_FRONTEND is set)", msg)
	}
	t.Skip(msg)
}

var (
	libOnce sync.Once
	libDir  string
	libErr  error
)

// Sanitized reports whether the tests run on the sanitizer build of the
// front end (HCASIM_SANITIZE set: make lib-asan, bin/lib-asan).
func Sanitized() bool { return os.Getenv("HCASIM_SANITIZE") != "" }

// Lib builds hcasim's libibverbs.so.1 (make lib, or make lib-asan when
// Sanitized) once per test binary and returns its directory.
func Lib(t testing.TB) string {
	t.Helper()
	for _, h := range []string{"/usr/include/infiniband/verbs.h", "/usr/include/infiniband/mlx5dv.h"} {
		if _, err := os.Stat(h); err != nil {
			Missing(t, "%s missing: install libibverbs-dev to build hcasim's libibverbs.so.1", h)
		}
	}
	libOnce.Do(func() {
		root := Root()
		target, dir := "lib", "lib"
		if Sanitized() {
			target, dir = "lib-asan", "lib-asan"
		}
		cmd := exec.Command("make", "-s", target)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			libErr = fmt.Errorf("make %s: %v\n%s", target, err, out)
			return
		}
		libDir = filepath.Join(root, "bin", dir)
		if _, err := os.Stat(filepath.Join(libDir, "libibverbs.so.1")); err != nil {
			libErr = err
		}
	})
	if libErr != nil {
		t.Fatal(libErr)
	}
	return libDir
}

// Need returns the path of an installed program, or skips (fails under
// HCASIM_REQUIRE_FRONTEND) naming the Debian package that has it.
func Need(t testing.TB, prog, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(prog)
	if err != nil {
		Missing(t, "%s not found: install %s", prog, pkg)
	}
	return p
}

// Daemon starts an in-process hcasim daemon (as hcasim serve: ConnectX-5
// caps, 50 µs send-engine polling) on a socket in a temporary directory and
// returns the socket's path. It stops when the test ends.
func Daemon(t testing.TB) string {
	t.Helper()
	return DaemonAt(t, filepath.Join(t.TempDir(), "hcasim.sock"))
}

// DaemonAt is Daemon on the socket path sock (a restart: after
// StopDaemon of the daemon that was there).
func DaemonAt(t testing.TB, sock string) string {
	t.Helper()
	if err := startDaemon(t, sock, nil); err != nil {
		t.Fatal(err)
	}
	return sock
}

// RoCEDaemon starts a daemon as Daemon does whose port has a RoCEv2
// endpoint (as serve --roce) with the options o. It returns an error
// when the port cannot be bound (another test holds the address: try
// another).
func RoCEDaemon(t testing.TB, o hca.WireOptions) (string, error) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "hcasim.sock")
	return sock, startDaemon(t, sock, &o)
}

func startDaemon(t testing.TB, sock string, wire *hca.WireOptions) error {
	caps := hca.ConnectX5Caps
	caps.MaxMappedBytes = 64 << 30
	dev := hca.New(hca.Options{Caps: &caps, Poll: 50 * time.Microsecond})
	if wire != nil {
		if err := dev.ListenRoCE(*wire); err != nil {
			dev.Close()
			return err
		}
	}
	l, err := daemon.Listen(sock)
	if err != nil {
		dev.Close()
		return err
	}
	srv := &daemon.Server{Dev: dev}
	servers.Store(sock, srv)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Shutdown(200 * time.Millisecond)
		<-done
		dev.Close()
	})
	return nil
}

// servers are the daemons Daemon started, by socket.
var servers sync.Map

// CMUsage returns what the connection manager of the daemon of Daemon at
// sock holds.
func CMUsage(sock string) ucma.Usage {
	v, ok := servers.Load(sock)
	if !ok {
		return ucma.Usage{}
	}
	return v.(*daemon.Server).CMUsage()
}

// CMListening reports whether the daemon at sock (one of Daemon's) has an
// rdma_cm id listening on port.
func CMListening(sock string, port int) bool {
	v, ok := servers.Load(sock)
	return ok && v.(*daemon.Server).CMListening(uint16(port))
}

// StopDaemon shuts the daemon at sock (one of Daemon's) down now, as if
// it went away: its clients' connections close.
func StopDaemon(t testing.TB, sock string) {
	t.Helper()
	v, ok := servers.Load(sock)
	if !ok {
		t.Fatalf("StopDaemon needs a daemon of Daemon: %s", sock)
	}
	v.(*daemon.Server).Shutdown(0)
}

// CMPair runs an rdma_cm server program on the daemon at sock (one of
// Daemon's), waits until it listens on its CM port, then the client, and
// returns both outputs; both must succeed. With port 0 both get "-p
// PORT" of a free port; otherwise the programs use port by themselves, and
// one that first listens on a TCP port of that number counts as listening.
func CMPair(t testing.TB, timeout time.Duration, lib, sock string, port int, server, client []string) (string, string) {
	t.Helper()
	return CMPairAcross(t, timeout, lib, sock, sock, port, server, client)
}

// CMPairAcross is CMPair with the server on the daemon at srvSock and the
// client on the one at cliSock (both of Daemon or RoCEDaemon).
func CMPairAcross(t testing.TB, timeout time.Duration, lib, srvSock, cliSock string, port int, server, client []string) (string, string) {
	t.Helper()
	v, ok := servers.Load(srvSock)
	if !ok {
		t.Fatalf("CMPair needs a daemon of Daemon: %s", srvSock)
	}
	srv := v.(*daemon.Server)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tcpOK := port != 0 // a program on its own port may listen on TCP first (fi_pingpong's handshake)
	var sp, cp *Proc
	var cerr error
	for attempt := 1; ; attempt++ {
		sargs, cargs := server[1:], client[1:]
		p := port
		if port == 0 {
			p = FreePort(t)
			sargs = append(append([]string(nil), sargs...), "-p", strconv.Itoa(p))
			cargs = append(append([]string(nil), cargs...), "-p", strconv.Itoa(p))
		}
		actx, acancel := context.WithCancel(ctx)
		defer acancel()
		sp = Start(actx, t, lib, srvSock, server[0], sargs...)
		// Listening on the CM port, or (tcpOK) on a TCP port of the same number for its own handshake;
		// perftest -R listens on both, the CM port last.
		for deadline := time.Now().Add(timeout); !srv.CMListening(uint16(p)) && !(tcpOK && Listening(p)); time.Sleep(10 * time.Millisecond) {
			if sp.Exited() || time.Now().After(deadline) {
				t.Fatalf("%s did not listen on CM port %d within %v:\n%s", server[0], p, timeout, sp.Output())
			}
		}
		cp = Start(actx, t, lib, cliSock, client[0], cargs...)
		cerr = cp.Wait()
		if cerr == nil || attempt == 3 || !strings.Contains(cp.Output(), "RDMA_CM_EVENT_REJECTED; error: 8") {
			break
		}
		// perftest -R's own race: after the handshake over its first
		// connection the server opens a new event channel and only then
		// listens for the data connection, while the client connects at
		// once; a REQ that comes first is rejected with 8 (no listener),
		// as the Linux CM does, and perftest's retry then crashes. The
		// pair is started again, both sides (see docs/CONFORMANCE.md).
		t.Logf("%s: REJECTED 8, its REQ before the server's listen (perftest -R's race); attempt %d, starting the pair again:\n%s", client[0], attempt, cp.Output())
		acancel()
		_ = sp.Wait()
	}
	serr := sp.Wait()
	so, co := sp.Output(), cp.Output()
	if cerr != nil || serr != nil {
		t.Fatalf("server %v: %v, client %v: %v\nserver:\n%s\nclient:\n%s", server, serr, client, cerr, so, co)
	}
	NoUnimplemented(t, so)
	NoUnimplemented(t, co)
	return so, co
}

// Env returns the environment a program needs to use the library in lib
// and the daemon at sock.
func Env(lib, sock string) []string {
	ld := lib
	if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
		ld += ":" + old
	}
	env := append(os.Environ(), "LD_LIBRARY_PATH="+ld, "HCASIM_SOCKET="+sock, "HCASIM_QUIET=1")
	if Sanitized() {
		// The programs' own leaks are theirs, and a report anywhere ends
		// the program (SanitizerReport finds it).
		env = append(env, "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:detect_odr_violation=0",
			"UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
	}
	if pre := Preload(lib, os.Getenv("LD_PRELOAD")); pre != "" {
		env = append(env, "LD_PRELOAD="+pre)
	}
	return env
}

// Preload returns the LD_PRELOAD list a program run on lib needs, with
// extra (colon-separated libraries, may be empty) after it: the sanitizer
// runtime first when Sanitized (it must be the first library of the
// unsanitized program), then the rdma_cm device for librdmacm, as hcasim
// exec preloads it.
func Preload(lib, extra string) string {
	var pre []string
	if Sanitized() {
		pre = append(pre, "libasan.so.8")
	}
	if shim := filepath.Join(lib, "libhcasim_ucma.so"); fileExists(shim) {
		pre = append(pre, shim)
	}
	if extra != "" {
		pre = append(pre, extra)
	}
	return strings.Join(pre, ":")
}

// sanitizerMarks are the lines AddressSanitizer and
// UndefinedBehaviorSanitizer begin their reports with.
var sanitizerMarks = []string{"ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer", "UndefinedBehaviorSanitizer"}

// SanitizerReport fails the test if a program's output holds a sanitizer
// report (only the sanitizer build writes one).
func SanitizerReport(t testing.TB, name, out string) {
	t.Helper()
	for _, m := range sanitizerMarks {
		if i := strings.Index(out, m); i >= 0 {
			t.Errorf("%s: sanitizer report in the front end:\n%s", name, out[max(0, i-200):])
			return
		}
	}
}

// Proc is a program started with Start.
type Proc struct {
	Cmd  *exec.Cmd
	out  *syncBuffer   // stdout and stderr
	done chan struct{} // closed once the program has exited; then err is set
	err  error
}

type syncBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Start starts a program with the library and daemon in place; it is
// killed if still running when ctx ends or the test ends.
func Start(ctx context.Context, t testing.TB, lib, sock string, name string, args ...string) *Proc {
	t.Helper()
	p := StartOwned(ctx, t, lib, sock, name, args...)
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		p.Wait()
		SanitizerReport(t, name, p.Output())
	})
	return p
}

// StartOwned starts a program as Start does but leaves it to the caller,
// who must see it end (Wait) and check its output (SanitizerReport): the
// test keeps no record of it, for long runs of many programs (the churn
// soak). It is killed if still running when ctx ends.
func StartOwned(ctx context.Context, t testing.TB, lib, sock string, name string, args ...string) *Proc {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = Env(lib, sock)
	p := &Proc{Cmd: cmd, out: &syncBuffer{b: &bytes.Buffer{}}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p
}

// Wait waits for the program and returns its exit error.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Exited reports whether the program has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Output returns what the program wrote so far.
func (p *Proc) Output() string {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	return p.out.b.String()
}

// Run runs a program to its end with a timeout and returns its output; the
// test fails if it fails or names an unimplemented verb.
func Run(t testing.TB, timeout time.Duration, lib, sock string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p := Start(ctx, t, lib, sock, name, args...)
	err := p.Wait()
	out := p.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	NoUnimplemented(t, out)
	return out
}

// NoUnimplemented fails the test if out names an unimplemented verb.
func NoUnimplemented(t testing.TB, out string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "hcasim: unimplemented:") {
			t.Errorf("the program called a verb hcasim does not implement: %s", l)
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 nobody listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Listening reports whether some socket listens on TCP port (from
// /proc/net/tcp and tcp6, without connecting: the servers of
// rc_pingpong and perftest take the first connection as their client).
func Listening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// WaitListening waits until port listens or p exits.
func WaitListening(t testing.TB, p *Proc, port int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !Listening(port) {
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("%s did not listen on port %d within %v:\n%s", p.Cmd.Path, port, timeout, p.Output())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Pair runs a server and a client program (rc_pingpong and perftest
// style: the server listens on a TCP port, the client connects to
// 127.0.0.1) and returns both outputs. Both must succeed.
func Pair(t testing.TB, timeout time.Duration, lib, sock string, server, client []string) (string, string) {
	t.Helper()
	outs, err := Group(t, timeout, lib, sock, []string{sock}, server, client)
	if err != nil {
		t.Fatalf("server %v, client %v: %v\nserver:\n%s\nclient:\n%s", server, client, err, outs[0], outs[1])
	}
	return outs[0], outs[1]
}

// Group runs a server program on the daemon at srvSock, waits until it
// listens, then one client per entry of cliSocks, each on that daemon
// (connecting to the server at 127.0.0.1), and waits for them all. It
// returns the outputs, the server's first, and the first failure (a
// timeout says so); every output is checked for unimplemented verbs.
func Group(t testing.TB, timeout time.Duration, lib, srvSock string, cliSocks []string, server, client []string) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	port := FreePort(t)
	srv := Start(ctx, t, lib, srvSock, server[0], append(server[1:], "-p", strconv.Itoa(port))...)
	WaitListening(t, srv, port, timeout)
	clis := make([]*Proc, len(cliSocks))
	for i, sock := range cliSocks {
		clis[i] = Start(ctx, t, lib, sock, client[0], append(client[1:], "-p", strconv.Itoa(port), "127.0.0.1")...)
	}
	var first error
	outs := make([]string, 1, 1+len(clis))
	for i, c := range clis {
		if err := c.Wait(); err != nil && first == nil {
			first = fmt.Errorf("client %d: %w", i, err)
		}
		outs = append(outs, c.Output())
	}
	if err := srv.Wait(); err != nil && first == nil {
		first = fmt.Errorf("server: %w", err)
	}
	outs[0] = srv.Output()
	if first != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		first = fmt.Errorf("timed out after %v: %w", timeout, first)
	}
	for _, o := range outs {
		NoUnimplemented(t, o)
	}
	return outs, first
}

// NoUnimplementedExcept is NoUnimplemented for programs that probe
// features hcasim does not model: verbs starting with one of allowed are
// expected.
func NoUnimplementedExcept(t testing.TB, out string, allowed []string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		_, name, ok := strings.Cut(l, "hcasim: unimplemented: ")
		if !ok {
			continue
		}
		known := false
		for _, a := range allowed {
			if strings.HasPrefix(name, a) {
				known = true
			}
		}
		if !known {
			t.Errorf("the program called a verb hcasim does not implement: %s", name)
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
