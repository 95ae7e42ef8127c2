package ibverbs_test

import (
	"context"
	"debug/elf"
	"fmt"
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

	"github.com/hcasim/hcasim/internal/frontendtest"
)

// TestExports checks that the library defines every symbol version of the
// installed libibverbs, libmlx5 and libefa (what programs and pyverbs
// modules import), and nothing else but the version nodes.
func TestExports(t *testing.T) {
	lib := frontendtest.Lib(t)
	have := map[string]bool{}
	for _, s := range dynSyms(t, filepath.Join(lib, "libibverbs.so.1")) {
		have[s] = true
	}
	want := 0
	for _, l := range []string{"libibverbs.so.1", "libmlx5.so.1", "libefa.so.1"} {
		out, err := exec.Command("cc", "-print-file-name="+l).Output()
		path := strings.TrimSpace(string(out))
		if err != nil || !filepath.IsAbs(path) {
			frontendtest.Missing(t, "the installed %s not found", l)
		}
		for _, s := range dynSyms(t, path) {
			want++
			if !have[s] {
				t.Errorf("%s exports %s; hcasim's library does not", l, s)
			}
			delete(have, s)
		}
	}
	for s := range have {
		t.Errorf("hcasim's library exports %s, which no installed library does", s)
	}
	if want < 300 {
		t.Errorf("only %d versioned symbols in the installed libraries", want)
	}
}

// dynSyms returns a library's defined, versioned functions and objects as
// name@version.
func dynSyms(t *testing.T, path string) []string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range syms {
		typ := elf.ST_TYPE(s.Info)
		if s.Section == elf.SHN_UNDEF || s.Section == elf.SHN_ABS || (typ != elf.STT_FUNC && typ != elf.STT_OBJECT) || s.Version == "" {
			continue
		}
		out = append(out, s.Name+"@"+s.Version)
	}
	return out
}

func TestDevices(t *testing.T) {
	lib := frontendtest.Lib(t)
	frontendtest.Need(t, "ibv_devinfo", "ibverbs-utils")
	sock := frontendtest.Daemon(t)
	out := frontendtest.Run(t, 20*time.Second, lib, sock, "ibv_devices")
	if !regexp.MustCompile(`hcasim0\s+0002c903`).MatchString(out) {
		t.Errorf("ibv_devices does not list hcasim0:\n%s", out)
	}
	out = frontendtest.Run(t, 20*time.Second, lib, sock, "ibv_devinfo", "-v")
	for _, want := range []string{"hca_id:\thcasim0", "vendor_id:\t\t\t0x02c9", "vendor_part_id:\t\t\t4119",
		"PORT_ACTIVE (4)", "link_layer:\t\tEthernet", "port_lid:\t\t0", "GID[  0]:\t\tfe80:",
		"GID[  3]:\t\t::ffff:127.0.0.1, RoCE v2"} {
		if !strings.Contains(out, want) {
			t.Errorf("ibv_devinfo -v lacks %q:\n%s", want, out)
		}
	}
	// No daemon: an empty device list, as without hardware.
	out = frontendtest.Run(t, 20*time.Second, lib, filepath.Join(t.TempDir(), "none.sock"), "ibv_devices")
	if strings.Contains(out, "hcasim0") {
		t.Errorf("ibv_devices without a daemon lists a device:\n%s", out)
	}
}

// wantIters checks that each of a pingpong pair's outputs reports its n
// iterations ("n iters in"); it reports whether all did.
func wantIters(t *testing.T, n int, outs ...string) bool {
	t.Helper()
	ok := true
	for _, o := range outs {
		if !strings.Contains(o, fmt.Sprintf("%d iters in", n)) {
			t.Errorf("no iteration report:\n%s", o)
			ok = false
		}
	}
	return ok
}

