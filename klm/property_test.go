package klm_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/hcasim/hcasim/klm"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Property tests: random trees of PA, MTT, KLM, KSM and repeat-block keys
// over random mapped regions, resolved by Table.Resolve and by a naive
// model that walks the translation byte by byte. The model works from the
// generator's own description of each key (not from the table), so the
// encoding, the parsing and the resolution are all under test.

// chooser makes the generator's choices. intn(n) is in [0, n); a choice of
// 0 is always the plain, valid one, so that an exhausted fuzz input gives a
// simple world.
type chooser interface{ intn(n int) int }

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) int {
	if n <= 1 {
		return 0
	}
	return c.r.IntN(n)
}

// byteChooser takes its choices from fuzz bytes, then zeros.
type byteChooser struct{ b []byte }

func (c *byteChooser) intn(n int) int {
	if n <= 1 {
		return 0
	}
	var v uint
	for m := uint(n - 1); m > 0; m >>= 8 {
		v <<= 8
		if len(c.b) > 0 {
			v |= uint(c.b[0])
			c.b = c.b[1:]
		}
	}
	return int(v % uint(n))
}

func pick[T any](ch chooser, xs ...T) T { return xs[ch.intn(len(xs))] }

// rare is true one time in n (never for a zero choice).
func rare(ch chooser, n int) bool { return ch.intn(n) == n-1 }

// node is the generator's description of one key.
type node struct {
	key   klm.Key
	m     klm.Mkey // the context given to the table (with XLT)
	level int      // 0 for PA and MTT keys
	mtt   []klm.MTTFields
	ksm   []klm.KSMFields
	klms  []klm.KLMFields // as written, with stale entries and terminators
	rep   []klm.RepeatEntryFields
	count uint32 // repeat count
	isRep bool
}

// world is a Memory, a Table, and the description of both.
type world struct {
	tb    testing.TB
	ch    chooser
	caps  klm.Caps
	sp    *space
	tbl   *klm.Table
	nodes map[uint32]*node // live keys by index
	all   []*node          // every node created (destroyed ones too)
	res   *node            // ReservedLKey
	raw   bool             // a translation was replaced by raw bytes: no model
}

// propCaps are capabilities with small pages so that small buffers cross
// many pages.
func propCaps(maxInd uint8) klm.Caps {
	return klm.Caps{
		MaxMkeys: 256, LogMaxKLMListSize: 5, MaxIndirection: maxInd, MaxRepeatEntries: 4,
		MinLogPageSize: 3, MaxLogPageSize: 12,
	}
}

// mapped bytes from a key's StartAddr that its translation covers (up to
// its length), for choosing addresses that resolve.
func (n *node) extent() uint64 {
	m := &n.m
	var t uint64
	switch {
	case m.Mode == klm.ModePA:
		t = m.Len
	case m.Mode == klm.ModeMTT:
		p := uint64(1) << m.LogPageSize
		t = uint64(len(n.mtt))*p - (m.StartAddr - m.StartAddr&^(p-1))
	case m.Mode == klm.ModeKSM:
		t = uint64(len(n.ksm)) << m.LogPageSize
	case n.isRep:
		var cyc uint64
		for _, e := range n.rep {
			cyc += uint64(e.ByteCount)
		}
		t = cyc * uint64(n.count)
	default:
		for _, e := range n.klmEntries() {
			t += uint64(e.ByteCount)
		}
	}
	if !m.Length64 {
		t = min(t, m.Len)
	}
	return t
}

// klmEntries are the entries a KLM key uses: taken until they cover Len
// (unless Length64), ending at a zero byte count.
func (n *node) klmEntries() []klm.KLMFields {
	var off uint64
	for i, e := range n.klms {
		if (!n.m.Length64 && off >= n.m.Len) || e.ByteCount == 0 {
			return n.klms[:i]
		}
		off += uint64(e.ByteCount)
	}
	return n.klms
}

