package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/verbs"
	"github.com/hcasim/hcasim/t10dif"
	"golang.org/x/sync/errgroup"
)

var perfOpts struct {
	size     *int
	qd       *int
	qps      *int
	duration *time.Duration
	json     *bool
	pi       *string
	interval *int
	mkey     *bool
	cpuprof  *string
	connect  *string
	role     *string
	peer     *string
	lat      *bool
	all      *bool
}

// perfSweepMax is the largest size -a measures (perftest's -a: 2^23).
const perfSweepMax = 8 << 20

// perfSweepDuration is each size's run under -a without --duration.
const perfSweepDuration = 200 * time.Millisecond

var perfCmd = &command{
	name:    "perf",
	summary: "measure RDMA operations over an in-process QP pair (like perftest's ib_write_bw / ib_write_lat)",
	usage: "write|read|send [--size N | -a] [--lat] [--qd N] [--qps N] [--duration D] [--pi none|insert|strip|pass] [--interval 512|4096] [--connect SOCKET [--role both|server|client] [--peer PATH]] [--json]\n\n" +
		"The table has perftest's columns: #bytes, #iterations (operations completed), BW average[MB/sec]\n" +
		"(MB = 2^20 bytes, as perftest counts them) and MsgRate[Mpps], with the post-to-completion latency's\n" +
		"p50 and p99. No BW peak: perftest's is the best rate over any run of consecutive operations, from\n" +
		"each one's post and completion times; perf keeps only their difference (the latency samples).\n" +
		"--lat is ib_write_lat's table instead: QD 1, one operation at a time, and the post-to-completion\n" +
		"time's t_min, t_max, t_typical (median), t_avg, t_stdev and 99% and 99.9% percentiles in µs (a\n" +
		"round trip: a WRITE or SEND completes when the responder acknowledged it; ib_write_lat and\n" +
		"ib_send_lat print half their ping-pong's round trip, ib_read_lat the whole). -a sweeps the sizes\n" +
		"2, 4, ... 8 MiB (with --pi: from the interval up, by powers of two), one row (with --json, one\n" +
		"JSON line) per size, each run for --duration (200ms per size unless given).",
	example: "hcasim perf write --size 64 --qd 32 --duration 3s; hcasim perf write --lat -a",
	flags: func(fs *flag.FlagSet) {
		perfOpts.size = fs.Int("size", 64, fmt.Sprintf("message size in bytes, 1..%d (252 MiB)", perfMaxSize))
		perfOpts.qd = fs.Int("qd", 32, fmt.Sprintf("work requests kept outstanding (per QP), 1..%d (with --lat: 1)", perfMaxQD))
		perfOpts.lat = fs.Bool("lat", false, "latency, like ib_write_lat: QD 1 and the post-to-completion time's t_min, t_max, t_typical, t_avg, t_stdev, 99% and 99.9% (µs)")
		perfOpts.all = new(bool)
		fs.BoolVar(perfOpts.all, "a", false, fmt.Sprintf("sweep the sizes 2, 4, ... %d (8 MiB; with --pi from --interval up), one row each, like perftest's -a; each size runs for --duration, %v unless given", perfSweepMax, perfSweepDuration))
		fs.BoolVar(perfOpts.all, "all", false, "the same as -a")
		perfOpts.qps = fs.Int("qps", 1, fmt.Sprintf("QP pairs, each with its own poster and --qd outstanding (in process, --role both), 1..%d", perfMaxQPs))
		perfOpts.duration = fs.Duration("duration", 3*time.Second, "how long to run")
		perfOpts.json = fs.Bool("json", false, "print only one JSON object (with -a one a line, per size; progress goes to standard error)")
		perfOpts.pi = fs.String("pi", "none", "protection information through a signature key on the data's side: none, insert (memory plain, wire T10-DIF), strip (memory T10-DIF, wire plain) or pass (both)")
		perfOpts.interval = fs.Int("interval", 4096, "protection interval for --pi: 512 or 4096 (--size a multiple of it)")
		perfOpts.mkey = fs.Bool("mkey", false, "with --pi: configure the signature key the mlx5dv way (CreateMkey and an mkey configure in the send queue, PI interleaved in memory) instead of the kernel's REG_MR_INTEGRITY")
		perfOpts.cpuprof = fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
		perfOpts.connect = fs.String("connect", "", "run against the daemon at this socket (hcasim serve): both sides are clients of it")
		perfOpts.role = fs.String("role", "both", "with --connect: both (one process plays both sides), server (the passive side, in its own process: it takes the operation and sizes from the client) or client")
		perfOpts.peer = fs.String("peer", "", "with --role: the Unix socket where the server waits for the client (default: the --connect path + \".perf\")")
	},
	run: runPerf,
}

