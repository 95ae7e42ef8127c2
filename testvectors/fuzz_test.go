package testvectors

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxFuzzData bounds the data a fuzzed case may build before it is run, to
// keep iterations cheap (the format allows up to MaxDataLen).
const maxFuzzData = 1 << 18

// FuzzParseCase: any bytes given to ParseCase never panic; a rejected line
// is ErrMalformed; an accepted case survives a JSON round trip, parses the
// same through Parse, and runs (twice, with the same result) without
// panicking.
func FuzzParseCase(f *testing.F) {
	// Every published case is a seed (and so runs under plain go test).
	if fh, err := os.Open("public.jsonl"); err == nil {
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, MaxLineLen)
		for sc.Scan() {
			f.Add(append([]byte(nil), sc.Bytes()...))
		}
		fh.Close()
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"id":"x","op":"crc","params":{"algo":"crc16_t10dif"},"input":{"data":{"hex":""}},"input_len":0,"input_sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","expected":{"value":"0x0000"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		c, err := ParseCase(line)
		if !bytes.ContainsAny(line, "\r\n") {
			// Parse of the same line agrees with ParseCase.
			cs, perr := Parse(bytes.NewReader(append(append([]byte(nil), line...), '\n')))
			switch {
			case err != nil && (perr == nil || !errors.Is(perr, ErrMalformed)):
				t.Fatalf("ParseCase: %v; Parse: %v", err, perr)
			case err == nil && (perr != nil || len(cs) != 1):
				t.Fatalf("ParseCase ok; Parse: %d cases, %v", len(cs), perr)
			case err == nil:
				c1 := c
				c1.Line = 1
				require.Equal(t, c1, cs[0], "Parse and ParseCase differ")
			}
		}
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed, "ParseCase error")
			return
		}
		require.NotEmpty(t, c.ID, "accepted a case without an id: %s", line)
		require.NotNil(t, c.Input.Data, "accepted a case without input data: %s", line)
		require.NotNil(t, c.InputLen, "accepted a case without input_len: %s", line)
		require.NotNil(t, c.Expected, "accepted a case without expected: %s", line)
		// Round trip through JSON.
		b, err := json.Marshal(&c)
		require.NoError(t, err, "Marshal")
		c2, err := ParseCase(b)
		require.NoError(t, err, "re-parse of %s", b)
		b2, err := json.Marshal(&c2)
		require.NoError(t, err, "Marshal of the re-parsed case")
		require.Equal(t, string(b), string(b2), "round trip changed the case")
		if d := c.Input.Data; d.Len != nil && *d.Len > maxFuzzData {
			return
		}
		r := c.Run()
		require.Same(t, &c, r.Case, "Result.Case is not the case run")
		require.Equal(t, len(r.Diffs) == 0, r.Passed(), "Passed() with %d diffs", len(r.Diffs))
		require.NotContains(t, r.Diffs, "", "empty diff line")
		// Run does not change the case: a second run reports the same.
		require.Equal(t, r.Diffs, c.Run().Diffs, "second run differs")
	})
}

// The published cases pass the round trip and still pass afterwards; the
// split extension leaves every result unchanged.
func TestPublicRoundTripAndSplits(t *testing.T) {
	cs, err := Load("public.jsonl")
	require.NoError(t, err)
	for i := range cs {
		c := cs[i]
		b, err := json.Marshal(&c)
		require.NoError(t, err, c.ID)
		c2, err := ParseCase(b)
		require.NoError(t, err, c.ID)
		assert.Empty(t, c2.Run().Diffs, "%s after a round trip", c.ID)
		if c.Op == "crc" {
			continue
		}
		for _, splits := range [][]Num{{1}, {3, 509}, {7, 1, 4096}, {520}} {
			c3 := c2
			c3.Params.Splits = splits
			assert.Empty(t, c3.Run().Diffs, "%s with splits %v", c.ID, splits)
		}
	}
}
