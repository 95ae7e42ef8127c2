package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/hca/remote/daemon"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/remote"
	"github.com/hcasim/hcasim/roce"
)

var serveOpts struct {
	socket  *string
	readyFD *int
	caps    *string
	level   *string
	grace   *time.Duration
	poll    *time.Duration
	prof    *string
	roce    *string
	pcap    *string
	lid     *uint
	stats   *time.Duration
	funcMem *string
	devMem  *string
	rcSrc   *string
	scale   *float64
	faults  faultFlags
}

// faultFlags are serve's fault injection flags (hca.Faults).
type faultFlags struct {
	loss, dup, reorder, corrupt, corruptPL, delay *float64
	delayTime                                     *time.Duration
	seed                                          *uint64
}

func (f *faultFlags) register(fs *flag.FlagSet) {
	f.loss = fs.Float64("loss", 0, "--roce: drop this fraction of the packets sent (0..1)")
	f.dup = fs.Float64("dup", 0, "--roce: send this fraction of the packets twice")
	f.reorder = fs.Float64("reorder", 0, "--roce: hold this fraction of the packets back behind the next one")
	f.corrupt = fs.Float64("corrupt", 0, "--roce: flip a bit in this fraction of the packets after the ICRC (the receiver drops them)")
	f.corruptPL = fs.Float64("corrupt-payload", 0, "--roce: flip a payload bit in this fraction of the packets before the ICRC (only PI can catch it)")
	f.delay = fs.Float64("delay", 0, "--roce: send this fraction of the packets --delay-time late")
	f.delayTime = fs.Duration("delay-time", time.Millisecond, "--roce: how late a delayed packet is sent")
	f.seed = fs.Uint64("fault-seed", 0, "--roce: the fault injection's random seed (0: a fixed one)")
}

func (f *faultFlags) faults() (hca.Faults, error) {
	out := hca.Faults{Loss: *f.loss, Duplicate: *f.dup, Reorder: *f.reorder, Corrupt: *f.corrupt, CorruptPayload: *f.corruptPL,
		Delay: *f.delay, DelayTime: *f.delayTime, Seed: *f.seed}
	for _, r := range []float64{out.Loss, out.Duplicate, out.Reorder, out.Corrupt, out.CorruptPayload, out.Delay} {
		if r < 0 || r > 1 {
			return out, badUsage("fault rates (--loss, --dup, --reorder, --corrupt, --corrupt-payload, --delay) are fractions from 0 to 1")
		}
	}
	return out, nil
}

// parseRoCEAddr parses --roce: an IP address, with an optional port.
func parseRoCEAddr(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, badUsage("--roce %q: want ADDR or ADDR:PORT (e.g. 127.0.0.2 or [::1]:4791)", s)
	}
	return netip.AddrPortFrom(a, roce.UDPPort), nil
}

var serveCmd = &command{
	name:    "serve",
	summary: "run the device as a daemon on a Unix socket: every client process is a function of one shared HCA",
	usage:   "[--socket PATH] [--ready-fd N] [--caps PRESET] [--log-level LEVEL] [--grace D] [--poll D] [--cpuprofile FILE] [--roce ADDR[:PORT] [--pcap FILE] [--loss P] [--dup P] [--reorder P] [--corrupt P] [--corrupt-payload P] [--delay P] [--delay-time D]] [--lid N] [--stats D] [--rc-source strict|hardware] [--time-scale F]",
	example: "hcasim serve --socket /tmp/a.sock --roce 127.0.0.2 --pcap a.pcap --loss 0.01",
	flags: func(fs *flag.FlagSet) {
		serveOpts.socket = fs.String("socket", "hcasim.sock", fmt.Sprintf("the socket's path (created mode 0600; at most %d bytes). Once it listens, the daemon prints \"hcasim serve: listening on PATH\" as its first line on standard output", maxSocketPath))
		serveOpts.readyFD = fs.Int("ready-fd", -1, "once the socket listens, write a newline to this inherited file descriptor (3 or more) and close it: a readiness signal for a supervisor or a script (-1: none)")
		serveOpts.caps = fs.String("caps", "cx5", "capability preset: "+strings.Join(presetNames(), ", "))
		serveOpts.level = fs.String("log-level", "info", "debug, info, warn or error (logs go to standard error)")
		serveOpts.poll = fs.Duration("poll", 50*time.Microsecond, "how long a QP's send engine polls its send counter after its last work before it sleeps until a doorbell (0: no polling)")
		serveOpts.prof = fs.String("cpuprofile", "", "write a CPU profile of the daemon's run to this file (go tool pprof)")
		serveOpts.roce = fs.String("roce", "", "give the port a RoCEv2 endpoint at this IP address (its GID) and UDP port (default 4791): QPs connected to another host's GID use the wire")
		serveOpts.pcap = fs.String("pcap", "", "--roce: write every packet sent and received to this pcap file")
		serveOpts.lid = fs.Uint("lid", 0, "the port's LID (0: the first free one)")
		serveOpts.rcSrc = fs.String("rc-source", "strict", "strict: an RC QP serves only its connected peer; hardware: any request whose QPN and PSN fit, as RNICs do (QP injection possible)")
		serveOpts.scale = fs.Float64("time-scale", 1, "divide the transport timers (ACK timeout, RNR delay) by F, so that clients' tests of retries run fast (hca.Options.TimeScale; F >= 1). A timer scaled below what the Go scheduler honours (tens of microseconds) fires late, never early")
		serveOpts.stats = fs.Duration("stats", 0, "log the port counters this often (0: only at exit)")
		serveOpts.funcMem = fs.String("func-mem", "", "the device memory one client's objects may hold (mkeys' translations, QPs, CQs), e.g. 512M or 2G (default: the preset's, 192M for cx5); past it creates are refused with EXCEED_LIM")
		serveOpts.devMem = fs.String("dev-mem", "", "the device memory all clients' objects together may hold, e.g. 8G (default: the preset's, 2G for cx5)")
		serveOpts.faults.register(fs)
		serveOpts.grace = fs.Duration("grace", 500*time.Millisecond, "on SIGINT, SIGTERM or SIGHUP, how long clients get to see their flush completions before connections close")
	},
	run: runServe,
}

