package ibverbs_test

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/internal/frontendtest"
)

// buildC compiles a C program against the installed rdma-core headers and
// libraries (as any program is built), to run on hcasim's.
func buildC(t *testing.T, src string, libs ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".c"))
	args := append([]string{"-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-o", bin, src}, libs...)
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", src, err, out)
	}
	return bin
}

// runChecks runs a program (with args) that prints "ok NAME" / "FAIL NAME:
// why" lines and fails the test on each FAIL, or if fewer than min checks
// passed.
func runChecks(t *testing.T, lib, sock, bin string, min int, args ...string) {
	t.Helper()
	out := frontendtest.Run(t, 60*time.Second, lib, sock, bin, args...)
	if n := countChecks(t, out); n < min {
		t.Errorf("only %d checks passed:\n%s", n, out)
	}
}

// countChecks fails the test on each "FAIL" line of a check program's
// output and returns how many "ok" lines it has.
func countChecks(t *testing.T, out string) int {
	t.Helper()
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ok ") {
			n++
		} else if strings.HasPrefix(l, "FAIL") {
			t.Error(l)
		}
	}
	return n
}

// TestBadUse builds c/test/baduse.c against the installed libibverbs and
// runs it on hcasim: bad arguments get the errno, NULL or error completion
// libibverbs gives on hardware, and registered memory behaves as
// docs/CONFORMANCE.md says (malloc, stack, unaligned, overlapping, fork).
// The daemon keeps serving afterwards.
func TestBadUse(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "baduse.c"), "-libverbs")
	sock := frontendtest.Daemon(t)
	runChecks(t, lib, sock, bin, 40)
	frontendtest.Run(t, 20*time.Second, lib, sock, "ibv_devices")
}

// TestLifetimes: threads posting to one QP, a poll inside a wr_start
// batch, destroy against events handed out and unread, event waits ended
// by signals and non-blocking fds, and fork with registered memory the
// program unmapped, replaced or made read-only (c/test/lifetimes.c).
func TestLifetimes(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "lifetimes.c"), "-libverbs", "-lpthread")
	runChecks(t, lib, frontendtest.Daemon(t), bin, 17)
}

// TestDVBadUse: bad use of mlx5dv's mkey API (c/test/dvbaduse.c) gets
// what rdma-core's mlx5 provider gives.
func TestDVBadUse(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "dvbaduse.c"), "-libverbs", "-lmlx5")
	runChecks(t, lib, frontendtest.Daemon(t), bin, 18)
}

// TestNVMeoFTargetExample builds and runs examples/nvmeof_target.c, the
// README's example for C users: PI inserted by an RDMA READ through a
// BLOCK_SIGNATURE mkey, checked and stripped by an RDMA WRITE, a corrupted
// block reported by mlx5dv_mkey_check.
func TestNVMeoFTargetExample(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("..", "examples", "nvmeof_target.c"), "-libverbs", "-lmlx5")
	out := frontendtest.Run(t, 60*time.Second, lib, frontendtest.Daemon(t), bin)
	if strings.Contains(out, "FAIL") || !strings.Contains(out, "nvmeof_target: all checks passed") {
		t.Fatalf("the example failed:\n%s", out)
	}
}

// TestCallers: the entry points librdmacm, UCX and libfabric call before
// the common verbs (sysfs, fork, GUID, ECE; c/test/callers.c) answer as
// rdma-core 44 documents, bad arguments included; and the programs that
// once died of SIGSEGV in ibv_get_sysfs_path (librdmacm's
// rdma_create_event_channel) end by themselves, killed by no signal.
func TestCallers(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "callers.c"), "-libverbs")
	sock := frontendtest.Daemon(t)
	runChecks(t, lib, sock, bin, 14)
	for _, c := range []struct {
		prog, pkg string
		args      []string
	}{
		{"fi_info", "libfabric-bin", []string{"-p", "verbs"}},
		{"ucx_info", "ucx-utils", []string{"-d"}},
		{"ib_write_bw", "perftest", []string{"-R", "-p", strconv.Itoa(frontendtest.FreePort(t)), "127.0.0.1"}}, // no server: rejected
		{"rping", "rdmacm-utils", []string{"-c", "-a", "127.0.0.1", "-C", "1"}},
	} {
		frontendtest.Need(t, c.prog, c.pkg)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		p := frontendtest.Start(ctx, t, lib, sock, c.prog, c.args...)
		err := p.Wait()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Errorf("%s %v did not end within 30 s:\n%s", c.prog, c.args, p.Output())
			continue
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Errorf("%s %v killed by %v:\n%s", c.prog, c.args, ws.Signal(), p.Output())
			}
		}
	}
}

// TestSRQVerbs: the SRQ verbs answer as mlx5 does (c/test/srq.c): sizes,
// errno of bad arguments and a full SRQ, the limit event, a QP on an SRQ,
// last WQE reached.
func TestSRQVerbs(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "srq.c"), "-libverbs")
	runChecks(t, lib, frontendtest.Daemon(t), bin, 25)
}

// TestResizeCQ: ibv_resize_cq keeps the completions a CQ holds, in order,
// across growing and shrinking (c/test/resize.c).
func TestResizeCQ(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "resize.c"), "-libverbs")
	runChecks(t, lib, frontendtest.Daemon(t), bin, 10)
}