// perfResult is the --json object (one per size with -a). ops_per_sec,
// gbytes_per_sec and lat_us.p50 are what scripts read: they stay.
type perfResult struct {
	Op           string  `json:"op"`
	Mode         string  `json:"mode"` // "bw", or "lat" (--lat)
	Size         int     `json:"size"`
	QD           int     `json:"qd"`
	QPs          int     `json:"qps"`
	PI           string  `json:"pi"`
	Iterations   int     `json:"iterations"` // operations completed
	OpsPerSec    float64 `json:"ops_per_sec"`
	GBytesPerSec float64 `json:"gbytes_per_sec"`
	MBPerSec     float64 `json:"mbytes_per_sec"` // perftest's BW average[MB/sec]: MB = 2^20 bytes
	Mpps         float64 `json:"mpps"`           // perftest's MsgRate[Mpps]
	// LatUS is the post-to-completion time in µs over the samples kept
	// (the first perfLatSamples of the run): p50 is ib_write_lat's
	// t_typical, p99_9 its 99.9% percentile.
	LatUS struct {
		P50     float64 `json:"p50"`
		P99     float64 `json:"p99"`
		Min     float64 `json:"min"`
		Max     float64 `json:"max"`
		Avg     float64 `json:"avg"`
		Stdev   float64 `json:"stdev"`
		P999    float64 `json:"p99_9"`
		Samples int     `json:"samples"`
	} `json:"lat_us"`
	ops int             // operations completed
	lat []time.Duration // post-to-completion samples
}

