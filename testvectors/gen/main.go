// Command gen writes testvectors/generated.jsonl: conformance cases for
// what the published set lacks (DIX, 520/4048/4160 and other intervals,
// metadata larger than the tuple, partial check masks, streaming splits),
// computed by a reference model written here from FORMAT.md, independent of
// the t10dif engine it checks:
//
//	go run ./testvectors/gen > testvectors/generated.jsonl
//
// TestGeneratedUpToDate fails when the committed file differs from what
// this program writes.
package main

import (
	"bufio"
	"os"

	"github.com/hcasim/hcasim/testvectors/gen/refgen"
)

func main() {
	w := bufio.NewWriter(os.Stdout)
	if err := refgen.Write(w); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	if err := w.Flush(); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
