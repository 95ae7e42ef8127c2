package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/hcasim/hcasim/testvectors"
)

var conformVerbose *bool

var conformCmd = &command{
	name:    "conform",
	summary: "run PI conformance vectors (JSON Lines, FORMAT.md) against the t10dif engine",
	usage:   "[-v] FILE_OR_DIR...",
	example: "hcasim conform -v testvectors/public.jsonl",
	flags: func(fs *flag.FlagSet) {
		conformVerbose = fs.Bool("v", false, "print a line for every case, not only failures")
	},
	run: runConform,
}

// errFailed reports that cases failed; the summary says how many.
var errFailed = errors.New("conformance failures")

func runConform(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "hcasim conform: no vector files given")
		fs.Usage()
		return errUsage
	}
	files, err := testvectors.Files(args)
	if err != nil {
		return err
	}
	passed, failed, malformed := 0, 0, 0
	for _, f := range files {
		cases, err := testvectors.Load(f)
		if err != nil {
			fmt.Fprintf(stderr, "MALFORMED %v\n", err)
			malformed++
			continue
		}
		for i := range cases {
			c := &cases[i]
			r := c.Run()
			if r.Passed() {
				passed++
				if *conformVerbose {
					fmt.Fprintf(stdout, "ok   %s %s\n", c.ID, c.Desc)
				}
				continue
			}
			failed++
			fmt.Fprintf(stdout, "FAIL %s %s: %s\n", c.ID, c.Desc, strings.Join(r.Diffs, "; "))
		}
	}
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	switch {
	case malformed > 0:
		return fmt.Errorf("%d malformed file(s)", malformed)
	case failed > 0:
		return errFailed
	}
	return nil
}
