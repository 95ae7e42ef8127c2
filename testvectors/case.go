// Package testvectors holds hcasim's PI conformance vectors and the runner
// that checks the t10dif engine against them.
//
// The vectors are JSON Lines in the format of ../shared/vectors/FORMAT.md
// (copied into FORMAT.md here): public.jsonl is the published set;
// generated.jsonl holds cases the project generates from its own reference
// path (testvectors/gen) for what the published set lacks, using the
// extensions documented in EXTENSIONS.md. [Load] parses a file, reporting malformed lines
// with their numbers, and [Case.Run] runs one case and lists every
// expected key that differs.
package testvectors

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Limits that keep a hostile vector file from exhausting memory.
const (
	// MaxDataLen is the largest data spec length accepted.
	MaxDataLen = 64 << 20
	// MaxLineLen is the longest line accepted.
	MaxLineLen = 16 << 20
)

// ErrMalformed matches every error about a file or case that does not
// follow the format.
var ErrMalformed = errors.New("malformed vector")

// Case is one conformance case.
type Case struct {
	// Line is the 1-based line of the case in its file.
	Line int `json:"-"`

	ID          string    `json:"id"`
	Op          string    `json:"op"`
	Desc        string    `json:"desc"`
	Source      string    `json:"source,omitempty"`
	Params      Params    `json:"params"`
	Input       Input     `json:"input"`
	InputLen    *int64    `json:"input_len"`
	InputSHA256 string    `json:"input_sha256"`
	Expected    *Expected `json:"expected"`
}

// Params are a case's parameters; pointer fields are absent when nil.
type Params struct {
	Algo       *string `json:"algo,omitempty"`
	PIFormat   *string `json:"pi_format,omitempty"`
	Guard      *string `json:"guard,omitempty"`
	DIFType    *Num    `json:"dif_type,omitempty"`
	Interval   *Num    `json:"interval,omitempty"`
	Blocks     *Num    `json:"blocks,omitempty"`
	RefTag     *Num    `json:"ref_tag,omitempty"`
	AppTag     *Num    `json:"app_tag,omitempty"`
	AppTagMask *Num    `json:"app_tag_mask,omitempty"`
	CheckMask  *Num    `json:"check_mask,omitempty"`
	Escape     *string `json:"escape,omitempty"`
	DstGuard   *string `json:"dst_guard,omitempty"`

	// Extensions (FORMAT.md, "Extensions"); absent in the published set.
	Layout   *string `json:"layout,omitempty"`
	MetaSize *Num    `json:"meta_size,omitempty"`
	PIFirst  *bool   `json:"pi_first,omitempty"`
	Splits   []Num   `json:"splits,omitempty"`
	// CRCSeed is the CRC register's initial value of the crc32 and crc64
	// formats: "zeros" (the default) or "ones".
	CRCSeed *string `json:"crc_seed,omitempty"`
}

// Input says how to build the input bytes.
type Input struct {
	Data      *DataSpec  `json:"data"`
	Mutations []Mutation `json:"data_mutations,omitempty"`
	PIHex     *string    `json:"pi_hex,omitempty"`
}

// DataSpec is one of the data forms of FORMAT.md §2.
type DataSpec struct {
	Hex     *string `json:"hex,omitempty"`
	ASCII   *string `json:"ascii,omitempty"`
	Pattern *string `json:"pattern,omitempty"`
	Byte    *Num    `json:"byte,omitempty"`
	Len     *Num    `json:"len,omitempty"`
	PRNG    *string `json:"prng,omitempty"`
	Seed    *Num    `json:"seed,omitempty"`
}

// Mutation XORs one byte of the data.
type Mutation struct {
	Offset *Num `json:"offset"`
	XOR    *Num `json:"xor"`
}

// Expected holds the expected results; absent keys are not compared.
type Expected struct {
	Value        *string         `json:"value,omitempty"`
	OutputLen    *Num            `json:"output_len,omitempty"`
	OutputSHA256 *string         `json:"output_sha256,omitempty"`
	OutputHex    *string         `json:"output_hex,omitempty"`
	PIHex        *string         `json:"pi_hex,omitempty"`
	Error        json.RawMessage `json:"error,omitempty"`
}