// encode (re)builds the node's XLT from its description.
func (n *node) encode(ch chooser) {
	var x []byte
	switch {
	case n.m.Mode == klm.ModeMTT:
		x = mttXLT(n.mtt...)
	case n.m.Mode == klm.ModeKSM:
		x = ksmXLT(n.ksm...)
	case n.isRep:
		x = repeatBlock(n.count, n.rep...)
	case n.m.Mode == klm.ModeKLM:
		x = klmXLT(n.klms...)
	}
	n.m.XLT = x
	n.m.XLTOctowords = octowords(len(x))
	if rare(ch, 4) {
		n.m.XLTOctowords += uint32(ch.intn(8))
	}
}

// pickVA returns an address of n's space at which l bytes mostly resolve.
func (w *world) pickVA(n *node, l uint64) uint64 {
	ch := w.ch
	lo, hi := n.m.StartAddr, n.m.StartAddr+n.extent()
	if n == w.res {
		// Any mapped region, possibly running into the next one.
		if len(w.sp.regs) == 0 {
			return uint64(ch.intn(1 << 16))
		}
		r := w.sp.regs[ch.intn(len(w.sp.regs))]
		lo, hi = r.iova, r.end()
		if rare(ch, 8) {
			hi += uint64(ch.intn(300))
		}
	}
	if rare(ch, 40) {
		// Anywhere near the key: often out of range.
		return lo + uint64(ch.intn(int(hi-lo)+64)) - uint64(ch.intn(32))
	}
	if hi-lo < l {
		return lo
	}
	return lo + uint64(ch.intn(int(min(hi-lo-l+1, 1<<20))))
}

func (w *world) attrs(n *node, mode klm.AccessMode, start uint64) {
	ch := w.ch
	n.m = klm.Mkey{
		Variant:    uint8(ch.intn(256)),
		PD:         testPD,
		Access:     klm.AccessMask,
		UMREnabled: true,
		Mode:       mode,
		StartAddr:  start,
		QPN:        0xFFFFFF,
	}
	if rare(ch, 16) {
		n.m.Access = pick(ch, klm.LocalRead|klm.LocalWrite, klm.LocalRead|klm.RemoteRead, klm.LocalWrite|klm.RemoteWrite, klm.LocalRead, 0)
	}
	if rare(ch, 30) {
		n.m.PD = testPD + 1
	}
	if rare(ch, 12) {
		n.m.AnyPD = true
	}
}

// target picks an existing key for an indirect entry: mostly one from the
// level just below, so that trees grow deep, and mostly one whose extent
// holds want bytes.
func (w *world) target(level int, want uint64) *node {
	ch := w.ch
	var below, lower []*node
	for _, n := range w.all {
		if n.level == level-1 {
			below = append(below, n)
		}
		if n.level < level {
			lower = append(lower, n)
		}
	}
	var t *node
	for range 4 {
		switch {
		case rare(ch, 10):
			t = w.res
		case len(below) > 0 && ch.intn(3) != 2:
			t = below[ch.intn(len(below))]
		default:
			t = lower[ch.intn(len(lower))]
		}
		if w.ext(t) >= want {
			break
		}
	}
	return t
}

// ext is n's extent; for the reserved key, the largest region.
func (w *world) ext(n *node) uint64 {
	if n != w.res {
		return n.extent()
	}
	var e uint64
	for _, r := range w.sp.regs {
		e = max(e, uint64(len(r.buf)))
	}
	return e
}

