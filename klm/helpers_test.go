package klm_test

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/hcasim/hcasim/klm"

	"github.com/stretchr/testify/require"
)

// Helpers shared by the tests, the property tests, the fuzz targets and
// the benchmarks of package klm. The tests are an external package so that
// they only use the exported API.

// testPD is the protection domain of the tests' keys and requests.
const testPD = 7

// unhex decodes hex digits, ignoring spaces and newlines.
func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		tb.Fatalf("unhex %q: %v", s, err)
	}
	return b
}

// klmXLT encodes a KLM list.
func klmXLT(es ...klm.KLMFields) []byte {
	b := make([]byte, len(es)*klm.KLMSize)
	for i := range es {
		klm.KLM(b[i*klm.KLMSize:]).Encode(&es[i])
	}
	return b
}

// ksmXLT encodes a KSM list.
func ksmXLT(es ...klm.KSMFields) []byte {
	b := make([]byte, len(es)*klm.KSMSize)
	for i := range es {
		klm.KSM(b[i*klm.KSMSize:]).Encode(&es[i])
	}
	return b
}

// mttXLT encodes an MTT list.
func mttXLT(es ...klm.MTTFields) []byte {
	b := make([]byte, len(es)*klm.MTTSize)
	for i := range es {
		klm.MTT(b[i*klm.MTTSize:]).Encode(&es[i])
	}
	return b
}

// repeatXLT encodes a repeat block: the control segment, then the entries.
func repeatXLT(c klm.RepeatCtrlFields, es ...klm.RepeatEntryFields) []byte {
	b := make([]byte, klm.RepeatCtrlSize+len(es)*klm.RepeatEntrySize)
	klm.RepeatCtrl(b).Encode(&c)
	for i := range es {
		klm.RepeatEntry(b[klm.RepeatCtrlSize+i*klm.RepeatEntrySize:]).Encode(&es[i])
	}
	return b
}

// repeatBlock builds the repeat-block translation of entries, with the
// control segment's BytesPerCycle the sum of their byte counts.
func repeatBlock(count uint32, es ...klm.RepeatEntryFields) []byte {
	var cyc uint32
	for _, e := range es {
		cyc += uint32(e.ByteCount)
	}
	return repeatXLT(klm.RepeatCtrlFields{BytesPerCycle: cyc, Op: klm.RepeatBlockOp, RepeatCount: count, NumEntries: uint16(len(es))}, es...)
}

// octowords returns the capacity in octowords that holds n bytes.
func octowords(n int) uint32 { return uint32((n + klm.OctowordSize - 1) / klm.OctowordSize) }

// withXLT sets m's translation and a capacity that holds it.
func withXLT(m klm.Mkey, xlt []byte) klm.Mkey {
	m.XLT = xlt
	m.XLTOctowords = octowords(len(xlt))
	return m
}

// Key contexts for the tests, in testPD with every permission.
func paMkey(start, n uint64) klm.Mkey {
	return klm.Mkey{PD: testPD, Access: klm.AccessMask, Mode: klm.ModePA, StartAddr: start, Len: n, QPN: 0xFFFFFF}
}

func mttMkey(start, n uint64, log uint8, es ...klm.MTTFields) klm.Mkey {
	return withXLT(klm.Mkey{PD: testPD, Access: klm.AccessMask, Mode: klm.ModeMTT, StartAddr: start, Len: n, LogPageSize: log, QPN: 0xFFFFFF}, mttXLT(es...))
}

func klmMkey(start, n uint64, es ...klm.KLMFields) klm.Mkey {
	return withXLT(klm.Mkey{PD: testPD, Access: klm.AccessMask, Mode: klm.ModeKLM, StartAddr: start, Len: n, QPN: 0xFFFFFF}, klmXLT(es...))
}

func ksmMkey(start, n uint64, log uint8, es ...klm.KSMFields) klm.Mkey {
	return withXLT(klm.Mkey{PD: testPD, Access: klm.AccessMask, Mode: klm.ModeKSM, StartAddr: start, Len: n, LogPageSize: log, QPN: 0xFFFFFF}, ksmXLT(es...))
}

