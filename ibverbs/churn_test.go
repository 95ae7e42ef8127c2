package ibverbs_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/hca/ucma"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/internal/frontendtest"
)

var (
	churnFor   = flag.Duration("churn", 12*time.Second, "TestChurn: how long to churn (scripts/churn.sh: --duration)")
	churnQuiet = flag.Duration("churn.settle", time.Minute, "TestChurn: how often to stop, let every pair end and check the daemon is back at its baseline")
)

// A churn pair: a server and a client program, and how to tell the server
// listens.
type churnKind struct {
	name   string
	cm     bool // the server listens on a CM port (else on TCP, perftest's handshake)
	argv   func(port int, peer string) (server, client []string)
	verify bool  // the pair checks the data it moved
	count  int64 // the operations a run does, when its output does not say
}

// churnEnv is where a churn runs: servers on one daemon, clients on
// another (the same for one daemon), servers' address.
type churnEnv struct {
	srv, cli, addr string
	across         bool
}

func churnKinds(t *testing.T, bin string, e churnEnv) []churnKind {
	rping := frontendtest.Need(t, "rping", "rdmacm-utils")
	perftest := map[string]string{}
	for _, p := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw"} {
		perftest[p] = frontendtest.Need(t, p, "perftest")
	}
	// rping -V: the server READs the client's buffer and WRITEs it back,
	// the client checks every byte, over SENDs: all three. Across a lossy
	// wire each lost packet costs a retransmission timeout: fewer rounds.
	rounds := int64(300)
	if e.across {
		rounds = 40
	}
	n := strconv.FormatInt(rounds, 10)
	kinds := []churnKind{{
		name: "rping -V", cm: true, verify: true, count: rounds,
		argv: func(port int, _ string) ([]string, []string) {
			p := strconv.Itoa(port)
			return []string{rping, "-s", "-a", e.addr, "-p", p, "-V", "-C", n, "-S", "4096"},
				[]string{rping, "-c", "-a", e.addr, "-p", p, "-V", "-C", n, "-S", "4096"}
		},
	}}
	for _, p := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw"} {
		prog := perftest[p]
		kinds = append(kinds, churnKind{name: p, argv: func(port int, _ string) ([]string, []string) {
			// A count, not -D: in duration mode perftest refuses to report
			// ("Correlation coefficient r^2 < 0.9") when a loaded machine
			// makes its timing samples noisy, and exits 1.
			iters := "3000"
			if e.across {
				iters = "1000" // a lossy wire's retransmission timeouts make each slower
			}
			a := []string{prog, "-d", "hcasim0", "-s", "4096", "-n", iters, "-p", strconv.Itoa(port)}
			if e.across {
				a = append(a, "-x", "3") // the IPv4-mapped RoCE v2 GID
			}
			return a, append(append([]string(nil), a...), "127.0.0.1") // the TCP handshake
		}})
	}
	for _, op := range []string{"write", "read", "send"} {
		op := op
		kinds = append(kinds, churnKind{name: "hcasim perf " + op, argv: func(_ int, peer string) ([]string, []string) {
			a := []string{bin, "perf", op, "--size", "4096", "--qd", "8", "--duration", "2s", "--peer", peer}
			return append(append([]string(nil), a...), "--connect", e.srv, "--role", "server"),
				append(append([]string(nil), a...), "--connect", e.cli, "--role", "client")
		}})
	}
	return kinds
}

// churnStats are a churn run's figures.
type churnStats struct {
	mu                   sync.Mutex
	runs, killed         int   // pairs that ran to their end, and that lost a side to a kill
	ops                  int64 // operations the pairs that ran to their end report
	verified             int64 // of them, checked byte for byte (rping -V)
	failed               []string
	hung                 []string
	survivorMax          time.Duration // the longest a survivor took to end after its peer's kill
	settles, settleFails int
	noReport             int // perftest pairs that could not measure the CPU's clock on the loaded machine
}

