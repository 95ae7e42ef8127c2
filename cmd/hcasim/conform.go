package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hcasim/hcasim/testvectors"
)

var conformVerbose *bool

var conformCmd = &command{
	name:    "conform",
	summary: "run PI conformance vectors (JSON Lines, FORMAT.md) against the t10dif engine",
	usage:   "[-v] FILE_OR_DIR... (flags may follow the paths)",
	example: "hcasim conform -v testvectors/public.jsonl",
	flags: func(fs *flag.FlagSet) {
		conformVerbose = fs.Bool("v", false, "print a line for every case, not only failures")
	},
	run: runConform,
}

// errFailed reports that cases failed; the summary says how many.
var errFailed = errors.New("conformance failures")

func runConform(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	args, err := parseInterspersed(fs, args, stdout)
	if err != nil {
		return err
	}
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
	var empty []string
	for _, f := range files {
		cases, bad, err := loadVectors(f, stderr)
		if err != nil {
			return err
		}
		malformed += bad
		if len(cases) == 0 && bad == 0 {
			fmt.Fprintf(stderr, "EMPTY %s: no vectors\n", f)
			empty = append(empty, f)
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
	if malformed > 0 {
		fmt.Fprintf(stdout, "%d passed, %d failed, %d malformed\n", passed, failed, malformed)
	} else {
		fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	}
	switch {
	case len(empty) > 0:
		return fmt.Errorf("no vectors in %s", strings.Join(empty, ", "))
	case malformed > 0:
		return fmt.Errorf("%d malformed line(s) (reported as FILE:LINE above)", malformed)
	case failed > 0:
		return errFailed
	}
	return nil
}

// loadVectors reads a vector file line by line: a malformed line (or a
// reused id) is reported to w as FILE:LINE and counted, and the other
// lines' cases are returned. Only a file that cannot be read is an error.
func loadVectors(path string, w io.Writer) (cases []testvectors.Case, malformed int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	seen := map[string]int{}
	for line := 1; ; line++ {
		b, err := r.ReadBytes('\n')
		if len(b) == 0 && errors.Is(err, io.EOF) {
			return cases, malformed, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, 0, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		var c testvectors.Case
		var perr error
		switch {
		case len(b) > testvectors.MaxLineLen:
			perr = fmt.Errorf("a line of %d bytes, longer than %d: %w", len(b), testvectors.MaxLineLen, testvectors.ErrMalformed)
		default:
			c, perr = testvectors.ParseCase(bytes.TrimSuffix(b, []byte("\n")))
		}
		if perr == nil {
			if prev, dup := seen[c.ID]; dup {
				perr = fmt.Errorf("id %q already used on line %d: %w", c.ID, prev, testvectors.ErrMalformed)
			}
		}
		if perr != nil {
			fmt.Fprintf(w, "MALFORMED %s:%d: %v\n", path, line, perr)
			malformed++
			continue
		}
		seen[c.ID] = line
		c.Line = line
		cases = append(cases, c)
	}
}
