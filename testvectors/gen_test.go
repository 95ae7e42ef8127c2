package testvectors_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/hcasim/hcasim/testvectors/gen/refgen"
)

// The committed generated.jsonl is what the reference generator writes.
func TestGeneratedUpToDate(t *testing.T) {
	var b bytes.Buffer
	if err := refgen.Write(&b); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("generated.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		t.Fatal("generated.jsonl is stale: run go run ./testvectors/gen > testvectors/generated.jsonl")
	}
}