func runPerf(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	// Flags may follow the operation.
	if len(args) >= 1 {
		rest, err := parseInterspersed(fs, args[1:], stdout)
		if err != nil {
			return err
		}
		args = append(args[:1], rest...)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	role := *perfOpts.role
	switch role {
	case "both", "client":
	case "server":
		// The server takes the operation from the client.
		if len(args) == 0 {
			args = []string{"write"}
		}
	default:
		return badUsage("--role %q: want both, server or client", role)
	}
	if role != "both" && *perfOpts.connect == "" {
		return badUsage("--role needs --connect: the two processes are clients of one daemon")
	}
	if len(args) != 1 {
		fmt.Fprintln(stderr, "hcasim perf: give one operation: write, read or send")
		fs.Usage()
		return errUsage
	}
	op := args[0]
	if _, ok := perfOps[op]; !ok {
		fmt.Fprintf(stderr, "hcasim perf: unknown operation %q\n", op)
		fs.Usage()
		return errUsage
	}
	size, qd, dur := *perfOpts.size, *perfOpts.qd, *perfOpts.duration
	lat, all := *perfOpts.lat, *perfOpts.all
	qps := *perfOpts.qps
	if lat {
		switch {
		case given["qd"] && qd != 1:
			return badUsage("--lat runs at QD 1, one operation at a time (like ib_write_lat): --qd %d does not go with it", qd)
		case qps != 1:
			return badUsage("--lat measures one QP pair (like ib_write_lat): --qps %d does not go with it", qps)
		}
		qd = 1
	}
	if all {
		switch {
		case given["size"]:
			return badUsage("-a sweeps the sizes itself: give it or --size, not both")
		case role != "both":
			return badUsage("-a works with --role both: a perf server serves one run")
		}
		if !given["duration"] {
			dur = perfSweepDuration
		}
	}
	pi := perfPI{mode: *perfOpts.pi, interval: *perfOpts.interval, mkey: *perfOpts.mkey}
	sizes := []int{size}
	if all {
		sizes = perfSweep(pi)
	}
	for _, size := range sizes {
		if err := perfCheck(op, size, qd, dur, pi); err != nil {
			return err
		}
	}
	if qps < 1 || qps > perfMaxQPs {
		return badUsage("--qps %d: want 1..%d", qps, perfMaxQPs)
	}
	if qps > 1 && role != "both" {
		return badUsage("--qps works with --role both: one process plays both sides")
	}
	progress := stdout
	if *perfOpts.json || all {
		// With -a, standard output is the table (or the JSON lines).
		progress = stderr
	}
	if *perfOpts.cpuprof != "" {
		f, err := os.Create(*perfOpts.cpuprof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	open := func() (*verbs.Context, error) { return verbs.Dial(*perfOpts.connect) }
	if *perfOpts.connect == "" {
		dev := hca.New(hca.Options{})
		defer dev.Close()
		open = func() (*verbs.Context, error) { return verbs.Open(dev) }
	}
	peer := *perfOpts.peer
	if peer == "" {
		peer = *perfOpts.connect + ".perf"
	}
	if role == "server" {
		return perfServe(open, peer, *perfOpts.json, stdout, progress)
	}
	tab := perfTable{w: stdout, op: op, lat: lat, qd: qd, qps: qps, pi: pi.mode, dur: dur, all: all, connect: *perfOpts.connect, role: role}
	if all && !*perfOpts.json {
		tab.header()
	}
	for _, size := range sizes {
		var res *perfResult
		var err error
		if role == "client" {
			res, err = perfClient(open, peer, op, size, qd, dur, &pi, progress)
		} else {
			res, err = perfRuns(open, perfOps[op], size, qd, qps, dur, &pi, progress)
		}
		if err != nil {
			if errors.Is(err, verbs.ErrDeviceLost) {
				return fmt.Errorf("the daemon at %s went away: %w", *perfOpts.connect, err)
			}
			return err
		}
		res.Op = op
		res.Mode = "bw"
		if lat {
			res.Mode = "lat"
		}
		if *perfOpts.json {
			if err := json.NewEncoder(stdout).Encode(res); err != nil {
				return err
			}
			continue
		}
		if !all {
			fmt.Fprintln(stdout)
			tab.header()
		}
		tab.row(res)
	}
	if !*perfOpts.json {
		tab.footer()
	}
	return nil
}

// perfSweep is -a's sizes: 2, 4, ... perfSweepMax, or with PI the
// interval and the powers of two above it.
func perfSweep(pi perfPI) []int {
	first := 2
	if pi.mode != "none" && pi.interval > 0 {
		first = pi.interval
	}
	var sizes []int
	for s := first; s <= perfSweepMax; s *= 2 {
		sizes = append(sizes, s)
	}
	return sizes
}

// perfTable prints perf's human-readable table, in perftest's layout:
// ib_write_bw's columns (less BW peak) with our p50 and p99, or with
// --lat ib_write_lat's.
type perfTable struct {
	w       io.Writer
	op      string
	lat     bool
	qd, qps int
	pi      string
	dur     time.Duration
	all     bool
	connect string
	role    string
}

const perfRule = "---------------------------------------------------------------------------------------"

// perfTestNames are perftest's names of the operations.
var perfTestNames = map[string]string{"write": "RDMA_Write", "read": "RDMA_Read", "send": "Send"}

func (t *perfTable) header() {
	kind := "BW"
	if t.lat {
		kind = "Latency"
	}
	where := "in process"
	switch {
	case t.role == "client":
		where = "client, daemon " + t.connect
	case t.connect != "":
		where = "daemon " + t.connect
	}
	per := ""
	if t.all {
		per = " per size"
	}
	fmt.Fprintln(t.w, perfRule)
	fmt.Fprintf(t.w, "                    %s %s Test (hcasim, %s)\n", perfTestNames[t.op], kind, where)
	fmt.Fprintf(t.w, " Number of qps   : %d\t\tTX depth : %d\n", t.qps, t.qd)
	fmt.Fprintf(t.w, " PI              : %s\t\tDuration : %v%s\n", t.pi, t.dur, per)
	fmt.Fprintln(t.w, perfRule)
	if t.lat {
		fmt.Fprintf(t.w, " %-7s %-11s %-12s %-12s %-16s %-12s %-14s %-21s %s\n", "#bytes", "#iterations",
			"t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]", "99.9% percentile[usec]")
		return
	}
	fmt.Fprintf(t.w, " %-10s %-14s %-20s %-15s %-11s %s\n", "#bytes", "#iterations", "BW average[MB/sec]", "MsgRate[Mpps]", "p50[usec]", "p99[usec]")
}

func (t *perfTable) row(r *perfResult) {
	l := &r.LatUS
	if t.lat {
		fmt.Fprintf(t.w, " %-7d %-11d %-12.2f %-12.2f %-16.2f %-12.2f %-14.2f %-21.2f %.2f\n", r.Size, r.Iterations,
			l.Min, l.Max, l.P50, l.Avg, l.Stdev, l.P99, l.P999)
		return
	}
	fmt.Fprintf(t.w, " %-10d %-14d %-20.2f %-15.6f %-11.2f %.2f\n", r.Size, r.Iterations, r.MBPerSec, r.Mpps, l.P50, l.P99)
}

func (t *perfTable) footer() { fmt.Fprintln(t.w, perfRule) }

// perfOps are perf's operations.
var perfOps = map[string]verbs.WROpcode{"write": verbs.WRRDMAWrite, "read": verbs.WRRDMARead, "send": verbs.WRSend}

// The limits of perf's flags, as the device sets them.
const (
	// perfMaxSize is the largest --size: one memory registration maps at
	// most 2^16 pages of 4 KiB (256 MiB; klm.Caps.LogMaxKLMListSize), and
	// a side's buffer has room for the data's PI besides (perfBufSize).
	perfMaxSize = 252 << 20
	// perfMaxQD is the largest --qd: a send queue holds 2^15 WQEBBs
	// (ifc.Caps.LogMaxSQSize), and a QP that may register signature keys
	// reserves 9 WQEBBs for each WR (a REG_MR_INTEGRITY's WQE).
	perfMaxQD  = 1 << 15 / 9
	perfMaxQPs = 1024
)

// perfCheck validates a run's parameters (the command line's, or those a
// client sent a server). Its errors are usage errors.
func perfCheck(op string, size, qd int, dur time.Duration, pi perfPI) error {
	switch {
	case size <= 0 || size > perfMaxSize:
		return badUsage("--size %d: want 1..%d (252 MiB: a memory registration maps at most 256 MiB, with the PI besides)", size, perfMaxSize)
	case qd <= 0 || qd > perfMaxQD:
		return badUsage("--qd %d: want 1..%d (a send queue of 2^15 WQEBBs, 9 for each WR)", qd, perfMaxQD)
	case dur <= 0:
		return badUsage("--duration %v: want a positive duration, such as 3s or 500ms", dur)
	}
	switch pi.mode {
	case "none":
	case "insert", "strip", "pass":
		switch {
		case op == "send":
			return badUsage("--pi %s works with write and read, not send", pi.mode)
		case pi.interval != 512 && pi.interval != 4096:
			return badUsage("--interval %d: want 512 or 4096 (the default)", pi.interval)
		case size%pi.interval != 0:
			return badUsage("--pi %s: --size %d is not a multiple of the protection interval %d (--interval: 512, or 4096 by default)", pi.mode, size, pi.interval)
		}
	default:
		return badUsage("--pi %q: want none, insert, strip or pass", pi.mode)
	}
	return nil
}

type perfEnd struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

// perfPI is the --pi configuration.
type perfPI struct {
	mode     string
	interval int
	mkey     bool // configure an mlx5dv mkey (mkeyKey) instead of an integrity MR
}

// sigKey registers, on side e (its QP posts the registration), an
// integrity MR over e's buffer as the mode says, and returns its key and
// the wire length of size data bytes.
func (p *perfPI) sigKey(e *perfEnd, size int) (uint32, int, error) {
	if p.mkey {
		return p.mkeyKey(e, size)
	}
	iv := p.interval
	blocks := size / iv
	data := e.mr.SGE(0, size)
	memPI := p.mode == "strip" || p.mode == "pass"
	wirePI := p.mode == "insert" || p.mode == "pass"
	dom := verbs.SigDomain{Type: verbs.SigTypeT10DIF, PIInterval: uint32(iv), RefTag: 0x100, RefRemap: true, AppEscape: true, ApptagCheckMask: 0xFFFF}
	attrs := verbs.SigAttrs{CheckMask: 0xFF}
	var meta []verbs.SGE
	if memPI {
		attrs.Mem = dom
		// Valid PI for the data, in a separate metadata buffer.
		d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 0x100, Separate: true}
		if _, err := t10dif.Generate(d, t10dif.Buf{Data: e.mr.Buf[:size], Meta: e.mr.Buf[size : size+blocks*8]}, append([]byte(nil), e.mr.Buf[:size]...)); err != nil {
			return 0, 0, err
		}
		meta = []verbs.SGE{e.mr.SGE(size, blocks*8)}
	}
	if wirePI {
		attrs.Wire = dom
	}
	mr, err := e.pd.AllocMRIntegrity(4, 4)
	if err != nil {
		return 0, 0, err
	}
	if err := mr.MapSGPI([]verbs.SGE{data}, meta); err != nil {
		return 0, 0, err
	}
	mr.SetSigAttrs(attrs)
	mr.IncKey()
	if _, err := e.qp.PostSend([]verbs.SendWR{{WRID: 1 << 62, Opcode: verbs.WRRegMRIntegrity, MR: mr, Flags: verbs.SendSignaled,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite}}); err != nil {
		return 0, 0, err
	}
	if err := waitRegistration(e, "registration"); err != nil {
		return 0, 0, err
	}
	wire := size
	if wirePI {
		wire = blocks * (iv + 8)
	}
	return mr.RKey, wire, nil
}

// mkeyKey is sigKey the mlx5dv way: a BLOCK_SIGNATURE mkey configured in
// e's send queue, its memory layout e's buffer (with PI interleaved after
// each block when memory carries it).
func (p *perfPI) mkeyKey(e *perfEnd, size int) (uint32, int, error) {
	iv := p.interval
	blocks := size / iv
	memPI := p.mode == "strip" || p.mode == "pass"
	wirePI := p.mode == "insert" || p.mode == "pass"
	dom := &verbs.SigBlockDomain{Type: verbs.SigBlockT10DIF, BlockSize: iv, RefTag: 0x100, RefRemap: true, AppEscape: true}
	sig := &verbs.SigBlock{CheckMask: 0xFF}
	memLen := size
	if memPI {
		sig.Mem, memLen = dom, blocks*(iv+8)
		d := t10dif.Domain{Format: t10dif.FormatPI8, Type: t10dif.Type1, Interval: iv, RefTag: 0x100}
		if _, err := t10dif.Generate(d, t10dif.Buf{Data: e.mr.Buf[:memLen]}, append([]byte(nil), e.mr.Buf[:size]...)); err != nil {
			return 0, 0, err
		}
	}
	if wirePI {
		sig.Wire = dom
	}
	m, err := e.pd.CreateMkey(verbs.MkeyIndirect|verbs.MkeyBlockSignature, 1)
	if err != nil {
		return 0, 0, err
	}
	cfg := &verbs.MkeyConfig{Mkey: m, SetAccess: true, Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite,
		List: []verbs.SGE{e.mr.SGE(0, memLen)}, Sig: sig}
	if _, err := e.qp.PostSend([]verbs.SendWR{{WRID: 1 << 62, Opcode: verbs.WRMkeyConfigure, Mkey: cfg, Flags: verbs.SendSignaled}}); err != nil {
		return 0, 0, err
	}
	if err := waitRegistration(e, "mkey configure"); err != nil {
		return 0, 0, err
	}
	wire := size
	if wirePI {
		wire = blocks * (iv + 8)
	}
	return m.LKey, wire, nil
}

// waitRegistration waits for the one completion of a key's registration
// on e's CQ.
func waitRegistration(e *perfEnd, what string) error {
	wcs := make([]verbs.WC, 4)
	deadline := time.Now().Add(5 * time.Second)
	for got := 0; got < 1; {
		n, err := e.cq.Poll(wcs)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("%s: %v", what, wc.Status)
			}
		}
		got += n
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not complete", what)
		}
	}
	return nil
}