// TestChurn runs 8 pairs of client processes on one daemon — rping -V
// (verifying its READ, WRITE and SEND data), perftest's write/read/send
// bw (the C front end) and `hcasim perf --role` (the Go client) — each
// restarted when it ends, and every second kills one process of a running
// pair at random with SIGKILL. A pair that was not hit must end cleanly (0
// lost, 0 corrupted); the survivor of a kill must end by itself within
// 30 s (its QP goes to error: retry exceeded, a flush, the CM's
// disconnect, or its TCP handshake socket closing), never hang; the
// daemon must keep serving; and at every settle point (every
// -churn.settle, and at the end) with no pair running it must be back at
// its baseline: one function (the query's), no PD, CQ, QP, SRQ, mkey or
// mapping, its fds, memfd mappings and RSS as before. -churn sets the
// duration (scripts/churn.sh runs it for 10 minutes).
func TestChurn(t *testing.T) {
	lib := frontendtest.Lib(t)
	bin := filepath.Join(frontendtest.Root(), "bin", "hcasim")
	if _, err := os.Stat(bin); err != nil {
		frontendtest.Missing(t, "%s missing: make build", bin)
	}
	t.Run("one daemon", func(t *testing.T) {
		sock := frontendtest.Daemon(t)
		churn(t, lib, bin, churnEnv{srv: sock, cli: sock, addr: "127.0.0.1"})
	})
	t.Run("two RoCE daemons, loss and reorder 1%", func(t *testing.T) {
		faults := hca.Faults{Loss: 0.01, Reorder: 0.01}
		var errs []error
		for range 8 {
			x, y := 1+rand.IntN(254), rand.IntN(256)
			ipA := fmt.Sprintf("127.%d.%d.2", x, y)
			sa, err := frontendtest.RoCEDaemon(t, hca.WireOptions{Addr: netip.MustParseAddrPort(ipA + ":4791"), Faults: faults})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			sb, err := frontendtest.RoCEDaemon(t, hca.WireOptions{Addr: netip.MustParseAddrPort(fmt.Sprintf("127.%d.%d.3:4791", x, y)), Faults: faults})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			churn(t, lib, bin, churnEnv{srv: sa, cli: sb, addr: ipA, across: true})
			return
		}
		t.Fatalf("no pair of RoCE daemons would start: %v", errs)
	})
}

func churn(t *testing.T, lib, bin string, e churnEnv) {
	kinds := churnKinds(t, bin, e)
	base := daemonFootprint(t, e)
	t.Logf("churn: baseline %s", base)

	st := &churnStats{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type pair struct {
		p     [2]*frontendtest.Proc
		since time.Time
	}
	var (
		mu      sync.Mutex
		running = map[int]pair{} // slot → its pair while both run
		kills   = map[*frontendtest.Proc]bool{}
		stop    bool
		wg      sync.WaitGroup
	)
	const slots = 8
	start := time.Now()
	end := start.Add(*churnFor)
	nextSettle := start.Add(*churnQuiet)
	var gate sync.RWMutex // held for writing while the daemon settles
	for s := 0; s < slots; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			for n := 0; ; n++ {
				gate.RLock()
				mu.Lock()
				done := stop
				mu.Unlock()
				if done {
					gate.RUnlock()
					return
				}
				k := kinds[(s+n*slots)%len(kinds)]
				churnRun(ctx, t, lib, e, k, s, st, func(sp, cp *frontendtest.Proc) {
					mu.Lock()
					running[s] = pair{[2]*frontendtest.Proc{sp, cp}, time.Now()}
					mu.Unlock()
				}, func() {
					mu.Lock()
					delete(running, s)
					mu.Unlock()
				}, func(p *frontendtest.Proc) bool {
					mu.Lock()
					defer mu.Unlock()
					return kills[p]
				}, func(ps ...*frontendtest.Proc) {
					mu.Lock()
					for _, p := range ps {
						delete(kills, p)
					}
					mu.Unlock()
				})
				gate.RUnlock()
			}
		}(s)
	}
	for now := time.Now(); now.Before(end); now = time.Now() {
		time.Sleep(time.Second)
		if time.Now().After(nextSettle) && time.Until(end) > 10*time.Second {
			gate.Lock() // the slots finish their runs and wait
			churnSettle(t, e, base, st)
			gate.Unlock()
			nextSettle = time.Now().Add(*churnQuiet)
			continue
		}
		mu.Lock()
		// A pair is hit once it has had a second to connect: a server
		// whose client dies before it connected waits for another, as it
		// should.
		var live [][2]*frontendtest.Proc
		for _, pr := range running {
			if time.Since(pr.since) > time.Second {
				live = append(live, pr.p)
			}
		}
		if len(live) > 0 {
			pr := live[rand.IntN(len(live))]
			p := pr[rand.IntN(2)]
			kills[p] = true
			p.Cmd.Process.Signal(syscall.SIGKILL)
		}
		mu.Unlock()
	}
	mu.Lock()
	stop = true
	mu.Unlock()
	wg.Wait()
	churnSettle(t, e, base, st)
	st.mu.Lock()
	defer st.mu.Unlock()
	t.Logf("churn: %v, %d slots: %d pairs ran to their end (%d operations, %d verified byte for byte), %d lost a side to SIGKILL; "+
		"lost 0 and corrupted 0 unless listed: %d failed, %d still waiting after 30 s; survivors ended at most %v after the kill; "+
		"%d settle points, %d not at baseline; %d perftest pairs could not time the CPU's clock (no report)",
		time.Since(start).Round(time.Second), slots, st.runs, st.ops, st.verified, st.killed, len(st.failed), len(st.hung),
		st.survivorMax.Round(time.Millisecond), st.settles, st.settleFails, st.noReport)
	for _, f := range st.failed {
		t.Errorf("churn: a pair no kill touched failed: %s", f)
	}
	for _, h := range st.hung {
		if e.across {
			// The CM sends a destroyed id's DREQ once (as the kernel
			// does, cancelling its retries): on a lossy wire the peer
			// may never hear of it, and a survivor with no work
			// outstanding waits, as it would on a ConnectX. Counted,
			// not failed.
			t.Logf("churn: a survivor was still waiting 30 s after its peer's kill (its DREQ or last packets lost?): %s", h)
			continue
		}
		t.Errorf("churn: a survivor did not end within 30 s of its peer's kill: %s", h)
	}
	require.Positive(t, st.runs, "no pair ran to its end")
	require.Positive(t, st.killed, "no kill landed")
}