func TestRCPingpong(t *testing.T) {
	lib := frontendtest.Lib(t)
	pp := frontendtest.Need(t, "ibv_rc_pingpong", "ibverbs-utils")
	sock := frontendtest.Daemon(t)
	// -g 1: the RoCE v2 entry of the link-local GID (the last -g counts).
	for _, opts := range [][]string{nil, {"-e"}, {"-N"}, {"-c"}, {"-s", "65536"}, {"-e", "-N", "-c", "-s", "8192"}, {"-g", "1"}} {
		t.Run(strings.Join(append([]string{"opts"}, opts...), " "), func(t *testing.T) {
			args := append([]string{pp, "-d", "hcasim0", "-g", "3", "-n", "200"}, opts...)
			so, co := frontendtest.Pair(t, 60*time.Second, lib, sock, args, args)
			wantIters(t, 200, so, co)
		})
	}
}

// TestSRQPingpong: ibv_srq_pingpong's QPs (4 and 16 per side) take their
// receives from one SRQ per side, the data verified by the program (-c).
func TestSRQPingpong(t *testing.T) {
	lib := frontendtest.Lib(t)
	pp := frontendtest.Need(t, "ibv_srq_pingpong", "ibverbs-utils")
	sock := frontendtest.Daemon(t)
	for _, opts := range [][]string{{"-q", "4"}, {"-q", "16", "-c", "-s", "8192"}, {"-q", "4", "-e"}} {
		t.Run(strings.Join(opts, " "), func(t *testing.T) {
			args := append([]string{pp, "-d", "hcasim0", "-g", "3", "-n", "200"}, opts...)
			so, co := frontendtest.Pair(t, 60*time.Second, lib, sock, args, args)
			wantIters(t, 200, so, co)
		})
	}
}

// wantSuccess checks that every output of ibv_xsrq_pingpong (which
// prints no figures) reports its success.
func wantSuccess(t *testing.T, outs ...string) {
	t.Helper()
	for _, o := range outs {
		if !strings.Contains(o, "success") {
			t.Errorf("no success report:\n%s", o)
		}
	}
}

// TestXSRQPingpong: ibv_xsrq_pingpong's XRC QPs (an initiator and a
// target per client, a domain opened on a file, one XRC SRQ and CQ per
// process): the server serves three clients at once, their SENDs naming
// its SRQ, its answers theirs.
func TestXSRQPingpong(t *testing.T) {
	lib := frontendtest.Lib(t)
	pp := frontendtest.Need(t, "ibv_xsrq_pingpong", "ibverbs-utils")
	sock := frontendtest.Daemon(t)
	for _, opts := range [][]string{{"-n", "100"}, {"-n", "50", "-e"}, {"-n", "50", "-s", "8192", "-m", "1024"}} {
		t.Run(strings.Join(opts, " "), func(t *testing.T) {
			args := append([]string{pp, "-d", "hcasim0", "-g", "3"}, opts...)
			srv := append(append([]string{}, args...), "-c", "3")
			outs, err := frontendtest.Group(t, 60*time.Second, lib, sock, []string{sock, sock, sock}, srv, args)
			if err != nil {
				t.Fatalf("%v\n%s", err, strings.Join(outs, "\n----\n"))
			}
			wantSuccess(t, outs...)
		})
	}
}

// TestUCPingpong: ibv_uc_pingpong's UC QPs (created without the RC-only
// attributes, which the front end refuses for UC) exchange their SENDs.
func TestUCPingpong(t *testing.T) {
	lib := frontendtest.Lib(t)
	pp := frontendtest.Need(t, "ibv_uc_pingpong", "ibverbs-utils")
	sock := frontendtest.Daemon(t)
	args := []string{pp, "-d", "hcasim0", "-g", "3", "-n", "200"}
	so, co := frontendtest.Pair(t, 60*time.Second, lib, sock, args, args)
	wantIters(t, 200, so, co)
}