func (w *world) leaf() *node {
	ch := w.ch
	n := &node{}
	regs := w.sp.regs
	switch ch.intn(3) {
	case 0, 1: // MTT
		log := uint8(3 + ch.intn(4))
		p := uint64(1) << log
		k := 1 + ch.intn(8)
		flaky := rare(ch, 4)
		for i := range k {
			var a uint64
			if i > 0 && ch.intn(2) == 0 {
				a = n.mtt[i-1].Addr + p // contiguous
			} else {
				r := regs[ch.intn(len(regs))]
				a = (r.iova + uint64(ch.intn(len(r.buf)))) &^ (p - 1)
			}
			f := klm.MTTFields{Addr: a, Read: true, Write: true}
			if flaky && rare(ch, 4) {
				f.Read = false
			}
			if flaky && rare(ch, 4) {
				f.Write = false
			}
			n.mtt = append(n.mtt, f)
		}
		base := uint64(1+ch.intn(64)) << 24
		w.attrs(n, klm.ModeMTT, base+uint64(ch.intn(int(p))))
		n.m.LogPageSize = log
		n.m.Len = uint64(k)*p - (n.m.StartAddr - base)
		switch ch.intn(6) {
		case 3:
			n.m.Len -= uint64(ch.intn(int(n.m.Len)))
		case 4:
			n.m.Len += uint64(ch.intn(int(p)))
		case 5:
			n.m.Length64 = true
		}
	default: // PA over one or two regions and what lies between
		i := ch.intn(len(regs))
		j := min(i+ch.intn(2), len(regs)-1)
		start := regs[i].iova
		if rare(ch, 4) {
			start -= uint64(ch.intn(16))
		}
		w.attrs(n, klm.ModePA, start)
		n.m.Len = regs[j].end() - start
		if rare(ch, 8) {
			n.m.Length64 = true
		}
	}
	return n
}

func (w *world) indirect(level int) *node {
	ch := w.ch
	n := &node{level: level}
	start := pick(ch, 0, uint64(ch.intn(1<<12))<<12, uint64(ch.intn(1<<16)))
	switch ch.intn(3) {
	case 0: // KLM
		w.attrs(n, klm.ModeKLM, start)
		var sum uint64
		for range 1 + ch.intn(6) {
			t := w.target(level, 1)
			bc := uint64(1 + ch.intn(pick(ch, 200, 16, 1000)))
			if !rare(ch, 10) {
				bc = min(bc, max(w.ext(t), 1))
			}
			n.klms = append(n.klms, klm.KLMFields{ByteCount: uint32(bc), Key: t.key, VA: w.pickVA(t, bc)})
			sum += bc
		}
		n.m.Len = sum
		switch ch.intn(8) {
		case 4:
			n.m.Len -= uint64(ch.intn(int(sum)))
		case 5:
			n.m.Len += uint64(1 + ch.intn(100))
		case 6:
			n.m.Length64 = true
			if ch.intn(2) == 0 {
				n.klms = append(n.klms, klm.KLMFields{})
			}
		case 7:
			// A zero byte count inside the list ends it.
			at := ch.intn(len(n.klms) + 1)
			n.klms = slices.Insert(n.klms, at, klm.KLMFields{Key: klm.MakeKey(0xABC, 0), VA: 0x1234})
		}
		if rare(ch, 3) {
			// Stale entries past the ones that cover Len.
			for range 1 + ch.intn(3) {
				n.klms = append(n.klms, klm.KLMFields{ByteCount: uint32(1 + ch.intn(100)), Key: klm.MakeKey(uint32(ch.intn(300)), 0), VA: uint64(ch.intn(1 << 16))})
			}
		}
	case 1: // KSM
		log := uint8(3 + ch.intn(5))
		p := uint64(1) << log
		w.attrs(n, klm.ModeKSM, start)
		n.m.LogPageSize = log
		k := 1 + ch.intn(6)
		for range k {
			t := w.target(level, p)
			n.ksm = append(n.ksm, klm.KSMFields{Key: t.key, VA: w.pickVA(t, p)})
		}
		n.m.Len = uint64(k) * p
		switch ch.intn(6) {
		case 4:
			n.m.Len -= uint64(ch.intn(int(n.m.Len)))
		case 5:
			n.m.Length64 = true
		}
	default: // repeat block
		w.attrs(n, klm.ModeKLM, start)
		n.isRep = true
		n.count = uint32(1 + ch.intn(6))
		if rare(ch, 20) {
			n.count = 0
		}
		var cyc uint64
		for range 1 + ch.intn(int(w.caps.MaxRepeatEntries)) {
			bc := uint16(1 + ch.intn(48))
			if rare(ch, 10) {
				bc = 0
			}
			t := w.target(level, uint64(bc)*uint64(n.count))
			if ext := w.ext(t); uint64(bc) > ext && !rare(ch, 10) {
				bc = uint16(max(ext, 1))
			}
			stride := pick(ch, bc, bc+uint16(ch.intn(32)), 0, uint16(ch.intn(int(bc)+1)))
			span := uint64(max(n.count, 1)-1)*uint64(stride) + uint64(bc)
			if ext := w.ext(t); span > ext && n.count > 1 && ext >= uint64(bc) && !rare(ch, 10) {
				stride = uint16((ext - uint64(bc)) / uint64(n.count-1))
				span = uint64(n.count-1)*uint64(stride) + uint64(bc)
			}
			n.rep = append(n.rep, klm.RepeatEntryFields{Stride: stride, ByteCount: bc, Key: t.key, VA: w.pickVA(t, span)})
			cyc += uint64(bc)
		}
		if cyc == 0 {
			n.rep[0].ByteCount = 1
			cyc = 1
		}
		n.m.Len = cyc * uint64(n.count)
		switch ch.intn(6) {
		case 4:
			n.m.Len -= uint64(ch.intn(int(n.m.Len) + 1))
		case 5:
			n.m.Length64 = true
		}
	}
	return n
}