// TestUCVerbs: UC QPs refuse RC's attributes, send ops and signature
// offload the way mlx5 and the kernel do, a READ or an atomic posted to one
// completes with a local QP operation error, and WRITE_WITH_IMM and SEND
// work (c/test/uc.c).
func TestUCVerbs(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "uc.c"), "-libverbs", "-lmlx5")
	runChecks(t, lib, frontendtest.Daemon(t), bin, 18)
}

// TestUDVerbs: UD QPs through the front end (c/test/ud.c) — the state
// machine with its Q_Key, SEND and SEND with immediate carrying the GRH
// and src_qp, the Q_Key rules, short buffers and the MTU, an AH made from
// a completion, the GRH and SL (the RoCE packet type) of datagrams sent
// from RoCE v2 and v1 GIDs, the GID types in sysfs, and
// ibv_wr_set_ud_addr.
func TestUDVerbs(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "ud.c"), "-libverbs")
	runChecks(t, lib, frontendtest.Daemon(t), bin, 25)
}

// TestUcmaBadUse: the rdma_cm device (c/test/ucmabad.c) answers what no
// librdmacm writes — short, oversized and unknown commands, NULL and wild
// pointers, ids of nobody — with the kernel's errno, never a crash, and
// polls readable exactly while an event waits.
func TestUcmaBadUse(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "ucmabad.c"), "-lpthread")
	runChecks(t, lib, frontendtest.Daemon(t), bin, 20)
}

// TestRawVerbs: raw packet QPs and flow steering through the front end
// (c/test/raw.c) — the raw state machine, frames posted in SGEs (the
// inline header split across them), inline and with ibv_wr_send, the
// frames a flow takes and those it does not, EBUSY for a QP with a flow,
// and the specs, opcodes and flags mlx5 refuses.
func TestRawVerbs(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "raw.c"), "-libverbs")
	runChecks(t, lib, frontendtest.Daemon(t), bin, 40)
}

// TestMWVerbs: memory windows through the front end (c/test/mw.c) — type 1
// and type 2 binds, access through a window's rkey within its range and
// rights, unbinding, LOCAL_INV and SEND_WITH_INV of a type 2 window, the
// QP a type 2 window is bound to, IBV_WC_MW_BIND_ERR for a rebind.
func TestMWVerbs(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "mw.c"), "-libverbs")
	runChecks(t, lib, frontendtest.Daemon(t), bin, 22)
}

// TestXRCVerbs: XRC through the front end (c/test/xrc.c) — domains and
// the kernel's open rules, XRC SRQs and their CQ, initiator to target
// traffic into the SRQ each message names, the SRQ's PD at the target,
// REM_INV_REQ_ERR for an SRQ of another domain, the queues XRC QPs lack,
// XRC's modify masks, ibv_open_qp, and the refusals while in use.
func TestXRCVerbs(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "xrc.c"), "-libverbs")
	runChecks(t, lib, frontendtest.Daemon(t), bin, 35, filepath.Join(t.TempDir(), "xrc_domain"))
}

// TestDaemonRestart: a program whose daemon goes away (stopped, then a new
// one started on the same socket, as a restart does) gets
// IBV_EVENT_DEVICE_FATAL on its async fd and an error from every verb
// that needs the device, while its destroys succeed — a ConnectX reset
// as a program sees it (c/test/restart.c); a program started afterwards
// uses the new daemon.
func TestDaemonRestart(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := buildC(t, filepath.Join("c", "test", "restart.c"), "-libverbs")
	sock := frontendtest.Daemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := frontendtest.Start(ctx, t, lib, sock, bin)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.Output(), "ready\n"); time.Sleep(10 * time.Millisecond) {
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("restart.c did not get ready:\n%s", p.Output())
		}
	}
	frontendtest.StopDaemon(t, sock)
	again := frontendtest.DaemonAt(t, sock)
	err := p.Wait()
	require.NoError(t, ctx.Err(), "the program hung:\n%s", p.Output())
	n := countChecks(t, p.Output())
	require.NoError(t, err, p.Output())
	require.GreaterOrEqual(t, n, 14, p.Output())
	frontendtest.Run(t, 20*time.Second, lib, again, "ibv_devinfo")
}

// TestAllSymbols calls every function the front end exports (each name and
// version of its dynamic symbol table, compat versions included) with every
// argument NULL, then with every argument a zeroed object the library never
// made (c/test/allsyms.c): each fails as documented or succeeds, and none
// crashes its program or hangs. Before that, the verbs refuse destroyed and
// fake objects with EINVAL.
func TestAllSymbols(t *testing.T) {
	lib := frontendtest.Lib(t)
	f, err := elf.Open(filepath.Join(lib, "libibverbs.so.1"))
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	var list strings.Builder
	n := 0
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Version == "" {
			continue
		}
		fmt.Fprintf(&list, "%s %s\n", s.Name, s.Version)
		n++
	}
	require.Greater(t, n, 300, "the export table")
	file := filepath.Join(t.TempDir(), "symbols")
	require.NoError(t, os.WriteFile(file, []byte(list.String()), 0o644))
	bin := buildC(t, filepath.Join("c", "test", "allsyms.c"), "-libverbs", "-ldl")
	const stale = 15 // the checks of destroyed and fake objects before the calls
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := frontendtest.Start(ctx, t, lib, frontendtest.Daemon(t), bin, file)
	err = p.Wait()
	ok := countChecks(t, p.Output())
	if err != nil || ok != n+stale {
		t.Errorf("%d of %d checks passed (exit %v)", ok, n+stale, err)
	}
}