// TestUDPingpong: ibv_ud_pingpong's UD QPs, addressed by an AH to GID 3,
// exchange their SENDs (each receive buffer headed by the GRH).
func TestUDPingpong(t *testing.T) {
	lib := frontendtest.Lib(t)
	pp := frontendtest.Need(t, "ibv_ud_pingpong", "ibverbs-utils")
	sock := frontendtest.Daemon(t)
	for _, opts := range [][]string{nil, {"-s", "4096"}, {"-e"}} {
		t.Run(strings.Join(append([]string{"opts"}, opts...), " "), func(t *testing.T) {
			args := append([]string{pp, "-d", "hcasim0", "-g", "3", "-n", "200"}, opts...)
			so, co := frontendtest.Pair(t, 60*time.Second, lib, sock, args, args)
			wantIters(t, 200, so, co)
		})
	}
}

func TestPerftest(t *testing.T) {
	lib := frontendtest.Lib(t)
	sock := frontendtest.Daemon(t)
	for _, c := range []struct {
		prog string
		args []string
	}{
		{"ib_write_bw", []string{"-s", "65536", "-n", "500"}},
		{"ib_write_bw", []string{"-a", "-n", "50"}},
		{"ib_write_lat", []string{"-s", "64", "-n", "200"}},
		{"ib_read_bw", []string{"-n", "200"}},
		{"ib_read_lat", []string{"-n", "200"}},
		{"ib_send_bw", []string{"-n", "200"}},
		{"ib_send_lat", []string{"-n", "200"}},
		{"ib_atomic_bw", []string{"-n", "200"}},
		{"ib_write_bw", []string{"-c", "UC", "-n", "200"}},
		{"ib_send_bw", []string{"-c", "UC", "-n", "200"}},
		{"ib_send_bw", []string{"-c", "UD", "-n", "500"}},
		{"ib_send_lat", []string{"-c", "UD", "-n", "200"}},
	} {
		t.Run(c.prog+" "+strings.Join(c.args, " "), func(t *testing.T) {
			p := frontendtest.Need(t, c.prog, "perftest")
			args := append([]string{p, "-d", "hcasim0"}, c.args...)
			_, co := frontendtest.Pair(t, 120*time.Second, lib, sock, args, args)
			if !strings.Contains(co, "#bytes") {
				t.Errorf("no results table:\n%s", co)
			}
			if strings.Contains(c.prog, "_bw") && strings.Contains(strings.Join(c.args, " "), "-a") {
				for _, size := range []string{" 2 ", " 4096 ", " 8388608 "} {
					if !strings.Contains(co, "\n"+size) {
						t.Errorf("-a: no line for size%s:\n%s", size, co)
					}
				}
			}
		})
	}
}

// TestKilledPeer kills the passive side of an ib_write_bw with SIGKILL
// mid-transfer: the daemon keeps serving and the active side's QP goes to
// error (its WRITEs to a QP that is gone exhaust their retries), as on
// hardware.
func TestKilledPeer(t *testing.T) {
	lib := frontendtest.Lib(t)
	bw := frontendtest.Need(t, "ib_write_bw", "perftest")
	sock := frontendtest.Daemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	port := frontendtest.FreePort(t)
	args := []string{"-d", "hcasim0", "-s", "4096", "-n", "100000000", "-p", strconv.Itoa(port)}
	srv := frontendtest.Start(ctx, t, lib, sock, bw, args...)
	frontendtest.WaitListening(t, srv, port, 20*time.Second)
	cli := frontendtest.Start(ctx, t, lib, sock, bw, append(args, "127.0.0.1")...)
	// perftest's output is block-buffered into the pipe: give it time to
	// connect and move data rather than waiting for a line.
	time.Sleep(1500 * time.Millisecond)
	srv.Cmd.Process.Signal(syscall.SIGKILL)
	srv.Wait()
	killed := time.Now()
	err := cli.Wait()
	out := cli.Output()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("the client did not fail after its peer died (%v):\n%s", err, out)
	}
	if !strings.Contains(out, "Completion with error") {
		t.Errorf("the client did not see an error completion:\n%s", out)
	}
	t.Logf("the client saw the error %v after the kill", time.Since(killed).Round(time.Millisecond))
	// The daemon still serves.
	frontendtest.Run(t, 20*time.Second, lib, sock, "ibv_devices")
	args2 := []string{bw, "-d", "hcasim0", "-n", "50"}
	frontendtest.Pair(t, 60*time.Second, lib, sock, args2, args2)
}

