package testvectors

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hcasim/hcasim/t10dif"
)

// Result is the outcome of one case.
type Result struct {
	Case *Case
	// Diffs lists what differed from the expectation, one line each; the
	// case passed when it is empty.
	Diffs []string
}

// Passed reports whether the case passed.
func (r *Result) Passed() bool { return len(r.Diffs) == 0 }

func (r *Result) diff(format string, args ...any) {
	r.Diffs = append(r.Diffs, fmt.Sprintf(format, args...))
}

// Run builds the case's input, checks it against input_len and
// input_sha256, runs the operation and compares every expected key.
func (c *Case) Run() Result {
	r := Result{Case: c}
	data, err := c.data()
	if err != nil {
		r.diff("input: %v", err)
		return r
	}
	if c.Op == "crc" {
		c.runCRC(&r, data)
		return r
	}
	pc, err := c.piConfig()
	if err != nil {
		r.diff("params: %v", err)
		return r
	}
	in, err := pc.input(c, data)
	if err != nil {
		r.diff("input: %v", err)
		return r
	}
	if !c.checkInput(&r, in.bytes()) {
		return r
	}
	out, perr, err := pc.run(c, in)
	if err != nil {
		r.diff("run: %v", err)
		return r
	}
	c.compareOutput(&r, pc, out)
	c.compareError(&r, pc, perr)
	return r
}

func (c *Case) checkInput(r *Result, in []byte) bool {
	ok := true
	if int64(len(in)) != *c.InputLen {
		r.diff("input_len: built %d bytes, case says %d", len(in), *c.InputLen)
		ok = false
	}
	if got := sha(in); got != strings.ToLower(c.InputSHA256) {
		r.diff("input_sha256: built %s, case says %s", got, c.InputSHA256)
		ok = false
	}
	return ok
}

func (c *Case) runCRC(r *Result, data []byte) {
	if !c.checkInput(r, data) {
		return
	}
	var got string
	switch *c.Params.Algo {
	case "crc16_t10dif":
		got = fmt.Sprintf("0x%04x", t10dif.CRC16(0, data))
	case "crc32c":
		got = fmt.Sprintf("0x%08x", t10dif.CRC32C(0, data))
	case "crc64_nvme":
		got = fmt.Sprintf("0x%016x", t10dif.CRC64NVMe(0, data))
	case "ip_csum":
		got = fmt.Sprintf("0x%04x", t10dif.IPChecksum(data))
	default:
		r.diff("params: unknown algo %q", *c.Params.Algo)
		return
	}
	if c.Expected.Value == nil {
		r.diff("expected: crc case without value")
		return
	}
	if want := strings.ToLower(*c.Expected.Value); got != want {
		r.diff("value: got %s, want %s", got, want)
	}
}

// piCase is a PI case's parameters in engine terms.
type piCase struct {
	d        t10dif.Domain
	out      t10dif.Domain // output domain of translate-guard
	check    t10dif.CheckMask
	blocks   int
	dix      bool
	splits   []int
	metaSize int // bytes per block in pi_hex
}

func parseGuard(s string) (t10dif.GuardType, error) {
	switch s {
	case "crc16":
		return t10dif.GuardCRC16, nil
	case "ipcsum":
		return t10dif.GuardIPChecksum, nil
	case "crc64":
		return t10dif.GuardCRC64NVMe, nil
	case "crc32":
		return t10dif.GuardCRC32, nil
	case "crc32c":
		return t10dif.GuardCRC32C, nil
	case "crc64xp10":
		return t10dif.GuardCRC64XP10, nil
	}
	return 0, fmt.Errorf("unknown guard %q", s)
}