// churnRun runs one pair of kind k to its end. started is called once
// both sides run, ended when they have ended; killed says whether a
// process was killed by the churn.
func churnRun(ctx context.Context, t *testing.T, lib string, e churnEnv, k churnKind, slot int, st *churnStats,
	started func(sp, cp *frontendtest.Proc), ended func(), killed func(*frontendtest.Proc) bool, forget func(...*frontendtest.Proc)) {
	port := frontendtest.FreePort(t)
	peer := filepath.Join(t.TempDir(), "perf.sock")
	sargs, cargs := k.argv(port, peer)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	// Owned: churnRun sees both end; the test keeps no record of the
	// thousands of programs a soak runs.
	sp := frontendtest.StartOwned(rctx, t, lib, e.srv, sargs[0], sargs[1:]...)
	ready := func() bool {
		switch {
		case k.cm:
			return frontendtest.CMListening(e.srv, port)
		case strings.Contains(k.name, "perf"):
			_, err := os.Stat(peer)
			return err == nil
		default:
			return frontendtest.Listening(port)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); !ready(); time.Sleep(5 * time.Millisecond) {
		if sp.Exited() || time.Now().After(deadline) {
			sp.Cmd.Process.Kill()
			sp.Wait()
			frontendtest.SanitizerReport(t, sargs[0], sp.Output())
			st.note(&st.failed, fmt.Sprintf("%s: the server did not come up:\n%s", k.name, sp.Output()))
			return
		}
	}
	cp := frontendtest.StartOwned(rctx, t, lib, e.cli, cargs[0], cargs[1:]...)
	started(sp, cp)
	// Wait for the first to end; if a kill ended it, the other has 30 s.
	first := make(chan *frontendtest.Proc, 2)
	go func() { sp.Wait(); first <- sp }()
	go func() { cp.Wait(); first <- cp }()
	a := <-first
	other := cp
	if a == cp {
		other = sp
	}
	var hitAt time.Time
	if killed(a) {
		hitAt = time.Now()
	}
	waited := false
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		// Still running 30 s after its peer was killed, or after its
		// peer ended on its own: across a lossy wire an rdma_cm side
		// whose peer's DREQ was lost (the CM sends it once when the id
		// is destroyed) waits, as on a ConnectX; anywhere else a hang.
		if killed(a) || (e.across && k.cm) {
			waited = true
			st.note(&st.hung, fmt.Sprintf("%s (slot %d), %s still running 30 s after its peer ended (killed: %v):\n%s",
				k.name, slot, other.Cmd.Args[0], killed(a), other.Output()))
		}
		other.Cmd.Process.Kill()
		<-first
	}
	ended()
	serr, cerr := sp.Wait(), cp.Wait()
	so, co := sp.Output(), cp.Output()
	frontendtest.SanitizerReport(t, sargs[0], so)
	frontendtest.SanitizerReport(t, cargs[0], co)
	spKilled, cpKilled := killed(sp), killed(cp)
	forget(sp, cp)
	st.mu.Lock()
	defer st.mu.Unlock()
	if waited && !spKilled && !cpKilled {
		return // counted as waiting
	}
	if spKilled || cpKilled {
		st.killed++
		if !hitAt.IsZero() {
			if d := time.Since(hitAt); d > st.survivorMax {
				st.survivorMax = d
			}
		}
		return
	}
	if (serr != nil || cerr != nil) && (strings.Contains(so, perftestNoClock) || strings.Contains(co, perftestNoClock)) {
		// perftest measures the CPU's clock before it reports, and
		// refuses ("Correlation coefficient r^2 < 0.9") when a loaded
		// machine makes the samples noisy: no data was lost, there is
		// just no report.
		st.noReport++
		return
	}
	if serr != nil || cerr != nil {
		st.failed = append(st.failed, fmt.Sprintf("%s (slot %d): server %v, client %v\nserver:\n%s\nclient:\n%s",
			k.name, slot, serr, cerr, so, co))
		return
	}
	st.runs++
	n := churnOps(k, co)
	st.ops += n
	if k.verify {
		st.verified += n
	}
}

