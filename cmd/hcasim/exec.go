package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/hcasim/hcasim/hca/remote/daemon"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hcasim/hcasim/hca"
)

var execOpts struct {
	socket *string
	lib    *string
	caps   *string
	poll   *time.Duration
}

var execCmd = &command{
	name:    "exec",
	summary: "run an unmodified libibverbs program (ibv_devinfo, perftest, pyverbs...) on the device, through hcasim's libibverbs.so.1",
	usage:   "[--socket PATH] [--lib DIR] [--caps PRESET] [--poll D] -- CMD [ARGS...]",
	example: "hcasim exec -- ibv_devinfo -v",
	flags: func(fs *flag.FlagSet) {
		execOpts.socket = fs.String("socket", "", "a running daemon's socket (default $HCASIM_SOCKET; with neither, a private daemon lives as long as CMD)")
		execOpts.lib = fs.String("lib", "", "the directory of hcasim's libibverbs.so.1 (default $HCASIM_LIB, else lib/ beside the hcasim binary, else ./bin/lib)")
		execOpts.caps = fs.String("caps", "cx5", "the private daemon's capability preset: "+strings.Join(presetNames(), ", "))
		execOpts.poll = fs.Duration("poll", 50*time.Microsecond, "the private daemon's send-engine polling time (as serve --poll)")
	},
	run: runExec,
}

// exitCode is an error that carries the exit status of a child program.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// findLib returns the directory holding hcasim's libibverbs.so.1.
func findLib(flagDir string) (string, error) {
	var tried []string
	try := func(d string) bool {
		if d == "" {
			return false
		}
		tried = append(tried, d)
		_, err := os.Stat(filepath.Join(d, "libibverbs.so.1"))
		return err == nil
	}
	if flagDir != "" {
		if try(flagDir) {
			return filepath.Abs(flagDir)
		}
		return "", fmt.Errorf("--lib %s: no libibverbs.so.1 there", flagDir)
	}
	cands := []string{os.Getenv("HCASIM_LIB")}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			cands = append(cands, filepath.Join(filepath.Dir(exe), "lib"))
		}
	}
	cands = append(cands, filepath.Join("bin", "lib"))
	for _, d := range cands {
		if try(d) {
			return filepath.Abs(d)
		}
	}
	return "", fmt.Errorf("hcasim's libibverbs.so.1 not found (looked in %s): build it with `make` (it needs libibverbs-dev), or name it with --lib or HCASIM_LIB", strings.Join(tried, ", "))
}

func runExec(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "hcasim exec: no command")
		fs.Usage()
		return errUsage
	}
	lib, err := findLib(*execOpts.lib)
	if err != nil {
		return err
	}
	sock := *execOpts.socket
	if sock == "" {
		sock = os.Getenv("HCASIM_SOCKET")
	}
	if sock != "" {
		c, err := net.Dial("unixpacket", sock)
		if err != nil {
			return fmt.Errorf("no daemon at %s: %w", sock, err)
		}
		c.Close()
	} else {
		preset, ok := capsPresets[*execOpts.caps]
		if !ok {
			return fmt.Errorf("--caps %q: want one of %s", *execOpts.caps, strings.Join(presetNames(), ", "))
		}
		dir, err := os.MkdirTemp("", "hcasim-exec-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		sock = filepath.Join(dir, "hcasim.sock")
		caps := preset()
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		dev := hca.New(hca.Options{Caps: &caps, Poll: *execOpts.poll, Logger: log.With("part", "device")})
		defer dev.Close()
		l, err := daemon.Listen(sock)
		if err != nil {
			return err
		}
		srv := &daemon.Server{Dev: dev, Log: log}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(l) }()
		defer func() {
			srv.Shutdown(100 * time.Millisecond)
			<-done
		}()
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	ld := lib
	if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
		ld += ":" + old
	}
	env := append(os.Environ(), "LD_LIBRARY_PATH="+ld, "HCASIM_SOCKET="+sock)
	// The rdma_cm device for the real librdmacm (ibverbs/c/ucma), if built.
	if pre := filepath.Join(lib, "libhcasim_ucma.so"); fileExists(pre) {
		if old := os.Getenv("LD_PRELOAD"); old != "" {
			pre += ":" + old
		}
		env = append(env, "LD_PRELOAD="+pre)
	}
	cmd.Env = env
	// The terminal sends SIGINT to the whole group; SIGTERM is passed on.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			if s != os.Interrupt {
				cmd.Process.Signal(s)
			}
		case err := <-waited:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return exitCode(128 + int(ws.Signal()))
				}
				return exitCode(ee.ExitCode())
			}
			return err
		}
	}
}

// fileExists reports whether path names a file.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