// TestRdmaCM: rdmacm-utils' programs, unmodified, over the real librdmacm
// and hcasim's rdma_cm device (libhcasim_ucma.so and the daemon's CM):
// rping (RC: SEND/RECV, RDMA READ and WRITE, verified with -V), ucmatose
// (several connections on one channel), udaddy (UD over SIDR, with the
// AH from the event) and rdma_server/rdma_client (the rdma_verbs.h
// helpers), rsockets (rstream, riostream), perftest -R, fio's rdma engine and libfabric's verbs provider
// (fi_pingpong), each side a process of its own on one daemon.
func TestRdmaCM(t *testing.T) {
	lib := frontendtest.Lib(t)
	sock := frontendtest.Daemon(t)
	for _, c := range []struct {
		name, pkg      string
		port           int // 0: a free one, given with -p
		server, client []string
		want           string
	}{
		{"rping", "rdmacm-utils", 0, []string{"-s", "-a", "127.0.0.1", "-C", "20", "-V"}, []string{"-c", "-a", "127.0.0.1", "-C", "20", "-V"}, ""},
		{"rping", "rdmacm-utils", 0, []string{"-s", "-a", "127.0.0.1", "-C", "5", "-S", "4096", "-V"}, []string{"-c", "-a", "127.0.0.1", "-C", "5", "-S", "4096", "-V"}, ""},
		{"ucmatose", "rdmacm-utils", 0, []string{"-c", "4", "-C", "20"}, []string{"-s", "127.0.0.1", "-c", "4", "-C", "20"}, "test complete"},
		{"udaddy", "rdmacm-utils", 7174, []string{"-c", "2"}, []string{"-s", "127.0.0.1", "-c", "2"}, "test complete"},
		{"rdma_server", "rdmacm-utils", 0, nil, nil, "end 0"},
		{"ib_write_bw", "perftest", 0, []string{"-R", "-n", "200"}, []string{"-R", "-n", "200", "127.0.0.1"}, "BW average"},
		// rsockets (librdmacm's rsocket over rdma_cm): stream and iomap.
		{"rstream", "rdmacm-utils", 0, []string{"-S", "4096", "-C", "200"}, []string{"-s", "127.0.0.1", "-S", "4096", "-C", "200"}, "4k"},
		{"riostream", "rdmacm-utils", 0, []string{"-S", "65536", "-C", "50"}, []string{"-s", "127.0.0.1", "-S", "65536", "-C", "50"}, "64k"},
		// libfabric's verbs provider (FI_EP_MSG over rdma_cm), on fi_pingpong's own port.
		{"fi_pingpong", "libfabric-bin", 47592, []string{"-p", "verbs", "-e", "msg", "-I", "100"}, []string{"-p", "verbs", "-e", "msg", "-I", "100", "127.0.0.1"}, "1m "},
		// fio's rdma engine: the reader is its server, the writer its client.
		{"fio", "fio", 7199, []string{"--name=srv", "--ioengine=rdma", "--hostname=127.0.0.1", "--port=7199", "--bs=64k", "--size=16m", "--rw=read", "--verb=write"},
			[]string{"--name=cli", "--ioengine=rdma", "--hostname=127.0.0.1", "--port=7199", "--bs=64k", "--size=16m", "--rw=write", "--verb=write"}, "err= 0"},
		{"fio", "fio", 7198, []string{"--name=srv", "--ioengine=rdma", "--hostname=127.0.0.1", "--port=7198", "--bs=16k", "--size=8m", "--rw=read", "--verb=read", "--iodepth=4"},
			[]string{"--name=cli", "--ioengine=rdma", "--hostname=127.0.0.1", "--port=7198", "--bs=16k", "--size=8m", "--rw=write", "--verb=read", "--iodepth=4"}, "err= 0"},
		{"ib_send_lat", "perftest", 0, []string{"-R", "-n", "200"}, []string{"-R", "-n", "200", "127.0.0.1"}, "t_typical"},
		{"ib_read_bw", "perftest", 0, []string{"-R", "-n", "200", "-s", "65536"}, []string{"-R", "-n", "200", "-s", "65536", "127.0.0.1"}, "BW average"},
	} {
		t.Run(strings.Join(append([]string{c.name}, c.client...), " "), func(t *testing.T) {
			prog := frontendtest.Need(t, c.name, c.pkg)
			cli, cargs := prog, c.client
			if c.name == "rdma_server" {
				cli, cargs = frontendtest.Need(t, "rdma_client", c.pkg), []string{"-s", "127.0.0.1"}
			}
			so, co := frontendtest.CMPair(t, 60*time.Second, lib, sock, c.port, append([]string{prog}, c.server...), append([]string{cli}, cargs...))
			if c.want != "" && (!strings.Contains(so, c.want) || !strings.Contains(co, c.want)) {
				t.Errorf("no %q:\nserver:\n%s\nclient:\n%s", c.want, so, co)
			}
		})
	}
}

