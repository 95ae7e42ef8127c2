package ibverbs_test

import (
	"bytes"
	"context"
	"fmt"
	"github.com/hcasim/hcasim/internal/tooltest"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/internal/frontendtest"
)

// hcasimBinary builds cmd/hcasim (the daemon and the counters command)
// into a directory of the test's and returns its path.
func hcasimBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hcasim")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/hcasim")
	cmd.Dir = frontendtest.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/hcasim: %v\n%s", err, out)
	}
	return bin
}

// roceDaemon is an `hcasim serve --roce` in its own process.
type roceDaemon struct {
	bin      string // the hcasim binary
	sock, ip string
	cmd      *exec.Cmd
	out      *bytes.Buffer // its log (written by the process: read after it exits)
	exited   chan struct{}
}

// startRoCEPair starts two daemons, A on 127.X.Y.2 and B on 127.X.Y.3
// (random X.Y, so that tests running at the same time do not share
// addresses; RoCEv2's UDP port 4791 on each), and returns them once both
// serve. They are stopped (SIGTERM, then SIGKILL) when the test ends.
func startRoCEPair(t *testing.T, extraA ...string) (a, b *roceDaemon) {
	t.Helper()
	bin := hcasimBinary(t)
	var errs []string
	for try := 0; try < 4; try++ {
		x, y := 1+rand.IntN(254), rand.IntN(256)
		dir := t.TempDir()
		a = startRoCE(t, bin, filepath.Join(dir, "a.sock"), fmt.Sprintf("127.%d.%d.2", x, y), 2, extraA...)
		b = startRoCE(t, bin, filepath.Join(dir, "b.sock"), fmt.Sprintf("127.%d.%d.3", x, y), 3)
		okA, okB := a.waitServing(15*time.Second), b.waitServing(15*time.Second)
		if okA && okB {
			return a, b
		}
		// Most likely another test holds one of the addresses: new ones.
		for _, d := range []*roceDaemon{a, b} {
			d.stop()
			errs = append(errs, fmt.Sprintf("%s (%s): %s", d.ip, d.sock, d.out.String()))
		}
	}
	t.Fatalf("no pair of daemons would start:\n%s", strings.Join(errs, "\n"))
	return nil, nil
}