// writeSG is a WRITE's source through a signature key on side a (the
// requester's data side): the key's wire domain, from offset 0.
func (p *perfPI) writeSG(a *perfEnd, size int) ([]verbs.SGE, error) {
	key, wire, err := p.sigKey(a, size)
	if err != nil {
		return nil, err
	}
	return []verbs.SGE{{Addr: 0, Length: uint32(wire), LKey: key}}, nil
}

// perfBufSize is the buffer each side registers: the data, room for its
// PI, at least 64 bytes.
func perfBufSize(size int) int { return max(size+size/512*8+8, 64) }

// perfFill writes data into a fresh buffer before it is used. Memory
// that was never written maps the kernel's shared zero page: every read of
// it hits the same 4 KiB, which no real workload does. It made runs whose
// source was never written (no PI, --pi insert) faster than --pi pass,
// whose source holds the PI it generates (docs/PERFORMANCE.md).
func perfFill(buf []byte) {
	x := uint64(0x9E3779B97F4A7C15)
	for i := 0; i+8 <= len(buf); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(buf[i:], x)
	}
	for i := len(buf) &^ 7; i < len(buf); i++ {
		buf[i] = byte(i) | 0x80
	}
}

// perfSide opens a context with a CQ, a QP (qd sends, rq receives) and a
// registered buffer.
func perfSide(open func() (*verbs.Context, error), qd, rq, bufSize int) (*perfEnd, error) {
	ctx, err := open()
	if err != nil {
		return nil, err
	}
	e := &perfEnd{ctx: ctx}
	if e.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if e.cq, err = ctx.CreateCQ(qd+rq+16, nil); err != nil {
		return nil, err
	}
	if e.qp, err = e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Integrity: true,
		Cap: verbs.QPCap{MaxSendWR: qd, MaxRecvWR: rq, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	buf, err := ctx.Alloc(bufSize)
	if err != nil {
		return nil, err
	}
	perfFill(buf)
	if e.mr, err = e.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		return nil, err
	}
	return e, nil
}