// capsPresets are the --caps presets.
var capsPresets = map[string]func() ifc.Caps{
	// A ConnectX-5; each function may map up to 64 GiB.
	"cx5": func() ifc.Caps {
		c := hca.ConnectX5Caps
		c.MaxMappedBytes = 64 << 30
		return c
	},
	// A ConnectX-5 without signature handover (no integrity offload).
	"cx5-nosig": func() ifc.Caps {
		c := hca.ConnectX5Caps
		c.MaxMappedBytes = 64 << 30
		c.SignatureHandover = false
		return c
	},
	// Small per-function limits, for testing how clients handle them.
	"small": func() ifc.Caps {
		c := hca.ConnectX5Caps
		c.MaxPD, c.MaxCQ, c.MaxQP, c.MaxPSV = 16, 64, 32, 64
		c.LogMaxCQSize, c.LogMaxSQSize, c.LogMaxRQSize = 12, 10, 10
		c.MaxMappedBytes = 256 << 20
		return c
	},
}

func presetNames() []string {
	var n []string
	for k := range capsPresets {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// serveReady, if set, is called with the socket path once the daemon
// accepts connections (tests).
var serveReady func(path string)

// parseBytes parses a size: a number of bytes with an optional K, M or G
// (powers of 1024).
func parseBytes(s string) (uint64, error) {
	mul := uint64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mul, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mul, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > math.MaxUint64/mul {
		return 0, fmt.Errorf("size %q", s)
	}
	return n * mul, nil
}

// maxSocketPath is the longest Unix socket path: sun_path holds 108 bytes
// on Linux, the terminating NUL included.
const maxSocketPath = len(unix.RawSockaddrUnix{}.Path) - 1

// checkSocketPath refuses a --socket path that cannot be bound.
func checkSocketPath(path string) error {
	switch {
	case path == "":
		return badUsage("--socket \"\": give the socket's path, such as --socket /tmp/hcasim.sock")
	case len(path) > maxSocketPath:
		return badUsage("--socket: a path of %d bytes, over the Unix socket limit of %d (%d with the terminating NUL): choose a shorter one", len(path), maxSocketPath, maxSocketPath+1)
	}
	return nil
}

func runServe(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if len(args) != 0 {
		fmt.Fprintf(stderr, "hcasim serve: unexpected arguments %q\n", args)
		fs.Usage()
		return errUsage
	}
	path := *serveOpts.socket
	if err := checkSocketPath(path); err != nil {
		return err
	}
	var ready *os.File
	if fd := *serveOpts.readyFD; fd != -1 {
		if fd < 3 {
			return badUsage("--ready-fd %d: want an inherited descriptor of 3 or more (0, 1 and 2 are standard input, output and error)", fd)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return badUsage("--ready-fd %d: not an open descriptor (%v)", fd, err)
		}
		ready = os.NewFile(uintptr(fd), "ready-fd")
		defer ready.Close()
	}
	preset, ok := capsPresets[*serveOpts.caps]
	if !ok {
		return badUsage("--caps %q: want one of %s", *serveOpts.caps, strings.Join(presetNames(), ", "))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*serveOpts.level)); err != nil {
		return badUsage("--log-level %q: want debug, info, warn or error", *serveOpts.level)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *serveOpts.prof != "" {
		f, err := os.Create(*serveOpts.prof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	caps := preset()
	for _, b := range []struct {
		flag string
		v    *string
		dst  *uint64
	}{{"--func-mem", serveOpts.funcMem, &caps.FuncMemBytes}, {"--dev-mem", serveOpts.devMem, &caps.DevMemBytes}} {
		if *b.v == "" {
			continue
		}
		n, err := parseBytes(*b.v)
		if err != nil || n == 0 {
			return badUsage("%s %q: want a size such as 512M or 2G", b.flag, *b.v)
		}
		*b.dst = n
	}
	if *serveOpts.lid > 0xBFFF {
		return badUsage("--lid %d: a unicast LID is 1..0xBFFF", *serveOpts.lid)
	}
	if *serveOpts.rcSrc != "strict" && *serveOpts.rcSrc != "hardware" {
		return badUsage("--rc-source %q: want strict or hardware", *serveOpts.rcSrc)
	}
	if sc := *serveOpts.scale; !(sc >= 1) || math.IsInf(sc, 0) {
		return badUsage("--time-scale %v: want a finite factor of 1 or more (1: real time)", sc)
	}
	dev := hca.New(hca.Options{Caps: &caps, Poll: *serveOpts.poll, LID: uint16(*serveOpts.lid), Logger: log.With("part", "device"),
		RCSourceHardware: *serveOpts.rcSrc == "hardware", TimeScale: *serveOpts.scale})
	defer dev.Close()
	roceLine := "" // printed after the first line, which says the socket listens
	if *serveOpts.roce != "" {
		addr, err := parseRoCEAddr(*serveOpts.roce)
		if err != nil {
			return err
		}
		faults, err := serveOpts.faults.faults()
		if err != nil {
			return err
		}
		wo := hca.WireOptions{Addr: addr, Faults: faults}
		if *serveOpts.pcap != "" {
			f, err := os.Create(*serveOpts.pcap)
			if err != nil {
				return err
			}
			bw := bufio.NewWriterSize(f, 1<<20)
			defer func() {
				dev.Close() // no more packets: then the capture is complete
				bw.Flush()
				f.Close()
			}()
			wo.Pcap = bw
		}
		if err := dev.ListenRoCE(wo); err != nil {
			return err
		}
		roceLine = fmt.Sprintf("hcasim serve: RoCEv2 port %v, GID %v\n", addr, netip.AddrFrom16(dev.GID()))
		defer func() { log.Info("port counters", dev.Counters().LogAttrs()...) }()
		if d := *serveOpts.stats; d > 0 {
			tick := time.NewTicker(d)
			stopStats := make(chan struct{})
			var stats errgroup.Group
			defer stats.Wait() // after the stop below: deferred calls run last first
			defer func() { tick.Stop(); close(stopStats) }()
			stats.Go(func() error {
				for {
					select {
					case <-tick.C:
						log.Info("port counters", dev.Counters().LogAttrs()...)
					case <-stopStats:
						return nil
					}
				}
			})
		}
	} else if *serveOpts.pcap != "" {
		return badUsage("--pcap needs --roce (packets exist only on the wire)")
	}
	// The signals are caught before the socket exists: one that comes
	// once it does removes it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	l, err := daemon.Listen(path)
	if err != nil {
		return err
	}
	srv := &daemon.Server{Dev: dev, Log: log}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	log.Info("serving", "socket", path, "caps", *serveOpts.caps, "lid", dev.LID(), "protocol", remote.Version)
	log.Debug("options", "poll", *serveOpts.poll, "grace", *serveOpts.grace, "time-scale", *serveOpts.scale, "rc-source", *serveOpts.rcSrc, "roce", *serveOpts.roce)
	// The socket listens: clients may connect (the first accept queues them).
	fmt.Fprintf(stdout, "hcasim serve: listening on %s (device LID %d, protocol version %d)\n", path, dev.LID(), remote.Version)
	fmt.Fprint(stdout, roceLine)
	fmt.Fprintf(stdout, "  connect from Go with verbs.Dial(%q), or try: hcasim perf write --connect %s\n", path, path)
	fmt.Fprintf(stdout, "  other languages: docs/PROTOCOL.md. Stop with Ctrl-C (SIGINT), SIGTERM or SIGHUP.\n")
	if ready != nil {
		if _, err := ready.Write([]byte("\n")); err != nil {
			log.Warn("--ready-fd", "err", err)
		}
		ready.Close()
	}
	if serveReady != nil {
		serveReady(path)
	}
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("stopping: outstanding work flushes, then connections close", "grace", *serveOpts.grace)
	case serveErr = <-done:
		done <- serveErr
	}
	srv.Shutdown(*serveOpts.grace)
	if err := <-done; err != nil && serveErr == nil {
		serveErr = err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("remove socket", "err", err)
	}
	log.Info("stopped")
	return serveErr
}
