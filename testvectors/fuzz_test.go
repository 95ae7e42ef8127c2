package testvectors

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
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
				if !reflect.DeepEqual(cs[0], c1) {
					t.Fatalf("Parse and ParseCase differ")
				}
			}
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseCase error %v is not ErrMalformed", err)
			}
			return
		}
		if c.ID == "" || c.Input.Data == nil || c.InputLen == nil || c.Expected == nil {
			t.Fatalf("accepted a case without required keys: %s", line)
		}
		// Round trip through JSON.
		b, err := json.Marshal(&c)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		c2, err := ParseCase(b)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", b, err)
		}
		if b2, err := json.Marshal(&c2); err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("round trip changed the case:\n%s\n%s", b, b2)
		}
		if d := c.Input.Data; d.Len != nil && *d.Len > maxFuzzData {
			return
		}
		r := c.Run()
		if r.Case != &c {
			t.Fatalf("Result.Case is not the case run")
		}
		if r.Passed() != (len(r.Diffs) == 0) {
			t.Fatalf("Passed() = %v with %d diffs", r.Passed(), len(r.Diffs))
		}
		for _, d := range r.Diffs {
			if d == "" {
				t.Fatalf("empty diff line")
			}
		}
		// Run does not change the case: a second run reports the same.
		if r2 := c.Run(); !reflect.DeepEqual(r.Diffs, r2.Diffs) {
			t.Fatalf("second run differs: %q vs %q", r.Diffs, r2.Diffs)
		}
	})
}

// The published cases pass the round trip and still pass afterwards; the
// split extension leaves every result unchanged.
func TestPublicRoundTripAndSplits(t *testing.T) {
	cs, err := Load("public.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for i := range cs {
		c := cs[i]
		b, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseCase(b)
		if err != nil {
			t.Fatalf("%s: %v", c.ID, err)
		}
		if r := c2.Run(); !r.Passed() {
			t.Errorf("%s after a round trip: %q", c.ID, r.Diffs)
		}
		if c.Op == "crc" {
			continue
		}
		for _, splits := range [][]Num{{1}, {3, 509}, {7, 1, 4096}, {520}} {
			c3 := c2
			c3.Params.Splits = splits
			if r := c3.Run(); !r.Passed() {
				t.Errorf("%s with splits %v: %q", c.ID, splits, r.Diffs)
			}
		}
	}
}
