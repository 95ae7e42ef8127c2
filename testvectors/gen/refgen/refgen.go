// Package refgen generates conformance cases from a slow reference model of
// FORMAT.md written independently of package t10dif: bitwise CRCs, the IP
// checksum word by word, and one plain loop per block.
package refgen

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/hcasim/hcasim/testvectors"
)

// params are a case's PI parameters in FORMAT.md terms plus the extensions.
type params struct {
	Format   string `json:"pi_format"`
	Guard    string `json:"guard"`
	Type     int    `json:"dif_type"`
	Interval int    `json:"interval"`
	Blocks   int    `json:"blocks"`
	RefTag   uint64 `json:"ref_tag"`
	AppTag   uint64 `json:"app_tag"`
	AppMask  uint64 `json:"app_tag_mask"`
	Check    uint8  `json:"check_mask"`
	Escape   string `json:"escape"`
	DstGuard string `json:"dst_guard,omitempty"`
	Layout   string `json:"layout,omitempty"`
	MetaSize int    `json:"meta_size,omitempty"`
	PIFirst  *bool  `json:"pi_first,omitempty"`
	Splits   []int  `json:"splits,omitempty"`
	CRCSeed  string `json:"crc_seed,omitempty"`
}

func (p *params) tuple() int {
	switch p.Format {
	case "pi16":
		return 16
	case "crc32":
		return 4
	}
	return 8
}

// crc reports whether the format is a CRC block signature (a guard only).
func (p *params) crc() bool { return p.Format == "crc32" || p.Format == "crc64" }

func (p *params) meta() int {
	if p.MetaSize != 0 {
		return p.MetaSize
	}
	return p.tuple()
}

// piOff is the offset of the tuple in the metadata.
func (p *params) piOff() int {
	if p.PIFirst != nil && *p.PIFirst {
		return 0
	}
	return p.meta() - p.tuple()
}

func (p *params) refMask() uint64 {
	if p.Format == "pi16" {
		return 1<<48 - 1
	}
	if p.crc() {
		return 0
	}
	return 1<<32 - 1
}

func (p *params) ref(i int) uint64 {
	if p.Type == 3 {
		return p.RefTag
	}
	return (p.RefTag + uint64(i)) & p.refMask()
}

// Bitwise guards.

func crc16(p []byte) uint64 {
	var c uint16
	for _, b := range p {
		for bit := 7; bit >= 0; bit-- {
			in := uint16(b>>bit) & 1
			top := c >> 15
			c <<= 1
			if top^in != 0 {
				c ^= 0x8BB7
			}
		}
	}
	return uint64(c)
}

func crc64(p []byte) uint64 {
	c := ^uint64(0)
	for _, b := range p {
		for bit := range 8 {
			in := uint64(b>>bit) & 1
			low := c & 1
			c >>= 1
			if low^in != 0 {
				c ^= 0x9A6C9329AC4BC9B5
			}
		}
	}
	return ^c
}

func ipcsum(p []byte) uint64 {
	var sum uint64
	for i := 0; i < len(p); i += 2 {
		w := uint64(p[i]) << 8
		if i+1 < len(p) {
			w |= uint64(p[i+1])
		}
		sum += w
	}
	for sum > 0xFFFF {
		sum = sum&0xFFFF + sum>>16
	}
	return ^sum & 0xFFFF
}

// reflected is a bitwise reflected CRC of width w (32 or 64): the register
// starts at init, the result is complemented.
func reflected(poly, init uint64, w int, p []byte) uint64 {
	mask := uint64(1)<<w - 1
	if w == 64 {
		mask = ^uint64(0)
	}
	c := init & mask
	for _, b := range p {
		for bit := range 8 {
			in := uint64(b>>bit) & 1
			low := c & 1
			c >>= 1
			if low^in != 0 {
				c ^= poly
			}
		}
	}
	return ^c & mask
}

func (pp *params) guard(kind string, p []byte) uint64 {
	var init uint64
	if pp.CRCSeed == "ones" {
		init = ^uint64(0)
	}
	switch kind {
	case "crc16":
		return crc16(p)
	case "crc64":
		return crc64(p)
	case "crc32":
		return reflected(0xEDB88320, init, 32, p) // CRC-32 (IEEE)
	case "crc32c":
		return reflected(0x82F63B78, init, 32, p) // CRC-32C (Castagnoli)
	case "crc64xp10":
		return reflected(0xC96C5795D7870F42, init, 64, p) // CRC-64/XZ (ECMA-182)
	}
	return ipcsum(p)
}