func (c *Case) piConfig() (*piCase, error) {
	p := &c.Params
	pc := &piCase{}
	d := &pc.d
	switch *p.PIFormat {
	case "pi8":
		d.Format = t10dif.FormatPI8
	case "pi16":
		d.Format = t10dif.FormatPI16
	case "crc32":
		d.Format = t10dif.FormatCRC32
	case "crc64":
		d.Format = t10dif.FormatCRC64
	default:
		return nil, fmt.Errorf("unknown pi_format %q", *p.PIFormat)
	}
	var err error
	if d.Guard, err = parseGuard(*p.Guard); err != nil {
		return nil, err
	}
	switch *p.Escape {
	case "app":
		d.Escape = t10dif.EscapeApp
	case "app_ref":
		d.Escape = t10dif.EscapeAppRef
	case "none":
		d.Escape = t10dif.EscapeNone
	default:
		return nil, fmt.Errorf("unknown escape %q", *p.Escape)
	}
	if *p.DIFType > 3 || *p.AppTag > 0xFFFF || *p.AppTagMask > 0xFFFF || *p.CheckMask > 0xFF {
		return nil, errors.New("dif_type, app_tag, app_tag_mask or check_mask out of range")
	}
	if *p.Interval > t10dif.MaxInterval || *p.Blocks > MaxDataLen {
		return nil, errors.New("interval or blocks out of range")
	}
	d.Type = t10dif.DIFType(*p.DIFType)
	if d.Format.IsCRC() {
		// A CRC block signature: no type, tags or escapes (EXTENSIONS.md).
		if *p.Escape != "none" {
			return nil, fmt.Errorf("escape %q with %s", *p.Escape, *p.PIFormat)
		}
		d.Escape = t10dif.EscapeDefault
	}
	if p.CRCSeed != nil {
		switch {
		case !d.Format.IsCRC():
			return nil, fmt.Errorf("crc_seed with %s", *p.PIFormat)
		case *p.CRCSeed == "ones":
			d.Seed = 1<<32 - 1
			if d.Format == t10dif.FormatCRC64 {
				d.Seed = ^uint64(0)
			}
		case *p.CRCSeed != "zeros":
			return nil, fmt.Errorf("unknown crc_seed %q", *p.CRCSeed)
		}
	}
	d.Interval = int(*p.Interval)
	d.RefTag = uint64(*p.RefTag)
	d.AppTag = uint16(*p.AppTag)
	d.AppTagMask = uint16(*p.AppTagMask)
	pc.check = t10dif.CheckMask(*p.CheckMask)
	pc.blocks = int(*p.Blocks)
	if p.MetaSize != nil {
		if *p.MetaSize > t10dif.MaxMetaSize {
			return nil, errors.New("meta_size out of range")
		}
		d.MetaSize = int(*p.MetaSize)
	}
	if p.PIFirst != nil {
		d.PIFirst = *p.PIFirst
	}
	if p.Layout != nil {
		switch *p.Layout {
		case "dif":
		case "dix":
			pc.dix = true
			d.Separate = true
		default:
			return nil, fmt.Errorf("unknown layout %q", *p.Layout)
		}
	}
	for _, n := range p.Splits {
		if n == 0 || n > MaxDataLen {
			return nil, fmt.Errorf("split %d out of range", n)
		}
		pc.splits = append(pc.splits, int(n))
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	pc.metaSize = d.Meta()
	pc.out = *d
	if c.Op == "translate-guard" {
		if pc.out.Guard, err = parseGuard(*p.DstGuard); err != nil {
			return nil, err
		}
		if err := pc.out.Validate(); err != nil {
			return nil, err
		}
	}
	return pc, nil
}

// stream is an op's input or output: data plus metadata, interleaved
// (Meta nil) or separate.
type stream struct{ t10dif.Buf }

// bytes returns the op's byte string: the interleaved stream, or for the
// dix layout the data followed by the metadata.
func (s stream) bytes() []byte {
	if s.Meta == nil {
		return s.Data
	}
	return append(append([]byte(nil), s.Data...), s.Meta...)
}

// input builds the op's input from the (mutated) data and input.pi_hex.
func (pc *piCase) input(c *Case, data []byte) (stream, error) {
	iv := pc.d.Interval
	if len(data) != pc.blocks*iv {
		return stream{}, fmt.Errorf("%d data bytes for %d blocks of %d", len(data), pc.blocks, iv)
	}
	if c.Op == "generate" {
		return stream{t10dif.Buf{Data: data}}, nil
	}
	if c.Input.PIHex == nil {
		return stream{}, errors.New("missing input.pi_hex")
	}
	pi, err := hex.DecodeString(*c.Input.PIHex)
	if err != nil {
		return stream{}, fmt.Errorf("pi_hex: %v", err)
	}
	ms := pc.metaSize
	if len(pi) != pc.blocks*ms {
		return stream{}, fmt.Errorf("pi_hex has %d bytes, want %d blocks of %d", len(pi), pc.blocks, ms)
	}
	if pc.dix {
		return stream{t10dif.Buf{Data: data, Meta: pi}}, nil
	}
	b := make([]byte, 0, len(data)+len(pi))
	for i := range pc.blocks {
		b = append(b, data[i*iv:(i+1)*iv]...)
		b = append(b, pi[i*ms:(i+1)*ms]...)
	}
	return stream{t10dif.Buf{Data: b}}, nil
}

func (pc *piCase) config(op string) t10dif.Config {
	switch op {
	case "generate":
		return t10dif.Config{Out: pc.d}
	case "verify":
		return t10dif.Config{In: pc.d, Check: pc.check, Discard: true}
	case "strip":
		return t10dif.Config{In: pc.d, Check: pc.check}
	case "pass":
		// pass copies the whole tuple (a CRC format's is its guard).
		all := t10dif.CheckAll
		if pc.d.Format.IsCRC() {
			all = pc.d.Format.GuardMask()
		}
		return t10dif.Config{In: pc.d, Out: pc.d, Check: pc.check, Copy: all}
	default: // translate-guard
		return t10dif.Config{In: pc.d, Out: pc.out, Check: pc.check,
			Copy: tagsOf(pc.d.Format)}
	}
}

// run executes the op; perr is the PI error it reported, if any.
func (pc *piCase) run(c *Case, in stream) (out stream, perr *t10dif.Error, err error) {
	cfg := pc.config(c.Op)
	dataLen := pc.blocks * pc.d.Interval
	metaLen := pc.blocks * pc.metaSize
	switch {
	case cfg.Discard:
	case !cfg.Out.HasPI():
		out.Data = make([]byte, dataLen)
	case pc.dix:
		out.Data, out.Meta = make([]byte, dataLen), make([]byte, metaLen)
	default:
		out.Data = make([]byte, dataLen+metaLen)
	}
	if pc.splits == nil {
		_, err = t10dif.Apply(&cfg, out.Buf, in.Buf)
	} else {
		err = pc.runSplit(&cfg, out.Buf, in.Buf)
	}
	if errors.As(err, &perr) {
		err = nil
	}
	return out, perr, err
}

// runSplit feeds the input, and offers the output, in pieces of the sizes in
// pc.splits (cycled), through a Stream.
func (pc *piCase) runSplit(cfg *t10dif.Config, dst, src t10dif.Buf) error {
	s, err := t10dif.NewStream(cfg)
	if err != nil {
		return err
	}
	s.SetMeta(src.Meta, dst.Meta)
	in, out := src.Data, dst.Data
	k := 0
	piece := func(b []byte) []byte {
		n := min(pc.splits[k%len(pc.splits)], len(b))
		k++
		return b[:n]
	}
	for len(in) > 0 {
		si, so := piece(in), piece(out)
		nd, ns, err := s.Process(so, si)
		if err != nil {
			return err
		}
		if nd == 0 && ns == 0 && len(so) == 0 && !cfg.Discard {
			return errors.New("stream made no progress with output space exhausted")
		}
		in, out = in[ns:], out[nd:]
	}
	// Flush whatever output is still pending (the last tuple).
	for range 2 {
		nd, _, err := s.Process(out, nil)
		if err != nil {
			return err
		}
		out = out[nd:]
	}
	return s.Close()
}

func (c *Case) compareOutput(r *Result, pc *piCase, out stream) {
	e := c.Expected
	if c.Op == "verify" {
		if e.OutputLen != nil || e.OutputSHA256 != nil || e.OutputHex != nil || e.PIHex != nil {
			r.diff("expected: verify has no output")
		}
		return
	}
	b := out.bytes()
	if e.OutputLen != nil && uint64(len(b)) != uint64(*e.OutputLen) {
		r.diff("output_len: got %d, want %d", len(b), *e.OutputLen)
	}
	if e.OutputSHA256 != nil && sha(b) != strings.ToLower(*e.OutputSHA256) {
		r.diff("output_sha256: got %s, want %s", sha(b), *e.OutputSHA256)
	}
	if e.OutputHex != nil {
		if got := hex.EncodeToString(b); got != strings.ToLower(*e.OutputHex) {
			r.diff("output_hex: got %s, want %s", clip(got), clip(*e.OutputHex))
		}
	}
	if e.PIHex != nil {
		var pi []byte
		switch {
		case pc.dix:
			pi = out.Meta
		case c.Op == "strip":
		default:
			iv, ms := pc.d.Interval, pc.metaSize
			for i := 0; i+iv+ms <= len(out.Data); i += iv + ms {
				pi = append(pi, out.Data[i+iv:i+iv+ms]...)
			}
		}
		if got := hex.EncodeToString(pi); got != strings.ToLower(*e.PIHex) {
			r.diff("pi_hex: got %s, want %s", clip(got), clip(*e.PIHex))
		}
	}
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func (c *Case) compareError(r *Result, pc *piCase, got *t10dif.Error) {
	raw := bytes.TrimSpace(c.Expected.Error)
	if bytes.Equal(raw, []byte("null")) {
		if got != nil {
			r.diff("error: got %s at block %d, want null", got.Type, got.Block)
		}
		return
	}
	var want ErrorObject
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&want); err != nil {
		r.diff("expected.error: %v", err)
		return
	}
	if got == nil {
		r.diff("error: got null, want %s", raw)
		return
	}
	if want.Type != nil && got.Type.String() != *want.Type {
		r.diff("error.type: got %s, want %s", got.Type, *want.Type)
	}
	num := func(name string, w *Num, g uint64) {
		if w != nil && uint64(*w) != g {
			r.diff("error.%s: got %d, want %d", name, g, *w)
		}
	}
	num("block", want.Block, got.Block)
	num("offset", want.Offset, got.Offset)
	num("protected_offset", want.ProtectedOffset, got.ProtectedOffset)
	width := 4
	switch {
	case got.Type == t10dif.ErrorGuard && (pc.d.Format == t10dif.FormatPI16 || pc.d.Format == t10dif.FormatCRC64):
		width = 16
	case got.Type == t10dif.ErrorGuard && pc.d.Format == t10dif.FormatCRC32:
		width = 8
	case got.Type == t10dif.ErrorRefTag && pc.d.Format == t10dif.FormatPI16:
		width = 12
	case got.Type == t10dif.ErrorRefTag:
		width = 8
	}
	hexv := func(name string, w *string, g uint64) {
		if w == nil {
			return
		}
		if s := fmt.Sprintf("0x%0*x", width, g); s != strings.ToLower(*w) {
			r.diff("error.%s: got %s, want %s", name, s, *w)
		}
	}
	hexv("expected", want.Expected, got.Expected)
	hexv("actual", want.Actual, got.Actual)
}

// tagsOf returns the copy mask of a format's tags: what translate-guard
// keeps (a CRC format has none).
func tagsOf(f t10dif.Format) t10dif.CheckMask {
	if f.IsCRC() {
		return 0
	}
	return t10dif.CheckAppTag | t10dif.CheckRefTag
}