// perfRuns runs qps QP pairs at once, each keeping qd operations of size
// bytes outstanding for dur from its own goroutine, and sums their
// completions (latency samples merged). Progress is printed for one pair.
func perfRuns(open func() (*verbs.Context, error), op verbs.WROpcode, size, qd, qps int, dur time.Duration, pi *perfPI, progress io.Writer) (*perfResult, error) {
	var sides []*perfEnd
	defer func() {
		for _, e := range sides {
			e.ctx.Close()
		}
	}()
	loops := make([]func(io.Writer) (*perfResult, error), qps)
	for i := range loops {
		a, b, err := perfPair(open, qd, size)
		if a != nil {
			sides = append(sides, a)
		}
		if b != nil {
			sides = append(sides, b)
		}
		if err != nil {
			return nil, err
		}
		if loops[i], err = perfSetup(a, b, op, size, qd, dur, pi); err != nil {
			return nil, err
		}
	}
	perfLoops.Store(int64(qps))
	defer perfLoops.Store(1)
	if qps == 1 {
		return loops[0](progress)
	}
	res := make([]*perfResult, qps)
	var g errgroup.Group
	for i, loop := range loops {
		out := io.Discard
		if i == 0 {
			out = progress
		}
		g.Go(func() (err error) {
			res[i], err = loop(out)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	sum := &perfResult{Size: size, QD: qd, QPs: qps, PI: pi.mode}
	for _, r := range res {
		sum.ops += r.ops
		sum.OpsPerSec += r.OpsPerSec
		sum.lat = append(sum.lat, r.lat...)
	}
	sum.stats()
	return sum, nil
}

// perfLatSamples bounds the latency samples a run keeps, shared by its
// loops (perfLoops of them).
const perfLatSamples = 1 << 20

var perfLoops = func() *atomic.Int64 { var n atomic.Int64; n.Store(1); return &n }()

// perfPair opens two sides for size-byte operations at qd and connects
// their QPs. The sides it returns are to be closed even with an error.
func perfPair(open func() (*verbs.Context, error), qd, size int) (a, b *perfEnd, err error) {
	bufSize := perfBufSize(size)
	if a, err = perfSide(open, qd, qd, bufSize); err != nil {
		return nil, nil, err
	}
	if b, err = perfSide(open, qd, qd, bufSize); err != nil {
		return a, nil, err
	}
	if err := a.qp.Connect(b.qp.Info(), nil); err != nil {
		return a, b, err
	}
	if err := b.qp.Connect(a.qp.Info(), nil); err != nil {
		return a, b, err
	}
	return a, b, nil
}

// perfSetup prepares the run of a's QP against b's (receives for SENDs, a
// signature key for PI) and returns the loop that runs it.
func perfSetup(a, b *perfEnd, op verbs.WROpcode, size, qd int, dur time.Duration, pi *perfPI) (func(io.Writer) (*perfResult, error), error) {
	var err error
	var recv *perfRecv
	if op == verbs.WRSend {
		recv = &perfRecv{e: b, size: size, wcs: make([]verbs.WC, qd)}
		if err := recv.post(qd); err != nil {
			return nil, err
		}
	}
	wr := verbs.SendWR{Opcode: op, Flags: verbs.SendSignaled, SG: []verbs.SGE{a.mr.SGE(0, size)},
		RemoteAddr: b.mr.Addr, RKey: b.mr.RKey}
	if pi.mode != "none" {
		// The data's side holds the signature key: the requester's for a
		// WRITE (its source), the responder's for a READ.
		if op == verbs.WRRDMAWrite {
			if wr.SG, err = pi.writeSG(a, size); err != nil {
				return nil, err
			}
		} else {
			key, wire, err := pi.sigKey(b, size)
			if err != nil {
				return nil, err
			}
			wr.SG = []verbs.SGE{a.mr.SGE(0, wire)}
			wr.RemoteAddr, wr.RKey = 0, key
		}
	}
	var each func() error
	if recv != nil {
		each = recv.repost
	}
	return func(progress io.Writer) (*perfResult, error) {
		return perfLoop(a, wr, size, qd, dur, pi.mode, each, progress)
	}, nil
}

// perfRecv keeps a side's receive queue stocked for SENDs.
type perfRecv struct {
	e    *perfEnd
	size int
	wcs  []verbs.WC
	got  int
}

func (r *perfRecv) post(n int) error {
	wrs := make([]verbs.RecvWR, n)
	for i := range wrs {
		wrs[i] = verbs.RecvWR{WRID: uint64(i), SG: []verbs.SGE{r.e.mr.SGE(0, r.size)}}
	}
	_, err := r.e.qp.PostRecv(wrs)
	return err
}

// repost replaces the receives that completed.
func (r *perfRecv) repost() error {
	k, err := r.e.cq.Poll(r.wcs)
	if err != nil {
		return err
	}
	for _, wc := range r.wcs[:k] {
		if wc.Status != verbs.WCSuccess {
			return fmt.Errorf("receive completion %v", wc.Status)
		}
	}
	r.got += k
	if k > 0 {
		return r.post(k)
	}
	return nil
}

// perfLoop keeps qd copies of wr outstanding on a for dur and measures
// completions and post-to-completion latency; each, if not nil, runs once
// per turn of the loop.
func perfLoop(a *perfEnd, wr verbs.SendWR, size, qd int, dur time.Duration, piMode string, each func() error, progress io.Writer) (*perfResult, error) {
	posted := make([]time.Time, qd)
	lat := make([]time.Duration, 0, perfLatSamples/perfLoops.Load())
	wcs := make([]verbs.WC, qd)
	batch := make([]verbs.SendWR, 0, qd)
	start := time.Now()
	end := start.Add(dur)
	nextTick := start.Add(time.Second)
	var done, lastDone int
	outstanding := 0
	now := start
	idle := 0
	for id := 0; ; {
		if now.After(end) && outstanding == 0 {
			break
		}
		batch = batch[:0]
		for outstanding+len(batch) < qd && now.Before(end) {
			w := wr
			w.WRID = uint64(id % qd)
			posted[id%qd] = now
			batch = append(batch, w)
			id++
		}
		if len(batch) > 0 {
			if _, err := a.qp.PostSend(batch); err != nil {
				return nil, err
			}
			outstanding += len(batch)
		}
		n, err := a.cq.Poll(wcs)
		if err != nil {
			return nil, err // the daemon went away: nothing more completes
		}
		if n == 0 {
			// Give the device's goroutines this P rather than waking another
			// thread for them: a busy poll that never yields makes every
			// hand-off a cross-thread wake-up. Read the clock only now and
			// then while idle: it is not free.
			runtime.Gosched()
			if idle++; idle%32 != 0 {
				continue
			}
		}
		now = time.Now()
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return nil, fmt.Errorf("completion %v", wc.Status)
			}
			if len(lat) < cap(lat) {
				lat = append(lat, now.Sub(posted[wc.WRID]))
			}
		}
		outstanding -= n
		done += n
		if each != nil {
			if err := each(); err != nil {
				return nil, err
			}
		}
		if now.After(nextTick) {
			fmt.Fprintf(progress, "%6.1fs %12d ops/s\n", now.Sub(start).Seconds(), done-lastDone)
			lastDone = done
			nextTick = nextTick.Add(time.Second)
		}
	}
	el := time.Since(start).Seconds()
	r := &perfResult{Size: size, QD: qd, QPs: 1, PI: piMode, ops: done, lat: lat}
	r.OpsPerSec = float64(done) / el
	r.stats()
	return r, nil
}

// stats sets the figures derived from the operations, the rate and the
// latency samples (after the run: the loop only stores the samples).
func (r *perfResult) stats() {
	r.Iterations = r.ops
	r.GBytesPerSec = r.OpsPerSec * float64(r.Size) / 1e9
	r.MBPerSec = r.OpsPerSec * float64(r.Size) / (1 << 20)
	r.Mpps = r.OpsPerSec / 1e6
	n := len(r.lat)
	l := &r.LatUS
	l.Samples = n
	if n == 0 {
		return
	}
	slices.Sort(r.lat)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	l.Min, l.Max = us(r.lat[0]), us(r.lat[n-1])
	l.P50 = us(r.lat[n/2])
	l.P99 = us(r.lat[n*99/100])
	l.P999 = us(r.lat[n*999/1000])
	var sum float64
	for _, d := range r.lat {
		sum += us(d)
	}
	l.Avg = sum / float64(n)
	var sq float64
	for _, d := range r.lat {
		dev := us(d) - l.Avg
		sq += dev * dev
	}
	l.Stdev = math.Sqrt(sq / float64(n))
	// The mean of rounded floats may stray outside the sorted extremes.
	l.Avg = min(max(l.Avg, l.Min), l.Max)
}
