// Command hcasim is the command-line face of hcasim, a software model of an
// mlx5-style RDMA HCA with T10-DIF / NVMe PI integrity offload.
//
// Usage:
//
//	hcasim conform [-v] FILE_OR_DIR...   run PI conformance vectors
//	hcasim speed [--json] [--filter S]   measure guard and PI kernels
//	hcasim perf write|read|send ...      RDMA over QP pairs, in process or --connect
//	hcasim demo                          an NVMe-oF-style write and read with PI
//	hcasim serve [--socket PATH]         the device as a daemon on a Unix socket
//	hcasim exec -- CMD [ARGS...]         an unmodified libibverbs program on the device
//	hcasim counters [--socket PATH]      a daemon's port counters
//	hcasim devinfo [-v] [--connect PATH] the device as ibv_devinfo shows it, with its signature caps
//	hcasim version                       hcasim's module version and the Go version
//
// Every subcommand answers --help (and hcasim help COMMAND) with its usage
// and an example. Bad arguments exit 2, other failures 1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string // arguments after the command name
	example string
	run     func(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error
	flags   func(fs *flag.FlagSet)
}

var commands = []*command{conformCmd, speedCmd, perfCmd, demoCmd, serveCmd, execCmd, countersCmd, devinfoCmd, versionCmd}

// errUsage reports bad arguments; the usage has already been printed.
var errUsage = errors.New("usage")

// errHelp reports that the usage was asked for and printed (exit 0).
var errHelp = errors.New("help")

// usageError is a bad argument with its message: run prints it and a
// pointer to the usage, and exits 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// badUsage returns a usageError with the formatted message.
func badUsage(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func mainUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: hcasim COMMAND [ARGS]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nexample: hcasim conform testvectors\nRun 'hcasim help COMMAND' or 'hcasim COMMAND --help' for a command's usage.\n")
}

// newFlagSet returns c's flag set, its flags registered, printing its
// usage (and the flag package's messages) to w.
func newFlagSet(c *command, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("hcasim "+c.name, flag.ContinueOnError)
	fs.SetOutput(w)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: hcasim %s %s\n\n%s\n\n", c.name, c.usage, c.summary)
		fs.PrintDefaults()
		fmt.Fprintf(w, "\nexample: %s\n", c.example)
	}
	if c.flags != nil {
		c.flags(fs)
	}
	return fs
}

// parseArgs parses args into fs and prints the usage once: to stdout for
// -h (errHelp), after the flag package's message on its output for a bad
// flag (errUsage). The flag package would print it itself on both.
func parseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		out := fs.Output()
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(out)
		return errHelp
	case err != nil:
		fs.Usage()
		return errUsage
	}
	return nil
}

// parseInterspersed parses args as parseArgs does, with flags allowed
// after the positional arguments (until "--"), and returns the positional
// ones.
func parseInterspersed(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	var pos []string
	for {
		if err := parseArgs(fs, args, stdout); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// run executes the command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		mainUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) == 1 {
			mainUsage(stdout)
			return 0
		}
		return help(args[1:], stdout, stderr)
	case "-version", "--version":
		args = []string{"version"}
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "hcasim: unknown command %q\n", args[0])
		mainUsage(stderr)
		return 2
	}
	fs := newFlagSet(c, stderr)
	err := parseArgs(fs, args[1:], stdout)
	if err == nil {
		err = c.run(fs, fs.Args(), stdout, stderr)
	}
	var ue *usageError
	var ec exitCode
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "hcasim %s: %v\nRun 'hcasim help %s' for its usage.\n", c.name, err, c.name)
		return 2
	case errors.As(err, &ec):
		return int(ec)
	default:
		fmt.Fprintf(stderr, "hcasim %s: %v\n", c.name, err)
		return 1
	}
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// help prints the usage of the command named in args (hcasim help COMMAND).
func help(args []string, stdout, stderr io.Writer) int {
	c := lookup(args[0])
	if c == nil || len(args) > 1 {
		fmt.Fprintf(stderr, "hcasim help: no command %q\n", strings.Join(args, " "))
		mainUsage(stderr)
		return 2
	}
	newFlagSet(c, stdout).Usage()
	return 0
}

var versionCmd = &command{
	name:    "version",
	summary: "print hcasim's version (the module version it was built at, or devel) and the Go version",
	usage:   "",
	example: "hcasim version",
	run: func(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
		if len(args) != 0 {
			fmt.Fprintf(stderr, "hcasim version: unexpected arguments %q\n", args)
			fs.Usage()
			return errUsage
		}
		fmt.Fprintf(stdout, "hcasim %s %s %s/%s\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return nil
	},
}

// version returns the main module's version from the build information:
// a release tag, a pseudo-version from the VCS stamp, or devel.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Version == "" || bi.Main.Version == "(devel)" {
		return "devel"
	}
	return bi.Main.Version
}