func repeatMkey(start, n uint64, count uint32, es ...klm.RepeatEntryFields) klm.Mkey {
	return withXLT(klm.Mkey{PD: testPD, Access: klm.AccessMask, Mode: klm.ModeKLM, StartAddr: start, Len: n, QPN: 0xFFFFFF}, repeatBlock(count, es...))
}

// rw is an MTT entry with both enable bits.
func rw(addr uint64) klm.MTTFields { return klm.MTTFields{Addr: addr, Read: true, Write: true} }

// hostRegion is a mapped buffer, for telling which IOVA a segment is.
type hostRegion struct {
	iova uint64
	buf  []byte
}

func (r *hostRegion) end() uint64 { return r.iova + uint64(len(r.buf)) }

// space is a Memory with a record of what is mapped, so that segments
// can be identified by pointer.
type space struct {
	tb   testing.TB
	mem  *klm.Memory
	regs []hostRegion
}

func newSpace(tb testing.TB) *space { return &space{tb: tb, mem: klm.NewMemory()} }

// mapNew maps a new buffer of n bytes at iova, filled with a pattern.
func (s *space) mapNew(iova uint64, n int) []byte {
	s.tb.Helper()
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = byte(iova + uint64(i)*7)
	}
	if err := s.mem.Map(iova, buf); err != nil {
		s.tb.Fatalf("map %#x+%#x: %v", iova, n, err)
	}
	s.regs = append(s.regs, hostRegion{iova, buf})
	return buf
}

// unmap unmaps the region mapped at iova.
func (s *space) unmap(iova uint64) {
	s.tb.Helper()
	if err := s.mem.Unmap(iova); err != nil {
		s.tb.Fatalf("unmap %#x: %v", iova, err)
	}
	s.regs = slices.DeleteFunc(s.regs, func(r hostRegion) bool { return r.iova == iova })
}

// mapped reports whether iova is a mapped byte.
func (s *space) mapped(iova uint64) bool {
	for i := range s.regs {
		if s.regs[i].iova <= iova && iova < s.regs[i].end() {
			return true
		}
	}
	return false
}

// bufAt returns the mapped bytes [iova, iova+n), which must be in one region.
func (s *space) bufAt(iova uint64, n int) []byte {
	s.tb.Helper()
	for i := range s.regs {
		r := &s.regs[i]
		if r.iova <= iova && iova+uint64(n) <= r.end() {
			return r.buf[iova-r.iova : iova-r.iova+uint64(n)]
		}
	}
	s.tb.Fatalf("%#x+%#x is not inside one mapped region", iova, n)
	return nil
}

// locate returns the IOVA of seg's first byte when the whole of seg, up to
// its capacity, lies in a mapped buffer.
func (s *space) locate(seg []byte) (uint64, bool) {
	if cap(seg) == 0 {
		return 0, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(seg)))
	for i := range s.regs {
		r := &s.regs[i]
		b := uintptr(unsafe.Pointer(unsafe.SliceData(r.buf)))
		if p >= b && p-b+uintptr(cap(seg)) <= uintptr(len(r.buf)) {
			return r.iova + uint64(p-b), true
		}
	}
	return 0, false
}

// run is a segment as an IOVA range.
type run struct{ IOVA, Len uint64 }

func (r run) String() string { return fmt.Sprintf("%#x+%#x", r.IOVA, r.Len) }

// runs identifies each segment.
func (s *space) runs(segs [][]byte) []run {
	s.tb.Helper()
	out := make([]run, 0, len(segs))
	for i, seg := range segs {
		a, ok := s.locate(seg)
		if !ok {
			s.tb.Fatalf("segment %d (len %d cap %d) is not inside mapped memory", i, len(seg), cap(seg))
		}
		out = append(out, run{a, uint64(len(seg))})
	}
	return out
}