// ErrorObject is the error object of FORMAT.md §4.5; absent keys are nil.
type ErrorObject struct {
	Type            *string `json:"type"`
	Block           *Num    `json:"block"`
	Offset          *Num    `json:"offset"`
	ProtectedOffset *Num    `json:"protected_offset"`
	Expected        *string `json:"expected"`
	Actual          *string `json:"actual"`
}

// Num is a JSON number that must be a non-negative integer below 2^53.
type Num uint64

// UnmarshalJSON implements json.Unmarshaler.
func (n *Num) UnmarshalJSON(b []byte) error {
	s := string(b)
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v >= 1<<53 {
		return fmt.Errorf("%s is not a non-negative integer below 2^53", s)
	}
	*n = Num(v)
	return nil
}

// Load reads a vector file. A line that is not a well-formed case makes it
// fail with an error naming the file and line (matching ErrMalformed).
func Load(path string) ([]Case, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cs, err := Parse(f)
	if err != nil {
		return cs, fmt.Errorf("%s:%w", path, err)
	}
	return cs, nil
}

// Parse reads JSON Lines cases from r. Blank lines are not allowed; ids must
// be unique.
func Parse(r io.Reader) ([]Case, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLineLen)
	var cs []Case
	seen := map[string]int{}
	line := 0
	for sc.Scan() {
		line++
		c, err := ParseCase(sc.Bytes())
		if err != nil {
			return cs, fmt.Errorf("%d: %w", line, err)
		}
		if prev, dup := seen[c.ID]; dup {
			return cs, fmt.Errorf("%d: id %q already used on line %d: %w", line, c.ID, prev, ErrMalformed)
		}
		seen[c.ID] = line
		c.Line = line
		cs = append(cs, c)
	}
	if err := sc.Err(); err != nil {
		return cs, fmt.Errorf("%d: %w: %w", line+1, err, ErrMalformed)
	}
	return cs, nil
}

// ParseCase parses one line.
func ParseCase(b []byte) (Case, error) {
	var c Case
	if len(bytes.TrimSpace(b)) == 0 {
		return c, fmt.Errorf("blank line: %w", ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%v: %w", err, ErrMalformed)
	}
	if dec.More() {
		return c, fmt.Errorf("trailing data after the case: %w", ErrMalformed)
	}
	if err := c.check(); err != nil {
		return c, fmt.Errorf("case %q: %v: %w", c.ID, err, ErrMalformed)
	}
	return c, nil
}

// check validates what the JSON decoder cannot.
func (c *Case) check() error {
	switch {
	case c.ID == "":
		return errors.New("missing id")
	case c.Input.Data == nil:
		return errors.New("missing input.data")
	case c.InputLen == nil:
		return errors.New("missing input_len")
	case c.InputSHA256 == "":
		return errors.New("missing input_sha256")
	case c.Expected == nil:
		return errors.New("missing expected")
	}
	switch c.Op {
	case "crc":
		if c.Params.Algo == nil {
			return errors.New("crc case without params.algo")
		}
	case "generate", "verify", "strip", "pass", "translate-guard":
		p := &c.Params
		for name, ok := range map[string]bool{
			"pi_format": p.PIFormat != nil, "guard": p.Guard != nil, "dif_type": p.DIFType != nil,
			"interval": p.Interval != nil, "blocks": p.Blocks != nil, "ref_tag": p.RefTag != nil,
			"app_tag": p.AppTag != nil, "app_tag_mask": p.AppTagMask != nil,
			"check_mask": p.CheckMask != nil, "escape": p.Escape != nil,
		} {
			if !ok {
				return fmt.Errorf("%s case without params.%s", c.Op, name)
			}
		}
		if c.Op == "translate-guard" && p.DstGuard == nil {
			return errors.New("translate-guard case without params.dst_guard")
		}
		if len(c.Expected.Error) == 0 {
			return fmt.Errorf("%s case without expected.error", c.Op)
		}
	default:
		return fmt.Errorf("unknown op %q", c.Op)
	}
	return nil
}

// Files expands the arguments into vector files: a directory stands for
// every *.jsonl file in it, in name order.
func Files(args []string) ([]string, error) {
	var files []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, a)
			continue
		}
		m, err := filepath.Glob(filepath.Join(a, "*.jsonl"))
		if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("%s: no *.jsonl files", a)
		}
		sort.Strings(m)
		files = append(files, m...)
	}
	return files, nil
}