func (w *world) create(n *node) {
	w.tb.Helper()
	n.encode(w.ch)
	if rare(w.ch, 40) {
		n.m.Free = true
	}
	k, err := w.tbl.Create(n.m)
	if err != nil {
		w.tb.Fatalf("create %+v: %v", n.m, err)
	}
	n.key = k
	w.nodes[k.Index()] = n
	w.all = append(w.all, n)
}

// update publishes n's current description.
func (w *world) update(n *node) {
	w.tb.Helper()
	n.encode(w.ch)
	err := w.tbl.Update(n.key.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
		c := cur.Clone()
		*c = n.m
		return c, nil
	})
	if err != nil {
		w.tb.Fatalf("update %v: %v", n.key, err)
	}
	n.key = klm.MakeKey(n.key.Index(), n.m.Variant)
}

// newWorld generates a world from ch's choices.
func newWorld(tb testing.TB, ch chooser) *world {
	tb.Helper()
	w := &world{tb: tb, ch: ch, caps: propCaps(uint8(1 + ch.intn(4))), sp: newSpace(tb), nodes: map[uint32]*node{}}
	w.tbl = klm.NewTable(w.caps, w.sp.mem)
	w.res = &node{key: klm.ReservedLKey, level: -1, m: *w.tbl.Lookup(klm.ReservedLKey.Index())}
	w.all = append(w.all, w.res)

	// Memory: regions, adjacent or with gaps, often 64-byte aligned.
	a := uint64(1+ch.intn(4)) << 16
	for range 1 + ch.intn(6) {
		a += pick(ch, 0, uint64(ch.intn(4))*64, uint64(1+ch.intn(200)))
		size := pick(ch, 64*(1+ch.intn(8)), 1+ch.intn(600))
		w.sp.mapNew(a, size)
		a += uint64(size)
	}
	// Keys: leaves, then levels of indirect keys.
	for range 1 + ch.intn(4) {
		w.create(w.leaf())
	}
	for level := 1; level <= 1+ch.intn(5); level++ {
		for range 1 + ch.intn(3) {
			w.create(w.indirect(level))
		}
	}
	// Changes: re-point an entry (cycles, depth), bump a variant, free,
	// destroy, unmap.
	for range pick(ch, 0, 0, 1, 1, 2, 3) {
		n := w.all[1+ch.intn(len(w.all)-1)]
		if _, ok := w.nodes[n.key.Index()]; !ok {
			continue
		}
		switch ch.intn(6) {
		case 0, 5:
			// To itself or a key at the same level or above: a cycle, or a
			// chain longer than MaxIndirection.
			for _, u := range w.all {
				if _, live := w.nodes[u.key.Index()]; live && u.level > 0 && ch.intn(2) == 0 {
					n = u
				}
			}
			up := []*node{n}
			for _, u := range w.all {
				if u.level >= n.level {
					up = append(up, u)
				}
			}
			t := up[ch.intn(len(up))]
			switch {
			case len(n.klms) > 0:
				n.klms[ch.intn(len(n.klms))].Key = t.key
			case len(n.ksm) > 0:
				n.ksm[ch.intn(len(n.ksm))].Key = t.key
			case len(n.rep) > 0:
				n.rep[ch.intn(len(n.rep))].Key = t.key
			}
		case 1:
			n.m.Variant++
		case 2:
			n.m.Free = !n.m.Free
		case 3:
			if err := w.tbl.Destroy(n.key.Index()); err != nil {
				tb.Fatal(err)
			}
			delete(w.nodes, n.key.Index())
			continue
		case 4:
			if len(w.sp.regs) > 1 {
				w.sp.unmap(w.sp.regs[ch.intn(len(w.sp.regs))].iova)
			}
			continue
		}
		w.update(n)
	}
	return w
}