// coalesce merges runs that continue each other.
func coalesce(rs []run) []run {
	var out []run
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].IOVA+out[n-1].Len == r.IOVA {
			out[n-1].Len += r.Len
			continue
		}
		out = append(out, r)
	}
	return out
}

// tbench is a Table over a space.
type tbench struct {
	*space
	tbl *klm.Table
}

func newTbench(tb testing.TB, c klm.Caps) *tbench {
	s := newSpace(tb)
	return &tbench{space: s, tbl: klm.NewTable(c, s.mem)}
}

// create creates m and returns its key.
func (e *tbench) create(m klm.Mkey) klm.Key {
	e.tb.Helper()
	k, err := e.tbl.Create(m)
	require.NoError(e.tb, err, "create %v mkey", m.Mode)
	return k
}

// sentinel segments that Resolve must leave alone.
var sentinel = [][]byte{[]byte("sentinel-0"), []byte("sentinel-1")}

func newSegs() [][]byte {
	s := make([][]byte, len(sentinel), 64)
	copy(s, sentinel)
	return s
}

func checkSentinel(tb testing.TB, segs [][]byte) {
	tb.Helper()
	require.GreaterOrEqual(tb, len(segs), len(sentinel), "segs shrank")
	for i := range sentinel {
		require.True(tb, unsafe.SliceData(segs[i]) == unsafe.SliceData(sentinel[i]), "segs[%d] changed", i)
		require.Len(tb, segs[i], len(sentinel[i]), "segs[%d] changed", i)
	}
}

// resolve resolves r, which must succeed, and returns its runs.
func (e *tbench) resolve(r klm.Request) []run {
	e.tb.Helper()
	segs, err := e.tbl.Resolve(newSegs(), r)
	require.NoError(e.tb, err, "resolve %+v", r)
	checkSentinel(e.tb, segs)
	var total uint64
	for _, s := range segs[len(sentinel):] {
		total += uint64(len(s))
	}
	require.Equal(e.tb, r.Len, total, "resolve %+v: segments total", r)
	return e.runs(segs[len(sentinel):])
}

// fault resolves r, which must fault, checks that segs came back
// unchanged, and returns the fault.
func (e *tbench) fault(r klm.Request) *klm.Fault {
	e.tb.Helper()
	segs, err := e.tbl.Resolve(newSegs(), r)
	if err == nil {
		require.Fail(e.tb, "no fault", "resolve %+v: runs %v", r, e.runs(segs[len(sentinel):]))
	}
	require.Len(e.tb, segs, len(sentinel), "resolve %+v faulted (%v) with segments", r, err)
	checkSentinel(e.tb, segs)
	var f *klm.Fault
	require.ErrorAs(e.tb, err, &f, "resolve %+v", r)
	require.ErrorIs(e.tb, err, klm.ErrFault, "resolve %+v", r)
	return f
}

// wantFault resolves r and checks the fault's kind, key and depth.
func (e *tbench) wantFault(r klm.Request, kind klm.FaultKind, key klm.Key, depth int) *klm.Fault {
	e.tb.Helper()
	f := e.fault(r)
	require.Equal(e.tb, kind, f.Kind, "resolve %+v: fault %v", r, f)
	require.Equal(e.tb, key, f.Key, "resolve %+v: fault %v", r, f)
	require.Equal(e.tb, depth, f.Depth, "resolve %+v: fault %v", r, f)
	return f
}

// wantRuns compares runs exactly.
func wantRuns(tb testing.TB, got, want []run) {
	tb.Helper()
	if !slices.Equal(got, want) {
		tb.Fatalf("runs\n got  %v\n want %v", got, want)
	}
}

// burnIndices creates free keys until the next Create gets index idx
// (the table allocates upwards from FirstIndex).
func (e *tbench) burnIndices(idx uint32) {
	e.tb.Helper()
	for {
		k := e.create(klm.Mkey{Free: true, PD: testPD})
		if k.Index() == idx-1 {
			return
		}
		if k.Index() >= idx {
			e.tb.Fatalf("index %#x already passed", idx)
		}
	}
}