// perftestNoClock is what perftest prints when it cannot measure the
// CPU's clock (get_cpu_mhz) well enough to report.
const perftestNoClock = "Can't produce a report"

func (st *churnStats) note(list *[]string, s string) {
	st.mu.Lock()
	*list = append(*list, s)
	st.mu.Unlock()
}

// churnOps reads how many operations a pair that ran to its end did: the
// #iterations column of perftest's (and hcasim perf's) table, rping's -C.
func churnOps(k churnKind, out string) int64 {
	if k.count > 0 {
		return k.count
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "#bytes") {
			continue
		}
		for _, r := range lines[i+1:] {
			f := strings.Fields(r)
			if len(f) >= 2 {
				if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					return n
				}
			}
		}
	}
	return 0
}

// footprint is what the daemon holds: its device's objects (QUERY_USAGE)
// and, the daemon being this test process, its open fds, memfd mappings
// and RSS.
type footprint struct {
	usage  ifc.Usage  // both daemons' (their sum)
	cm     ucma.Usage // their connection managers' (their sum)
	fds    int
	memfds int
	rss    int64 // KiB
	heap   int64 // live Go heap after a GC, bytes (the daemon's and the test's own records of its processes)
}

func (f footprint) String() string {
	return fmt.Sprintf("%d functions, %d PDs, %d CQs, %d QPs, %d SRQs, %d mkeys, %d maps (%d bytes); CM: %d channels, %d ids, %d ports, %d connections; "+
		"%d fds, %d memfd mappings, RSS %d MiB, Go heap %.1f MiB",
		f.usage.Functions, f.usage.PDs, f.usage.CQs, f.usage.QPs, f.usage.SRQs, f.usage.Mkeys, f.usage.Maps, f.usage.MappedBytes,
		f.cm.Channels, f.cm.IDs, f.cm.Ports, f.cm.Comms, f.fds, f.memfds, f.rss/1024, float64(f.heap)/(1<<20))
}

func daemonFootprint(t *testing.T, e churnEnv) footprint {
	t.Helper()
	var f footprint
	socks := []string{e.srv}
	if e.cli != e.srv {
		socks = append(socks, e.cli)
	}
	for _, sock := range socks {
		c, err := verbs.Dial(sock)
		require.NoError(t, err)
		u, err := c.Usage()
		c.Close()
		require.NoError(t, err)
		v, w := f.usage.Values(), u.Values()
		for i := range v {
			v[i] += w[i]
		}
		f.usage = ifc.UsageFrom(v)
		cm := frontendtest.CMUsage(sock)
		f.cm.Channels += cm.Channels
		f.cm.IDs += cm.IDs
		f.cm.Ports += cm.Ports
		f.cm.Comms += cm.Comms
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f.heap = int64(ms.HeapAlloc)
	ents, _ := os.ReadDir("/proc/self/fd")
	f.fds = len(ents)
	maps, _ := os.ReadFile("/proc/self/maps")
	f.memfds = strings.Count(string(maps), "/memfd:")
	status, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f.rss, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return f
}

// churnSettle checks the daemon is back at its baseline with no client
// running (the daemon releases a dead client's function as it reads its
// end-of-file, so it gets a few seconds).
func churnSettle(t *testing.T, e churnEnv, base footprint, st *churnStats) {
	var f footprint
	ok := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		f = daemonFootprint(t, e)
		if f.usage == base.usage && f.cm == base.cm && f.fds <= base.fds && f.memfds <= base.memfds {
			ok = true
			break
		}
	}
	st.mu.Lock()
	st.settles++
	st.mu.Unlock()
	t.Logf("churn: settled: %s (RSS %+d MiB from the baseline)", f, (f.rss-base.rss)/1024)
	if !ok {
		st.mu.Lock()
		st.settleFails++
		st.mu.Unlock()
		t.Errorf("churn: the daemon is not back at its baseline:\n  baseline %s\n  now      %s", base, f)
	}
	if f.rss-base.rss > 256*1024 {
		t.Errorf("churn: the daemon's RSS grew by %d MiB", (f.rss-base.rss)/1024)
	}
}