// request picks a request, mostly one that resolves.
func (w *world) request() klm.Request {
	ch := w.ch
	n := w.all[ch.intn(len(w.all))]
	if ch.intn(2) == 0 {
		// Prefer the top levels.
		n = w.all[len(w.all)-1-ch.intn(min(len(w.all), 4))]
	}
	for range 4 {
		if n == w.res || w.nodes[n.key.Index()] != nil || rare(ch, 10) {
			break
		}
		n = w.all[ch.intn(len(w.all))]
	}
	l := pick(ch, uint64(1+ch.intn(64)), uint64(1+ch.intn(700)), n.extent(), 1, 0)
	if !rare(ch, 8) && n != w.res {
		l = min(l, n.extent())
	}
	l = min(l, 4096)
	r := klm.Request{
		Key:    n.key,
		PD:     testPD,
		Addr:   w.pickVA(n, l),
		Len:    l,
		Access: pick(ch, klm.LocalRead, klm.RemoteRead, klm.LocalWrite, klm.RemoteWrite, klm.LocalRead|klm.LocalWrite, klm.Atomic, klm.RemoteRead|klm.RemoteWrite, 0),
	}
	if rare(ch, 6) && n != w.res {
		// Around the end of the key's length or of its translation.
		r.Addr = n.m.StartAddr + pick(ch, n.m.Len, n.extent(), n.extent()+uint64(ch.intn(64))) - uint64(ch.intn(24))
		r.Len = uint64(1 + ch.intn(16))
	}
	switch {
	case rare(ch, 40):
		r.PD = testPD + 1
	case rare(ch, 40):
		r.Key ^= klm.Key(1 + ch.intn(255))
	case rare(ch, 40):
		r.Key = klm.Key(ch.intn(1 << 16))
	}
	return r
}

// refResult is what the model says of one byte.
type refResult struct {
	iova  uint64        // the byte's IOVA; for a fault, its address in key's space
	kind  klm.FaultKind // 0: reachable
	key   klm.Key
	depth int
	need  klm.Access
}

func (w *world) lookup(idx uint32) *node {
	if idx == klm.ReservedLKey.Index() {
		return w.res
	}
	return w.nodes[idx]
}

// refKey applies the checks every access makes of a key: state, variant,
// PD, permissions, start of range.
func (w *world) refKey(n *node, key klm.Key, pd uint32, a uint64, need klm.Access) klm.FaultKind {
	switch {
	case n == nil:
		return klm.FaultBadIndex
	case n.m.Free:
		return klm.FaultFree
	case key.Variant() != n.m.Variant:
		return klm.FaultVariant
	case !n.m.AnyPD && n.m.PD != pd:
		return klm.FaultPD
	case need&^n.m.Access != 0:
		return klm.FaultAccess
	case a < n.m.StartAddr:
		return klm.FaultRange
	}
	return 0
}

// refZero is the model of a zero-length access.
func (w *world) refZero(r klm.Request) klm.FaultKind {
	n := w.lookup(r.Key.Index())
	if k := w.refKey(n, r.Key, r.PD, r.Addr, r.Access); k != 0 {
		return k
	}
	if !n.m.Length64 && r.Addr-n.m.StartAddr > n.m.Len {
		return klm.FaultRange
	}
	return 0
}