// TestRdmaCMDeviceRemoval: when the daemon goes away, a listening rping
// gets RDMA_CM_EVENT_DEVICE_REMOVAL for its id, as on a device removed
// under it, and ends by itself.
func TestRdmaCMDeviceRemoval(t *testing.T) {
	lib := frontendtest.Lib(t)
	rping := frontendtest.Need(t, "rping", "rdmacm-utils")
	sock := frontendtest.Daemon(t)
	port := frontendtest.FreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := frontendtest.Start(ctx, t, lib, sock, rping, "-s", "-a", "127.0.0.1", "-p", strconv.Itoa(port))
	for deadline := time.Now().Add(20 * time.Second); !frontendtest.CMListening(sock, port); time.Sleep(10 * time.Millisecond) {
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("rping did not listen:\n%s", p.Output())
		}
	}
	frontendtest.StopDaemon(t, sock)
	p.Wait()
	if ctx.Err() != nil {
		t.Fatalf("rping did not end after the daemon went away:\n%s", p.Output())
	}
	if !strings.Contains(p.Output(), "device removal") {
		t.Errorf("no device removal reported:\n%s", p.Output())
	}
}

// TestRsPreload: librdmacm's librspreload.so, preloaded after hcasim's
// rdma_cm shim, turns a program's plain TCP sockets into rsockets over
// hcasim (rstream -T s: its socket path), on one daemon and across two.
func TestRsPreload(t *testing.T) {
	lib := frontendtest.Lib(t)
	rstream := frontendtest.Need(t, "rstream", "rdmacm-utils")
	rs := "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"
	if _, err := os.Stat(rs); err != nil {
		frontendtest.Missing(t, "%s missing: install librdmacm1", rs)
	}
	pre := "LD_PRELOAD=" + frontendtest.Preload(lib, rs)
	run := func(t *testing.T, srvSock, cliSock, addr string) {
		so, co := frontendtest.CMPairAcross(t, 60*time.Second, lib, srvSock, cliSock, 0,
			[]string{"/usr/bin/env", pre, rstream, "-T", "s", "-S", "4096", "-C", "100", "-b", addr},
			[]string{"/usr/bin/env", pre, rstream, "-T", "s", "-S", "4096", "-C", "100", "-s", addr})
		for _, o := range []string{so, co} {
			require.Contains(t, o, "4k", "rstream's result line")
		}
	}
	t.Run("one daemon", func(t *testing.T) {
		sock := frontendtest.Daemon(t)
		run(t, sock, sock, "127.0.0.1")
	})
	t.Run("across", func(t *testing.T) {
		sa, sb, ip := cmRoCEPair(t, nil)
		run(t, sa, sb, ip)
	})
}

