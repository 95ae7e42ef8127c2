package testvectors_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/hcasim/hcasim/testvectors/gen/refgen"
	"github.com/stretchr/testify/require"
)

// The committed generated.jsonl is what the reference generator writes.
func TestGeneratedUpToDate(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, refgen.Write(&b))
	got, err := os.ReadFile("generated.jsonl")
	require.NoError(t, err)
	require.True(t, bytes.Equal(got, b.Bytes()),
		"generated.jsonl is stale: run go run ./testvectors/gen > testvectors/generated.jsonl")
}