// refByte walks the translation for the byte at a of key.
func (w *world) refByte(key klm.Key, pd uint32, a uint64, need klm.Access, depth int, chain []uint32) refResult {
	fault := func(k klm.FaultKind) refResult {
		return refResult{iova: a, kind: k, key: key, depth: depth, need: need}
	}
	n := w.lookup(key.Index())
	if k := w.refKey(n, key, pd, a, need); k != 0 {
		return fault(k)
	}
	m := &n.m
	off := a - m.StartAddr
	if !m.Length64 && off >= m.Len {
		return fault(klm.FaultRange)
	}
	switch m.Mode {
	case klm.ModePA:
		if !w.sp.mapped(a) {
			return fault(klm.FaultUnmapped)
		}
		return refResult{iova: a}
	case klm.ModeMTT:
		p := uint64(1) << m.LogPageSize
		base := m.StartAddr &^ (p - 1)
		i := (a - base) >> m.LogPageSize
		if i >= uint64(len(n.mtt)) {
			return fault(klm.FaultRange)
		}
		e := n.mtt[i]
		if (need&(klm.LocalRead|klm.RemoteRead) != 0 && !e.Read) || (need&(klm.LocalWrite|klm.RemoteWrite|klm.Atomic) != 0 && !e.Write) {
			return fault(klm.FaultAccess)
		}
		iova := e.Addr&^(p-1) + (a-base)&(p-1)
		if !w.sp.mapped(iova) {
			return fault(klm.FaultUnmapped)
		}
		return refResult{iova: iova}
	}
	if depth+1 > int(w.caps.MaxIndirection) {
		return fault(klm.FaultDepth)
	}
	if slices.Contains(chain, key.Index()) {
		return fault(klm.FaultCycle)
	}
	var inner klm.Key
	var va uint64
	found := false
	switch {
	case m.Mode == klm.ModeKSM:
		if i := off >> m.LogPageSize; i < uint64(len(n.ksm)) {
			e := n.ksm[i]
			inner, va, found = e.Key, e.VA+off&(1<<m.LogPageSize-1), true
		}
	case n.isRep:
		var cyc uint64
		for _, e := range n.rep {
			cyc += uint64(e.ByteCount)
		}
		if off < cyc*uint64(n.count) {
			c, in := off/cyc, off%cyc
			for _, e := range n.rep {
				if in < uint64(e.ByteCount) {
					inner, va, found = e.Key, e.VA+c*uint64(e.Stride)+in, true
					break
				}
				in -= uint64(e.ByteCount)
			}
		}
	default:
		start := uint64(0)
		for _, e := range n.klmEntries() {
			if off < start+uint64(e.ByteCount) {
				inner, va, found = e.Key, e.VA+off-start, true
				break
			}
			start += uint64(e.ByteCount)
		}
	}
	if !found {
		return fault(klm.FaultRange)
	}
	return w.refByte(inner, pd, va, need.Local(), depth+1, append(chain, key.Index()))
}

// stats counts outcomes, to check that the generator reaches everything.
type stats struct {
	ok, zero, n int
	kinds       map[klm.FaultKind]int
}

func (s *stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests: ok %d (zero-length %d)", s.n, s.ok, s.zero)
	for k := klm.FaultBadIndex; k <= klm.FaultTranslation; k++ {
		fmt.Fprintf(&b, ", %v %d", k, s.kinds[k])
	}
	return b.String()
}