// TestUCX: UCX (ucx-utils) finds hcasim0 as an IB memory domain with its
// rc_verbs and ud_verbs transports, ucx_perftest's UCT tests run over
// rc_verbs — PUT latency (inline writes) and zero-copy PUT bandwidth on
// one daemon, PUT bandwidth across two RoCE daemons — and its UCP tag
// tests over ud_verbs alone, on one daemon and across two.
func TestUCX(t *testing.T) {
	lib := frontendtest.Lib(t)
	info := frontendtest.Need(t, "ucx_info", "ucx-utils")
	perf := frontendtest.Need(t, "ucx_perftest", "ucx-utils")
	sock := frontendtest.Daemon(t)
	out := frontendtest.Run(t, 60*time.Second, lib, sock, info, "-d")
	for _, want := range []string{"Memory domain: hcasim0", "Transport: rc_verbs", "Transport: ud_verbs", "Device: hcasim0:1"} {
		require.Contains(t, out, want, "ucx_info -d")
	}
	final := regexp.MustCompile(`(?m)^Final:\s+(\d+)\s`)
	check := func(t *testing.T, out string, n int) {
		m := final.FindStringSubmatch(out)
		require.NotNil(t, m, "no Final line:\n%s", out)
		require.Equal(t, strconv.Itoa(n), m[1], "iterations")
	}
	for _, args := range [][]string{
		{"-t", "put_lat", "-x", "rc_verbs", "-d", "hcasim0:1", "-n", "200", "-s", "8"},
		{"-t", "put_bw", "-x", "rc_verbs", "-d", "hcasim0:1", "-D", "zcopy", "-n", "200", "-s", "65536"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			_, co := frontendtest.Pair(t, 90*time.Second, lib, sock, []string{perf}, append([]string{perf}, args...))
			check(t, co, 200)
		})
	}
	t.Run("across", func(t *testing.T) {
		sa, sb, _ := cmRoCEPair(t, nil)
		outs, err := frontendtest.Group(t, 90*time.Second, lib, sa, []string{sb}, []string{perf},
			[]string{perf, "-t", "put_bw", "-x", "rc_verbs", "-d", "hcasim0:1", "-D", "zcopy", "-n", "500", "-s", "65536"})
		require.NoError(t, err, "server:\n%s\nclient:\n%s", outs[0], outs[len(outs)-1])
		check(t, outs[1], 500)
	})
	// UCP over ud_verbs alone: UCX picks the RoCE v2 GID from sysfs's
	// gid_attrs/types, tells IPv4 from GRH headers by the completion's
	// SL (the RoCE packet type) and drops datagrams whose destination
	// GID is not its own, so all three must be as on a ConnectX.
	t.Run("tag_lat ud_verbs", func(t *testing.T) {
		t.Setenv("UCX_TLS", "ud_verbs")
		_, co := frontendtest.Pair(t, 90*time.Second, lib, sock, []string{perf}, []string{perf, "-t", "tag_lat", "-n", "500"})
		check(t, co, 500)
	})
	t.Run("tag_bw ud_verbs across", func(t *testing.T) {
		t.Setenv("UCX_TLS", "ud_verbs")
		sa, sb, _ := cmRoCEPair(t, nil)
		outs, err := frontendtest.Group(t, 90*time.Second, lib, sa, []string{sb}, []string{perf},
			[]string{perf, "-t", "tag_bw", "-n", "500", "-s", "16384"})
		require.NoError(t, err, "server:\n%s\nclient:\n%s", outs[0], outs[len(outs)-1])
		check(t, outs[1], 500)
	})
}
