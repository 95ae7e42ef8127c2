package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hcasim/hcasim/hca"
	"github.com/hcasim/hcasim/hca/remote"
)

var serveOpts struct {
	socket *string
	caps   *string
	level  *string
	grace  *time.Duration
	poll   *time.Duration
	prof   *string
}

var serveCmd = &command{
	name:    "serve",
	summary: "run the device as a daemon on a Unix socket: every client process is a function of one shared HCA",
	usage:   "[--socket PATH] [--caps PRESET] [--log-level LEVEL] [--grace D] [--poll D] [--cpuprofile FILE]",
	example: "hcasim serve --socket /tmp/hcasim.sock --log-level debug",
	flags: func(fs *flag.FlagSet) {
		serveOpts.socket = fs.String("socket", "hcasim.sock", "the socket's path (created mode 0600)")
		serveOpts.caps = fs.String("caps", "cx5", "capability preset: "+strings.Join(presetNames(), ", "))
		serveOpts.level = fs.String("log-level", "info", "debug, info, warn or error (logs go to standard error)")
		serveOpts.poll = fs.Duration("poll", 50*time.Microsecond, "how long a QP's send engine polls its send counter after its last work before it sleeps until a doorbell (0: no polling)")
		serveOpts.prof = fs.String("cpuprofile", "", "write a CPU profile of the daemon's run to this file (go tool pprof)")
		serveOpts.grace = fs.Duration("grace", 500*time.Millisecond, "on SIGINT/SIGTERM, how long clients get to see their flush completions before connections close")
	},
	run: runServe,
}

// capsPresets are the --caps presets.
var capsPresets = map[string]func() hca.Caps{
	// A ConnectX-5; each function may map up to 64 GiB.
	"cx5": func() hca.Caps {
		c := hca.ConnectX5Caps
		c.MaxMappedBytes = 64 << 30
		return c
	},
	// A ConnectX-5 without signature handover (no integrity offload).
	"cx5-nosig": func() hca.Caps {
		c := hca.ConnectX5Caps
		c.MaxMappedBytes = 64 << 30
		c.SignatureHandover = false
		return c
	},
	// Small per-function limits, for testing how clients handle them.
	"small": func() hca.Caps {
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

func runServe(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if len(args) != 0 {
		fmt.Fprintf(stderr, "hcasim serve: unexpected arguments %q\n", args)
		fs.Usage()
		return errUsage
	}
	preset, ok := capsPresets[*serveOpts.caps]
	if !ok {
		return fmt.Errorf("--caps %q: want one of %s", *serveOpts.caps, strings.Join(presetNames(), ", "))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*serveOpts.level)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", *serveOpts.level)
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
	dev := hca.New(hca.Options{Caps: &caps, Poll: *serveOpts.poll, Logger: log.With("part", "device")})
	defer dev.Close()
	path := *serveOpts.socket
	l, err := remote.Listen(path)
	if err != nil {
		return err
	}
	srv := &remote.Server{Dev: dev, Log: log}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	log.Info("serving", "socket", path, "caps", *serveOpts.caps, "lid", dev.LID(), "protocol", remote.Version)
	fmt.Fprintf(stdout, "hcasim serve: device LID %d on %s (protocol version %d)\n", dev.LID(), path, remote.Version)
	fmt.Fprintf(stdout, "  connect from Go with verbs.Dial(%q), or try: hcasim perf write --connect %s\n", path, path)
	fmt.Fprintf(stdout, "  other languages: docs/PROTOCOL.md. Stop with Ctrl-C (SIGINT) or SIGTERM.\n")
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
