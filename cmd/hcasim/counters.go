package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/hcasim/hcasim/hca/verbs"
)

var countersOpts struct {
	socket *string
}

var countersCmd = &command{
	name:    "counters",
	summary: "print the port counters of a running daemon (packets, bytes, retransmissions, NAKs, ICRC errors, …) and what its device holds (functions, QPs, mkeys, mappings)",
	usage:   "[--socket PATH]",
	example: "hcasim counters --socket /tmp/a.sock",
	flags: func(fs *flag.FlagSet) {
		countersOpts.socket = fs.String("socket", envOr("HCASIM_SOCKET", "hcasim.sock"), "the daemon's socket")
	},
	run: runCounters,
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func runCounters(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if len(args) != 0 {
		fmt.Fprintf(stderr, "hcasim counters: unexpected arguments %q\n", args)
		fs.Usage()
		return errUsage
	}
	ctx, err := verbs.Dial(*countersOpts.socket)
	if err != nil {
		return err
	}
	defer ctx.Close()
	c, err := ctx.PortCounters()
	if err != nil {
		return err
	}
	attrs := c.LogAttrs()
	fmt.Fprintf(stdout, "port 1 counters (%s):\n", *countersOpts.socket)
	if len(attrs) == 0 {
		fmt.Fprintln(stdout, "  all zero (no traffic on the wire)")
	}
	for i := 0; i+1 < len(attrs); i += 2 {
		fmt.Fprintf(stdout, "  %-18s %d\n", attrs[i], attrs[i+1])
	}
	u, err := ctx.Usage()
	if err != nil {
		return err
	}
	// The device's objects, this query's own function among them.
	fmt.Fprintf(stdout, "device usage (this query's function included):\n")
	for i, v := range u.Values() {
		fmt.Fprintf(stdout, "  %-18s %d\n", u.Names()[i], v)
	}
	return nil
}