// put writes the tuple fields big-endian.
func (p *params) put(t []byte, g, app, ref uint64) {
	switch p.Format {
	case "crc32":
		binary.BigEndian.PutUint32(t, uint32(g))
		return
	case "crc64":
		binary.BigEndian.PutUint64(t, g)
		return
	}
	if p.Format == "pi16" {
		binary.BigEndian.PutUint64(t, g)
		binary.BigEndian.PutUint16(t[8:], uint16(app))
		for i := range 6 {
			t[10+i] = byte(ref >> (8 * (5 - i)))
		}
		return
	}
	binary.BigEndian.PutUint16(t, uint16(g))
	binary.BigEndian.PutUint16(t[2:], uint16(app))
	binary.BigEndian.PutUint32(t[4:], uint32(ref))
}

func (p *params) get(t []byte) (g, app, ref uint64) {
	switch p.Format {
	case "crc32":
		return uint64(binary.BigEndian.Uint32(t)), 0, 0
	case "crc64":
		return binary.BigEndian.Uint64(t), 0, 0
	}
	if p.Format == "pi16" {
		for i := range 6 {
			ref = ref<<8 | uint64(t[10+i])
		}
		return binary.BigEndian.Uint64(t), uint64(binary.BigEndian.Uint16(t[8:])), ref
	}
	return uint64(binary.BigEndian.Uint16(t)), uint64(binary.BigEndian.Uint16(t[2:])), uint64(binary.BigEndian.Uint32(t[4:]))
}

// blockGuard is the guard of block i: its data plus, with the tuple last,
// the metadata bytes before the tuple.
func (p *params) blockGuard(kind string, data, meta []byte) uint64 {
	cover := append(append([]byte(nil), data...), meta[:p.piOff()]...)
	return p.guard(kind, cover)
}

// generate returns the metadata of every block (non-tuple bytes zero).
func (p *params) generate(kind string, data []byte) []byte {
	m := p.meta()
	meta := make([]byte, p.Blocks*m)
	for i := range p.Blocks {
		mi := meta[i*m : (i+1)*m]
		g := p.blockGuard(kind, data[i*p.Interval:(i+1)*p.Interval], mi)
		p.put(mi[p.piOff():], g, p.AppTag, p.ref(i))
	}
	return meta
}

// errObj is FORMAT.md §4.5.
type errObj struct {
	Type            string `json:"type"`
	Block           int    `json:"block"`
	Offset          int    `json:"offset"`
	ProtectedOffset int    `json:"protected_offset"`
	Expected        string `json:"expected"`
	Actual          string `json:"actual"`
}

// maskBytes returns, for each tuple byte, whether check selects it. pi8: bit
// 7-k for byte k. pi16: a field is all in or all out.
func (p *params) maskBytes(check uint8) []bool {
	sel := make([]bool, p.tuple())
	if p.Format == "pi16" {
		for k := range 16 {
			switch {
			case k < 8:
				sel[k] = check&0xC0 != 0
			case k < 10:
				sel[k] = check&0x30 != 0
			default:
				sel[k] = check&0x0F != 0
			}
		}
		return sel
	}
	for k := range p.tuple() {
		sel[k] = check&(0x80>>k) != 0
	}
	return sel
}

// verify returns the first error, comparing byte by byte.
func (p *params) verify(data, meta []byte) *errObj {
	m, t := p.meta(), p.tuple()
	sel := p.maskBytes(p.Check)
	for i := range p.Blocks {
		mi := meta[i*m : (i+1)*m]
		stored := mi[p.piOff() : p.piOff()+t]
		_, sApp, sRef := p.get(stored)
		if (p.Escape == "app" || p.Escape == "app_ref") && sApp == 0xFFFF &&
			(p.Escape == "app" || sRef == p.refMask()) {
			continue
		}
		want := make([]byte, t)
		g := p.blockGuard(p.Guard, data[i*p.Interval:(i+1)*p.Interval], mi)
		p.put(want, g, p.AppTag, p.ref(i))
		var appMask [2]byte
		binary.BigEndian.PutUint16(appMask[:], uint16(p.AppMask))
		gl := 2 // guard length
		switch {
		case t == 16:
			gl = 8
		case p.crc():
			gl = t
		}
		bad := map[string]bool{}
		for k := range t {
			if !sel[k] {
				continue
			}
			diff := stored[k] ^ want[k]
			switch {
			case k < gl:
				bad["guard"] = bad["guard"] || diff != 0
			case k < gl+2:
				bad["apptag"] = bad["apptag"] || diff&appMask[k-gl] != 0
			default:
				bad["reftag"] = bad["reftag"] || diff != 0
			}
		}
		sg, _, _ := p.get(stored)
		e := &errObj{Block: i, Offset: i * p.Interval, ProtectedOffset: i * (p.Interval + m)}
		gw, rw := 4, 8
		switch {
		case t == 16 || p.Format == "crc64":
			gw, rw = 16, 12
		case p.Format == "crc32":
			gw = 8
		}
		switch {
		case bad["guard"]:
			e.Type, e.Expected, e.Actual = "guard", hexw(g, gw), hexw(sg, gw)
		case bad["reftag"]:
			e.Type, e.Expected, e.Actual = "reftag", hexw(p.ref(i), rw), hexw(sRef, rw)
		case bad["apptag"]:
			e.Type, e.Expected, e.Actual = "apptag", hexw(p.AppTag, 4), hexw(sApp, 4)
		default:
			continue
		}
		return e
	}
	return nil
}