// check resolves r and compares the result with the model (or, in a raw
// world, only checks the invariants).
func (w *world) check(r klm.Request, st *stats) {
	tb := w.tb
	tb.Helper()
	segs, err := w.tbl.Resolve(newSegs(), r)
	checkSentinel(tb, segs)
	w.checkEntries(r, segs, err)
	var f *klm.Fault
	if err != nil {
		if !errors.As(err, &f) || !errors.Is(err, klm.ErrFault) {
			tb.Fatalf("%+v: error %v is not a *Fault", r, err)
		}
		if len(segs) != len(sentinel) {
			tb.Fatalf("%+v: fault %v with %d segments appended", r, err, len(segs)-len(sentinel))
		}
		if f.Kind <= klm.FaultInvalid || f.Kind > klm.FaultTranslation {
			tb.Fatalf("%+v: fault kind %d", r, f.Kind)
		}
	} else {
		var total uint64
		for i, s := range segs[len(sentinel):] {
			if len(s) == 0 {
				tb.Fatalf("%+v: segment %d is empty", r, i)
			}
			if _, ok := w.sp.locate(s); !ok {
				tb.Fatalf("%+v: segment %d (len %d cap %d) is outside mapped memory", r, i, len(s), cap(s))
			}
			total += uint64(len(s))
		}
		if total != r.Len {
			tb.Fatalf("%+v: segments total %d bytes", r, total)
		}
	}
	if st != nil {
		st.n++
		if err == nil {
			st.ok++
			if r.Len == 0 {
				st.zero++
			}
		} else {
			st.kinds[f.Kind]++
		}
	}
	if w.raw {
		return
	}
	if r.Len == 0 {
		want := w.refZero(r)
		switch {
		case err == nil && want != 0:
			tb.Fatalf("%+v: zero-length access resolved, the model faults with %v", r, want)
		case err != nil && (f.Kind != want || f.Key != r.Key || f.Depth != 0):
			tb.Fatalf("%+v: zero-length access: fault %v, the model says %v", r, err, want)
		}
		return
	}
	// The model, byte by byte.
	ref := make([]refResult, r.Len)
	faults := map[refResult]int{}
	for i := range ref {
		ref[i] = w.refByte(r.Key, r.PD, r.Addr+uint64(i), r.Access, 0, nil)
		if ref[i].kind != 0 {
			k := ref[i]
			k.iova = 0
			if _, ok := faults[k]; !ok {
				faults[k] = i
			}
		}
	}
	if err != nil {
		if len(faults) == 0 {
			tb.Fatalf("%+v: fault %v, the model resolves every byte\n%s", r, err, w.describe())
		}
		got := refResult{kind: f.Kind, key: f.Key, depth: f.Depth, need: f.Need}
		if _, ok := faults[got]; !ok {
			tb.Fatalf("%+v: fault %v (kind %d), the model's faults are %v\n%s", r, err, f.Kind, faults, w.describe())
		}
		// The fault's range (in the faulting key's space) holds a byte
		// that faults so.
		for _, b := range ref {
			if b.kind == f.Kind && b.key == f.Key && b.depth == f.Depth && b.iova-f.Addr < f.Len {
				return
			}
		}
		tb.Fatalf("%+v: fault %v: no byte of %#x+%#x faults so\n%s", r, err, f.Addr, f.Len, w.describe())
	}
	if len(faults) > 0 {
		tb.Fatalf("%+v: resolved, the model faults %v\n%s", r, faults, w.describe())
	}
	pos := 0
	for si, s := range segs[len(sentinel):] {
		a, _ := w.sp.locate(s)
		for j := range s {
			if want := ref[pos].iova; a+uint64(j) != want {
				tb.Fatalf("%+v: byte %d (segment %d+%d) is IOVA %#x, the model says %#x\n%s", r, pos, si, j, a+uint64(j), want, w.describe())
			}
			pos++
		}
	}
}