func startRoCE(t *testing.T, bin, sock, ip string, lid int, extra ...string) *roceDaemon {
	t.Helper()
	d := &roceDaemon{bin: bin, sock: sock, ip: ip, out: &bytes.Buffer{}, exited: make(chan struct{})}
	d.cmd = exec.Command(bin, append([]string{"serve", "--socket", sock, "--roce", ip, "--lid", strconv.Itoa(lid)}, extra...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start hcasim serve: %v", err)
	}
	go func() {
		d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(d.stop)
	return d
}

// waitServing waits until the daemon's socket exists; false if it exited
// or the time ran out.
func (d *roceDaemon) waitServing(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			return false
		default:
		}
		if fi, err := os.Stat(d.sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func (d *roceDaemon) stop() {
	select {
	case <-d.exited:
		return
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(5 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
	}
}

var counterLine = regexp.MustCompile(`(?m)^\s*(\w+)\s+(\d+)\s*$`)

// counters runs `hcasim counters --socket` on d and returns its counters.
func (d *roceDaemon) counters(t *testing.T) map[string]uint64 {
	t.Helper()
	out, err := exec.Command(d.bin, "counters", "--socket", d.sock).CombinedOutput()
	if err != nil {
		t.Fatalf("hcasim counters --socket %s: %v\n%s", d.sock, err, out)
	}
	m := map[string]uint64{}
	for _, f := range counterLine.FindAllStringSubmatch(string(out), -1) {
		v, _ := strconv.ParseUint(f[2], 10, 64)
		m[f[1]] = v
	}
	return m
}

// pairAcross runs a server program on daemon a and its client on daemon b
// (they exchange their QPs' addresses over TCP on 127.0.0.1, as
// frontendtest.Pair) and returns both outputs; both must succeed.
func pairAcross(t *testing.T, timeout time.Duration, lib string, a, b *roceDaemon, args []string) (string, string) {
	t.Helper()
	outs, err := frontendtest.Group(t, timeout, lib, a.sock, []string{b.sock}, args, args)
	if err != nil {
		t.Fatalf("%v: %v\nserver on A:\n%s\nclient on B:\n%s\ncounters A %v\ncounters B %v",
			args, err, outs[0], outs[1], a.counters(t), b.counters(t))
	}
	return outs[0], outs[1]
}

// TestGIDNoWire: a daemon without --roce keeps the fe80:: GID (of type
// IB), and ibv_query_qp reads back the path MTU and route set at RTR
// (c/test/gid.c).
func TestGIDNoWire(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "gid.c"), "-libverbs")
	sock := frontendtest.Daemon(t)
	runChecks(t, lib, sock, bin, 12, "none")
}

// TestRoCE runs unmodified programs across two daemons joined by the wire
// (hcasim serve --roce): the GID table holds each port's RoCEv2 GID, and
// ibv_rc_pingpong -g 3 and perftest -x 3 with the server on daemon A and
// the client on daemon B connect their QPs by GID, so every packet goes
// over UDP between the daemons (their port counters show it).
func TestRoCE(t *testing.T) {
	lib := frontendtest.Lib(t)
	pp := frontendtest.Need(t, "ibv_rc_pingpong", "ibverbs-utils")
	bw := frontendtest.Need(t, "ib_write_bw", "perftest")
	gid := buildC(t, filepath.Join("c", "test", "gid.c"), "-libverbs")
	a, b := startRoCEPair(t)

	t.Run("gid", func(t *testing.T) {
		runChecks(t, lib, a.sock, gid, 14, a.ip, b.ip)
		if rx := a.counters(t)["rx_packets"]; rx != 0 {
			t.Errorf("QPs connected to the port's own GID used the wire: A's rx_packets %d", rx)
		}
	})

	// wire checks that both daemons took more packets from the wire than
	// before f.
	wire := func(t *testing.T, f func()) {
		t.Helper()
		rxA, rxB := a.counters(t)["rx_packets"], b.counters(t)["rx_packets"]
		f()
		ca, cb := a.counters(t), b.counters(t)
		// UD and UC bandwidth runs send one way only: from the client on
		// B to the server on A, with nothing coming back.
		oneWay := strings.Contains(t.Name(), "_-c_UD") || strings.Contains(t.Name(), "_-c_UC")
		if ca["rx_packets"] <= rxA || cb["rx_packets"] <= rxB && !oneWay {
			t.Errorf("the traffic did not go over the wire: rx_packets A %d -> %d, B %d -> %d\nA %v\nB %v",
				rxA, ca["rx_packets"], rxB, cb["rx_packets"], ca, cb)
		}
		t.Logf("A %v", ca)
	}

	for _, opts := range [][]string{nil, {"-e", "-s", "65536", "-m", "2048"}} {
		t.Run(strings.Join(append([]string{"ibv_rc_pingpong -g 3"}, opts...), " "), func(t *testing.T) {
			args := append([]string{pp, "-d", "hcasim0", "-g", "3", "-n", "200"}, opts...)
			wire(t, func() {
				so, co := pairAcross(t, 60*time.Second, lib, a, b, args)
				wantIters(t, 200, so, co)
				// Each side names the other's GID.
				if !strings.Contains(so, "GID ::ffff:"+b.ip) || !strings.Contains(co, "GID ::ffff:"+a.ip) {
					t.Errorf("the sides did not exchange their RoCE GIDs:\nserver:\n%s\nclient:\n%s", so, co)
				}
			})
		})
	}

	t.Run("ibv_uc_pingpong -g 3", func(t *testing.T) {
		up := frontendtest.Need(t, "ibv_uc_pingpong", "ibverbs-utils")
		wire(t, func() {
			so, co := pairAcross(t, 60*time.Second, lib, a, b, []string{up, "-d", "hcasim0", "-g", "3", "-n", "200"})
			wantIters(t, 200, so, co)
		})
	})

	t.Run("ibv_ud_pingpong -g 3", func(t *testing.T) {
		up := frontendtest.Need(t, "ibv_ud_pingpong", "ibverbs-utils")
		wire(t, func() {
			so, co := pairAcross(t, 60*time.Second, lib, a, b, []string{up, "-d", "hcasim0", "-g", "3", "-n", "200"})
			wantIters(t, 200, so, co)
		})
	})

	t.Run("ibv_xsrq_pingpong -g 3", func(t *testing.T) {
		xp := frontendtest.Need(t, "ibv_xsrq_pingpong", "ibverbs-utils")
		wire(t, func() {
			args := []string{xp, "-d", "hcasim0", "-g", "3", "-n", "100", "-s", "4096", "-m", "1024"}
			outs, err := frontendtest.Group(t, 60*time.Second, lib, a.sock, []string{b.sock, b.sock},
				append(append([]string{}, args...), "-c", "2"), args)
			if err != nil {
				t.Fatalf("%v\n%s\ncounters A %v\ncounters B %v", err, strings.Join(outs, "\n----\n"), a.counters(t), b.counters(t))
			}
			wantSuccess(t, outs...)
		})
	})

	t.Run("ibv_srq_pingpong -q 4 -g 3", func(t *testing.T) {
		sp := frontendtest.Need(t, "ibv_srq_pingpong", "ibverbs-utils")
		wire(t, func() {
			so, co := pairAcross(t, 60*time.Second, lib, a, b, []string{sp, "-d", "hcasim0", "-g", "3", "-q", "4", "-n", "200", "-c"})
			wantIters(t, 200, so, co)
		})
	})

	for _, c := range []struct {
		prog string
		args []string
	}{
		{"ib_write_bw", []string{"-s", "65536", "-n", "500"}},
		{"ib_read_bw", []string{"-s", "65536", "-n", "200"}},
		{"ib_send_bw", []string{"-n", "200"}},
		{"ib_write_lat", []string{"-s", "64", "-n", "200"}},
		{"ib_atomic_bw", []string{"-n", "200"}},
		{"ib_send_bw", []string{"-c", "UD", "-n", "500"}},
		{"ib_send_lat", []string{"-c", "UD", "-n", "200"}},
		{"ib_write_bw", []string{"-c", "UC", "-n", "200"}},
	} {
		t.Run(c.prog+" -x 3 "+strings.Join(c.args, " "), func(t *testing.T) {
			p := bw
			if c.prog != "ib_write_bw" {
				p = frontendtest.Need(t, c.prog, "perftest")
			}
			args := append([]string{p, "-d", "hcasim0", "-x", "3"}, c.args...)
			wire(t, func() {
				_, co := pairAcross(t, 120*time.Second, lib, a, b, args)
				if !strings.Contains(co, "#bytes") {
					t.Errorf("no results table:\n%s", co)
				}
			})
		})
	}
}

// tsharkRead runs tshark on pcap with args and returns what it prints.
func tsharkRead(t *testing.T, tshark, pcap string, args ...string) string {
	t.Helper()
	cmd := exec.Command(tshark, append([]string{"-r", pcap}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr // tshark's warnings (running as root) go here
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// TestRoCEXRCCapture: ibv_xsrq_pingpong across two daemons, daemon A
// capturing its port. Every frame is of XRC's opcodes (0xA0–0xB7, which
// tshark names but does not dissect further); every request's first four
// header bytes after the BTH are the XRCETH, naming the SRQ the peer
// printed as its own; scapy confirms every ICRC.
func TestRoCEXRCCapture(t *testing.T) {
	lib := frontendtest.Lib(t)
	xp := frontendtest.Need(t, "ibv_xsrq_pingpong", "ibverbs-utils")
	tshark := tooltest.Need(t, "tshark", "tshark")
	py := tooltest.Need(t, "/usr/bin/python3", "python3-scapy")
	pcap := filepath.Join(t.TempDir(), "a.pcap")
	a, b := startRoCEPair(t, "--pcap", pcap)
	so, co := pairAcross(t, 60*time.Second, lib, a, b, []string{xp, "-d", "hcasim0", "-g", "3", "-n", "20", "-s", "2000", "-m", "1024"})
	wantSuccess(t, so, co)
	a.stop()
	b.stop()
	// The SRQ numbers each side printed: "local: ... SRQN 000001".
	srqn := regexp.MustCompile(`local: .* SRQN ([0-9a-f]{6})`)
	var srqns []string
	for _, o := range []string{so, co} {
		m := srqn.FindStringSubmatch(o)
		if m == nil {
			t.Fatalf("no SRQ number in the output:\n%s", o)
		}
		srqns = append(srqns, "00"+m[1])
	}
	lines := strings.Fields(tsharkRead(t, tshark, pcap, "-T", "fields", "-E", "separator=;", "-e", "ip.dst",
		"-e", "infiniband.bth.opcode", "-e", "infiniband.vendor"))
	requests := 0
	for _, l := range lines {
		f := strings.Split(l, ";")
		if len(f) != 3 {
			t.Fatalf("tshark line %q", l)
		}
		op, err := strconv.Atoi(f[1])
		if err != nil || op < 0xA0 || op > 0xB7 {
			t.Errorf("frame %q: opcode %s, not XRC's", l, f[1])
			continue
		}
		if op >= 0xAD && op <= 0xB2 {
			continue // READ responses and ACKs: no XRCETH
		}
		requests++
		want := srqns[1] // A's requests go to the client's SRQ on B
		if f[0] == a.ip {
			want = srqns[0] // B's, to the server's SRQ on A
		}
		if !strings.HasPrefix(f[2], want) {
			t.Errorf("request frame %q: XRCETH %.8s, want SRQ %s", l, f[2], want)
		}
	}
	if requests < 80 { // 20 messages of two packets each way, at least
		t.Errorf("%d XRC request frames, want at least 80", requests)
	}
	if bad := strings.TrimSpace(tsharkRead(t, tshark, pcap, "-Y", "_ws.malformed || (udp.dstport == 4791 && !infiniband)")); bad != "" {
		t.Errorf("malformed or undecoded frames:\n%s", bad)
	}
	out, err := exec.Command(py, filepath.Join("..", "roce", "testdata", "icrc_check.py"), pcap).CombinedOutput()
	if err != nil {
		t.Fatalf("icrc_check.py: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "ok "); n != len(lines) || strings.Contains(string(out), "bad") {
		t.Errorf("scapy's ICRC check: %d of %d frames ok\n%s", n, len(lines), out)
	}
}

// TestRoCEUDCapture: ibv_ud_pingpong across two daemons, daemon A
// capturing its port: every UD datagram is a UD SEND ONLY packet whose
// DETH carries the program's Q_Key (0x11111111) and its source QP, as
// tshark's InfiniBand dissector reads them, with nothing malformed.
func TestRoCEUDCapture(t *testing.T) {
	lib := frontendtest.Lib(t)
	up := frontendtest.Need(t, "ibv_ud_pingpong", "ibverbs-utils")
	tshark := tooltest.Need(t, "tshark", "tshark")
	pcap := filepath.Join(t.TempDir(), "a.pcap")
	a, b := startRoCEPair(t, "--pcap", pcap)
	so, co := pairAcross(t, 60*time.Second, lib, a, b, []string{up, "-d", "hcasim0", "-g", "3", "-n", "20"})
	if !wantIters(t, 20, so, co) {
		t.FailNow()
	}
	a.stop() // the daemon flushes its capture as it exits
	b.stop()
	run := func(args ...string) string { return tsharkRead(t, tshark, pcap, args...) }
	lines := strings.Fields(run("-Y", "infiniband.bth.opcode == 0x64", "-T", "fields", "-E", "separator=;",
		"-e", "infiniband.deth.q_key", "-e", "infiniband.deth.srcqp", "-e", "infiniband.bth.destqp"))
	// A sends and receives 20 or more (ibv_ud_pingpong posts receives
	// ahead and may send one more than it counts).
	if len(lines) < 40 {
		t.Fatalf("%d UD SEND ONLY frames in A's capture, want at least 40:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		f := strings.Split(l, ";")
		if len(f) != 3 {
			t.Fatalf("tshark line %q", l)
		}
		qkey, err1 := strconv.ParseUint(f[0], 0, 64)
		src, err2 := strconv.ParseUint(f[1], 0, 32)
		if err1 != nil || err2 != nil || qkey != 0x11111111 || src == 0 {
			t.Errorf("UD frame %q: Q_Key %#x (want 0x11111111), source QP %#x", l, qkey, src)
		}
	}
	if bad := strings.TrimSpace(run("-Y", "_ws.malformed || (udp.dstport == 4791 && !infiniband)")); bad != "" {
		t.Errorf("malformed or undecoded frames:\n%s", bad)
	}
}

// cmRoCEPair starts two in-process daemons (frontendtest.RoCEDaemon) with
// RoCEv2 ports on 127.X.Y.2 (A, capturing to pcapA if it is not nil) and
// 127.X.Y.3 (B), and returns their sockets and A's address.
func cmRoCEPair(t *testing.T, pcapA io.Writer) (a, b, ipA string) {
	t.Helper()
	var errs []error
	for range 8 {
		x, y := 1+rand.IntN(254), rand.IntN(256)
		ipA = fmt.Sprintf("127.%d.%d.2", x, y)
		sa, err := frontendtest.RoCEDaemon(t, hca.WireOptions{Addr: netip.MustParseAddrPort(ipA + ":4791"), Pcap: pcapA})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sb, err := frontendtest.RoCEDaemon(t, hca.WireOptions{Addr: netip.MustParseAddrPort(fmt.Sprintf("127.%d.%d.3:4791", x, y))})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return sa, sb, ipA
	}
	t.Fatalf("no pair of RoCE daemons would start: %v", errs)
	return
}

// TestRdmaCMAcross: the rdma_cm programs of TestRdmaCM with the server on
// daemon A and the client on daemon B: the connection is made by the two
// daemons' CMs with CM MADs on the wire, and the data crosses it.
func TestRdmaCMAcross(t *testing.T) {
	lib := frontendtest.Lib(t)
	sa, sb, ip := cmRoCEPair(t, nil)
	for _, c := range []struct {
		name, pkg      string
		port           int // 0: a free one, given with -p
		server, client []string
		want           string
	}{
		{"rping", "rdmacm-utils", 0, []string{"-s", "-a", ip, "-C", "100", "-V"}, []string{"-c", "-a", ip, "-C", "100", "-V"}, ""},
		{"ucmatose", "rdmacm-utils", 0, []string{"-c", "4", "-C", "20"}, []string{"-s", ip, "-c", "4", "-C", "20"}, "test complete"},
		{"udaddy", "rdmacm-utils", 7174, []string{"-c", "2"}, []string{"-s", ip, "-c", "2"}, "test complete"},
		{"rdma_server", "rdmacm-utils", 0, nil, nil, "end 0"},
		{"ib_write_bw", "perftest", 0, []string{"-R", "-n", "200"}, []string{"-R", "-n", "200", ip}, "BW average"},
		{"ib_send_lat", "perftest", 0, []string{"-R", "-n", "200"}, []string{"-R", "-n", "200", ip}, "t_typical"},
		{"rstream", "rdmacm-utils", 0, []string{"-S", "4096", "-C", "200"}, []string{"-s", ip, "-S", "4096", "-C", "200"}, "4k"},
		{"riostream", "rdmacm-utils", 0, []string{"-S", "65536", "-C", "50"}, []string{"-s", ip, "-S", "65536", "-C", "50"}, "64k"},
		// Not fi_pingpong: its server tells the client the address of the only
		// interface the verbs provider finds, lo's 127.0.0.1, which on daemon B
		// is B itself (TestRdmaCM runs it on one daemon).
		{"fio", "fio", 7197, []string{"--name=srv", "--ioengine=rdma", "--hostname=" + ip, "--port=7197", "--bs=64k", "--size=8m", "--rw=read", "--verb=write"},
			[]string{"--name=cli", "--ioengine=rdma", "--hostname=" + ip, "--port=7197", "--bs=64k", "--size=8m", "--rw=write", "--verb=write"}, "err= 0"},
		{"fio", "fio", 7196, []string{"--name=srv", "--ioengine=rdma", "--hostname=" + ip, "--port=7196", "--bs=16k", "--size=4m", "--rw=read", "--verb=read", "--iodepth=4"},
			[]string{"--name=cli", "--ioengine=rdma", "--hostname=" + ip, "--port=7196", "--bs=16k", "--size=4m", "--rw=write", "--verb=read", "--iodepth=4"}, "err= 0"},
	} {
		t.Run(strings.Join(append([]string{c.name}, c.client...), " "), func(t *testing.T) {
			prog := frontendtest.Need(t, c.name, c.pkg)
			cli, cargs := prog, c.client
			if c.name == "rdma_server" {
				cli, cargs = frontendtest.Need(t, "rdma_client", c.pkg), []string{"-s", ip}
			}
			so, co := frontendtest.CMPairAcross(t, 90*time.Second, lib, sa, sb, c.port, append([]string{prog}, c.server...), append([]string{cli}, cargs...))
			if c.want != "" && (!strings.Contains(so, c.want) || !strings.Contains(co, c.want)) {
				t.Errorf("no %q:\nserver:\n%s\nclient:\n%s", c.want, so, co)
			}
		})
	}
}

// TestRdmaCMCapture: rping and udaddy across two daemons, daemon A
// capturing its port: tshark's InfiniBand dissector decodes the CM's
// MADs on QP1 — REQ, REP, RTU, DREQ and DREP for rping's RC connection,
// SIDR_REQ and SIDR_REP for udaddy's UD one — each a CM Send MAD, with
// no malformed or undecoded frame.
func TestRdmaCMCapture(t *testing.T) {
	lib := frontendtest.Lib(t)
	rping := frontendtest.Need(t, "rping", "rdmacm-utils")
	udaddy := frontendtest.Need(t, "udaddy", "rdmacm-utils")
	tshark := tooltest.Need(t, "tshark", "tshark")
	pcap := filepath.Join(t.TempDir(), "a.pcap")
	f, err := os.Create(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sa, sb, ip := cmRoCEPair(t, f)
	frontendtest.CMPairAcross(t, 60*time.Second, lib, sa, sb, 0, []string{rping, "-s", "-a", ip, "-C", "10", "-V"}, []string{rping, "-c", "-a", ip, "-C", "10", "-V"})
	frontendtest.CMPairAcross(t, 60*time.Second, lib, sa, sb, 7174, []string{udaddy, "-c", "1"}, []string{udaddy, "-s", ip, "-c", "1"})
	out := tsharkRead(t, tshark, pcap, "-Y", "infiniband.mad", "-T", "fields", "-E", "separator=;",
		"-e", "infiniband.mad.mgmtclass", "-e", "infiniband.mad.method", "-e", "infiniband.mad.attributeid")
	seen := map[string]int{}
	for _, l := range strings.Fields(out) {
		f := strings.Split(l, ";")
		if len(f) != 3 || f[0] != "0x07" || f[1] != "0x03" {
			t.Errorf("MAD %q: want the CM class (0x07), method Send (0x03)", l)
			continue
		}
		seen[f[2]]++
	}
	for attr, name := range map[string]string{"0x0010": "REQ", "0x0013": "REP", "0x0014": "RTU", "0x0015": "DREQ",
		"0x0016": "DREP", "0x0017": "SIDR_REQ", "0x0018": "SIDR_REP"} {
		if seen[attr] == 0 {
			t.Errorf("no %s (attribute %s) in the capture; seen %v", name, attr, seen)
		}
	}
	if bad := strings.TrimSpace(tsharkRead(t, tshark, pcap, "-Y", "_ws.malformed || (udp.dstport == 4791 && !infiniband)")); bad != "" {
		t.Errorf("malformed or undecoded frames:\n%s", bad)
	}
}

// TestRdmaCMAcrossPeerGone: an rping connection across two daemons whose
// server's daemon goes away mid-run: the server is told DEVICE_REMOVAL,
// and the client on the other daemon, whose peer no longer answers,
// sees its QP fail (retries exceeded) and ends by itself — no hang.
func TestRdmaCMAcrossPeerGone(t *testing.T) {
	lib := frontendtest.Lib(t)
	rping := frontendtest.Need(t, "rping", "rdmacm-utils")
	sa, sb, ip := cmRoCEPair(t, nil)
	port := strconv.Itoa(frontendtest.FreePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := frontendtest.Start(ctx, t, lib, sa, rping, "-s", "-a", ip, "-p", port, "-C", "100000000")
	for deadline := time.Now().Add(20 * time.Second); !frontendtest.CMListening(sa, mustAtoi(t, port)); time.Sleep(10 * time.Millisecond) {
		if srv.Exited() || time.Now().After(deadline) {
			t.Fatalf("rping did not listen:\n%s", srv.Output())
		}
	}
	cli := frontendtest.Start(ctx, t, lib, sb, rping, "-c", "-a", ip, "-p", port, "-C", "100000000")
	time.Sleep(500 * time.Millisecond) // pinging
	require.False(t, cli.Exited(), "the client ended early:\n%s", cli.Output())
	frontendtest.StopDaemon(t, sa)
	srv.Wait()
	cerr := cli.Wait()
	if ctx.Err() != nil {
		t.Fatalf("a program did not end after the server's daemon went away:\nserver:\n%s\nclient:\n%s", srv.Output(), cli.Output())
	}
	require.Contains(t, srv.Output(), "device removal", "the server is told")
	// The daemon closed its ids as it went: the client heard their DREQ.
	require.NoError(t, cerr)
	require.Contains(t, cli.Output(), "DISCONNECT EVENT", "the client is told")
}

// TestRdmaCMAcrossPeerKilled: as TestRdmaCMAcrossPeerGone, but the
// server's daemon (an hcasim serve process) is killed with SIGKILL: no
// DREQ comes, and the client of ib_write_bw -R --run_infinitely, which
// always has WRITEs in flight, sees them fail (retries exceeded, status
// 12) and ends by itself. (A program that only waits to receive would
// wait for ever, as on a ConnectX whose peer lost power.)
func TestRdmaCMAcrossPeerKilled(t *testing.T) {
	lib := frontendtest.Lib(t)
	bw := frontendtest.Need(t, "ib_write_bw", "perftest")
	a, b := startRoCEPair(t)
	port := strconv.Itoa(frontendtest.FreePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	srv := frontendtest.Start(ctx, t, lib, a.sock, bw, "-R", "--run_infinitely", "-p", port)
	var cli *frontendtest.Proc
	for try := 0; ; try++ { // until the server listens (its daemon is another process: no CMListening)
		cli = frontendtest.Start(ctx, t, lib, b.sock, bw, "-R", "--run_infinitely", "-p", port, a.ip)
		time.Sleep(2 * time.Second)
		if !cli.Exited() {
			break
		}
		require.Less(t, try, 20, "the client never connected:\nserver:\n%s\nclient:\n%s", srv.Output(), cli.Output())
	}
	require.NoError(t, a.cmd.Process.Kill())
	<-a.exited
	cerr := cli.Wait()
	require.NoError(t, ctx.Err(), "the client did not end after the server's daemon was killed:\n%s", cli.Output())
	require.Error(t, cerr, "the client fails:\n%s", cli.Output())
	require.Contains(t, cli.Output(), "Failed status 12", "retries exceeded")
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