func hexw(v uint64, w int) string { return fmt.Sprintf("0x%0*x", w, v) }

// interleave lays data and metadata out as the op's byte string.
func (p *params) interleave(data, meta []byte) []byte {
	if p.Layout == "dix" {
		return append(append([]byte(nil), data...), meta...)
	}
	m := p.meta()
	var b []byte
	for i := range p.Blocks {
		b = append(b, data[i*p.Interval:(i+1)*p.Interval]...)
		b = append(b, meta[i*m:(i+1)*m]...)
	}
	return b
}

// caseOut is one JSON line.
type caseOut struct {
	ID          string         `json:"id"`
	Op          string         `json:"op"`
	Desc        string         `json:"desc"`
	Params      params         `json:"params"`
	Input       map[string]any `json:"input"`
	InputLen    int            `json:"input_len"`
	InputSHA256 string         `json:"input_sha256"`
	Expected    map[string]any `json:"expected"`
}

func shaHex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// spec is a case to generate: parameters, data and how to corrupt it.
type spec struct {
	op       string
	desc     string
	p        params
	seed     uint64
	mutate   []int          // data offsets XORed with 0x5a after PI is computed
	piPatch  map[int]byte   // metadata byte offset -> XOR, applied to input pi_hex
	genWith  *params        // generate the input PI with other parameters
	dataSpec map[string]any // overrides the PRNG data
}

func (s *spec) build(id int) (caseOut, error) {
	p := s.p
	n := p.Blocks * p.Interval
	data := testvectors.SplitMix64(s.seed, n)
	dataSpec := map[string]any{"prng": "splitmix64", "seed": s.seed, "len": n}
	if s.dataSpec != nil {
		dataSpec = s.dataSpec
		data = make([]byte, n)
		if b, ok := s.dataSpec["byte"]; ok {
			for i := range data {
				data[i] = byte(b.(int))
			}
		}
	}
	gp := p
	if s.genWith != nil {
		gp = *s.genWith
	}
	meta := gp.generate(gp.Guard, data)
	if s.genWith != nil && gp.meta() != p.meta() {
		return caseOut{}, fmt.Errorf("case %d: genWith changes the metadata size", id)
	}
	for off, x := range s.piPatch {
		meta[off] ^= x
	}
	input := map[string]any{"data": dataSpec}
	var muts []map[string]int
	for _, off := range s.mutate {
		data[off] ^= 0x5a
		muts = append(muts, map[string]int{"offset": off, "xor": 0x5a})
	}
	if muts != nil {
		input["data_mutations"] = muts
	}
	c := caseOut{ID: fmt.Sprintf("gen-%04d", id), Op: s.op, Desc: s.desc, Params: p, Input: input}
	exp := map[string]any{}
	var in, out []byte
	var e *errObj
	switch s.op {
	case "generate":
		in = data
		gm := p.generate(p.Guard, data)
		out = p.interleave(data, gm)
		exp["pi_hex"] = hex.EncodeToString(gm)
	default:
		input["pi_hex"] = hex.EncodeToString(meta)
		in = p.interleave(data, meta)
		e = p.verify(data, meta)
		switch s.op {
		case "strip":
			out = data
		case "pass":
			out = in
		case "translate-guard":
			m := p.meta()
			om := append([]byte(nil), meta...)
			for i := range p.Blocks {
				mi := om[i*m : (i+1)*m]
				g := p.blockGuard(p.DstGuard, data[i*p.Interval:(i+1)*p.Interval], mi)
				_, app, ref := p.get(mi[p.piOff():])
				p.put(mi[p.piOff():], g, app, ref)
			}
			out = p.interleave(data, om)
			exp["pi_hex"] = hex.EncodeToString(om)
		}
	}
	c.InputLen, c.InputSHA256 = len(in), shaHex(in)
	if s.op != "verify" {
		exp["output_len"] = len(out)
		exp["output_sha256"] = shaHex(out)
		if len(out) <= 1024 {
			exp["output_hex"] = hex.EncodeToString(out)
		}
	}
	if e == nil {
		exp["error"] = nil
	} else {
		exp["error"] = e
	}
	c.Expected = exp
	return c, nil
}

// Write writes every generated case as JSON Lines.
func Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i, s := range specs() {
		c, err := s.build(i + 1)
		if err != nil {
			return err
		}
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
	return nil
}