// describe prints the world for a failure message.
func (w *world) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "caps %+v\n", w.caps)
	for _, r := range w.sp.regs {
		fmt.Fprintf(&b, "region %#x+%#x\n", r.iova, len(r.buf))
	}
	for _, n := range w.all[1:] {
		_, live := w.nodes[n.key.Index()]
		m := n.m
		fmt.Fprintf(&b, "key %v live %v level %d %v free %v pd %d any %v acc %v start %#x len %#x len64 %v log %d",
			n.key, live, n.level, m.Mode, m.Free, m.PD, m.AnyPD, m.Access, m.StartAddr, m.Len, m.Length64, m.LogPageSize)
		switch {
		case n.mtt != nil:
			fmt.Fprintf(&b, " mtt %+v", n.mtt)
		case n.ksm != nil:
			fmt.Fprintf(&b, " ksm %+v", n.ksm)
		case n.isRep:
			fmt.Fprintf(&b, " repeat x%d %+v", n.count, n.rep)
		case n.klms != nil:
			fmt.Fprintf(&b, " klm %+v", n.klms)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func TestResolveMatchesModel(t *testing.T) {
	worlds, reqs := 1000, 40
	if raceEnabled || testing.Short() {
		worlds = 60
	}
	st := &stats{kinds: map[klm.FaultKind]int{}}
	for seed := range uint64(worlds) {
		w := newWorld(t, randChooser{rand.New(rand.NewPCG(seed, 0x6b6c6d))})
		for range reqs {
			w.check(w.request(), st)
		}
	}
	t.Logf("outcomes: %v", st)
	// The generator must reach success and every fault kind but
	// FaultTranslation (which a table never publishes).
	assert.GreaterOrEqual(t, st.ok-st.zero, st.n/4, "too few successes: %v", st)
	assert.NotZero(t, st.zero, "too few zero-length successes: %v", st)
	for k := klm.FaultBadIndex; k < klm.FaultTranslation; k++ {
		if !(raceEnabled || testing.Short()) {
			assert.NotZero(t, st.kinds[k], "no %v fault in %d requests: %v", k, worlds*reqs, st)
		}
	}
}

// TestResolvePrefixes: resolving a range in two parts gives the same
// segments, byte for byte, as resolving it whole, and appending to segs
// extends them in order.
func TestResolvePrefixes(t *testing.T) {
	for seed := range uint64(100) {
		w := newWorld(t, randChooser{rand.New(rand.NewPCG(seed, 0xbeef))})
		for range 20 {
			r := w.request()
			whole, err := w.tbl.Resolve(nil, r)
			if err != nil || r.Len < 2 {
				continue
			}
			cut := 1 + uint64(w.ch.intn(int(r.Len-1)))
			a, b := r, r
			a.Len, b.Addr, b.Len = cut, r.Addr+cut, r.Len-cut
			parts, err := w.tbl.Resolve(nil, a)
			require.NoError(t, err, "%+v resolves, its prefix %+v faults", r, a)
			parts, err = w.tbl.Resolve(parts, b)
			require.NoError(t, err, "%+v resolves, its suffix %+v faults", r, b)
			wantRuns(t, coalesce(w.sp.runs(parts)), coalesce(w.sp.runs(whole)))
		}
	}
}

// checkEntries: ResolveEntries gives Resolve's fault, or Resolve's
// segments, or its entries' pieces, which cut per cycle and taken in entry
// order are Resolve's memory, byte for byte.
func (w *world) checkEntries(r klm.Request, want [][]byte, wantErr error) {
	tb := w.tb
	tb.Helper()
	var e klm.Entries
	got, err := w.tbl.ResolveEntries(newSegs(), r, &e)
	checkSentinel(tb, got)
	require.Equal(tb, wantErr, err, "%+v: ResolveEntries' error", r)
	got, want = got[len(sentinel):], want[len(sentinel):]
	if err != nil {
		require.Empty(tb, got, "%+v: ResolveEntries appended on a fault", r)
		return
	}
	if e.N == 0 {
		require.Equal(tb, byteAddrs(want), byteAddrs(got), "%+v: ResolveEntries' segments", r)
		return
	}
	require.Len(tb, got, e.N, "%+v: entries %+v", r, e)
	var cut [][]byte
	for c := range e.Cycles {
		for j := range e.N {
			cut = append(cut, got[j][c*e.Len[j]:][:e.Len[j]])
		}
	}
	require.Equal(tb, byteAddrs(want), byteAddrs(cut), "%+v: entries %+v cut per cycle", r, e)
}

// byteAddrs lists segs as runs of consecutive byte addresses.
func byteAddrs(segs [][]byte) [][2]uintptr {
	var rs [][2]uintptr
	for _, s := range segs {
		if len(s) == 0 {
			continue
		}
		a := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
		if n := len(rs); n > 0 && rs[n-1][0]+rs[n-1][1] == a {
			rs[n-1][1] += uintptr(len(s))
			continue
		}
		rs = append(rs, [2]uintptr{a, uintptr(len(s))})
	}
	return rs
}
