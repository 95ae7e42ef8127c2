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
//
// Every subcommand answers --help with its usage and an example.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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

var commands = []*command{conformCmd, speedCmd, perfCmd, demoCmd, serveCmd, execCmd, countersCmd, devinfoCmd}

// errUsage reports bad arguments; the usage has already been printed.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func mainUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: hcasim COMMAND [ARGS]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nexample: hcasim conform testvectors\nRun 'hcasim COMMAND --help' for a command's usage.\n")
}

// run executes the command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		mainUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		mainUsage(stdout)
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		fs := flag.NewFlagSet("hcasim "+c.name, flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.Usage = func() {
			w := fs.Output()
			fmt.Fprintf(w, "usage: hcasim %s %s\n\n%s\n\n", c.name, c.usage, c.summary)
			fs.PrintDefaults()
			fmt.Fprintf(w, "\nexample: %s\n", c.example)
		}
		if c.flags != nil {
			c.flags(fs)
		}
		if err := fs.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(stdout)
				fs.Usage()
				return 0
			}
			return 2
		}
		err := c.run(fs, fs.Args(), stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, errUsage):
			return 2
		case errors.As(err, new(exitCode)):
			var ec exitCode
			errors.As(err, &ec)
			return int(ec)
		default:
			fmt.Fprintf(stderr, "hcasim %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "hcasim: unknown command %q\n", args[0])
	mainUsage(stderr)
	return 2
}