// data builds the (mutated) data bytes of the input.
func (c *Case) data() ([]byte, error) {
	d := c.Input.Data
	var b []byte
	forms := 0
	for _, set := range []bool{d.Hex != nil, d.ASCII != nil, d.Pattern != nil, d.PRNG != nil} {
		if set {
			forms++
		}
	}
	if forms != 1 {
		return nil, fmt.Errorf("data spec must have exactly one of hex, ascii, pattern, prng (has %d)", forms)
	}
	length := func() (int, error) {
		if d.Len == nil {
			return 0, errors.New("data spec without len")
		}
		if *d.Len > MaxDataLen {
			return 0, fmt.Errorf("data len %d exceeds %d", *d.Len, MaxDataLen)
		}
		return int(*d.Len), nil
	}
	switch {
	case d.Hex != nil:
		var err error
		if b, err = hex.DecodeString(*d.Hex); err != nil {
			return nil, fmt.Errorf("data hex: %v", err)
		}
	case d.ASCII != nil:
		b = []byte(*d.ASCII)
	case d.Pattern != nil:
		n, err := length()
		if err != nil {
			return nil, err
		}
		b = make([]byte, n)
		switch *d.Pattern {
		case "zeros":
		case "ones":
			for i := range b {
				b[i] = 0xFF
			}
		case "incrementing":
			for i := range b {
				b[i] = byte(i)
			}
		case "decrementing":
			for i := range b {
				b[i] = 255 - byte(i)
			}
		case "fill":
			if d.Byte == nil || *d.Byte > 255 {
				return nil, errors.New("fill pattern needs byte 0..255")
			}
			for i := range b {
				b[i] = byte(*d.Byte)
			}
		default:
			return nil, fmt.Errorf("unknown pattern %q", *d.Pattern)
		}
	case d.PRNG != nil:
		if *d.PRNG != "splitmix64" {
			return nil, fmt.Errorf("unknown prng %q", *d.PRNG)
		}
		if d.Seed == nil {
			return nil, errors.New("prng without seed")
		}
		n, err := length()
		if err != nil {
			return nil, err
		}
		b = SplitMix64(uint64(*d.Seed), n)
	}
	for i, m := range c.Input.Mutations {
		if m.Offset == nil || m.XOR == nil {
			return nil, fmt.Errorf("mutation %d needs offset and xor", i)
		}
		if *m.XOR < 1 || *m.XOR > 255 {
			return nil, fmt.Errorf("mutation %d: xor %d not in 1..255", i, *m.XOR)
		}
		if uint64(*m.Offset) >= uint64(len(b)) {
			return nil, fmt.Errorf("mutation %d: offset %d beyond %d data bytes", i, *m.Offset, len(b))
		}
		b[*m.Offset] ^= byte(*m.XOR)
	}
	return b, nil
}

// SplitMix64 returns the first n bytes of Vigna's SplitMix64 stream from
// seed, each 64-bit output little-endian (FORMAT.md §2).
func SplitMix64(seed uint64, n int) []byte {
	b := make([]byte, (n+7)&^7)
	state := seed
	for i := 0; i < len(b); i += 8 {
		state += 0x9E3779B97F4A7C15
		z := state
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		z ^= z >> 31
		binary.LittleEndian.PutUint64(b[i:], z)
	}
	return b[:n]
}

// hexValue parses a "0x…" hex string of the given digit width.
func hexValue(s string, digits int) (uint64, error) {
	h, ok := strings.CutPrefix(s, "0x")
	if !ok || len(h) != digits {
		return 0, fmt.Errorf("%q is not 0x and %d hex digits", s, digits)
	}
	return strconv.ParseUint(h, 16, 64)
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
