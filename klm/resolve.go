package klm

import (
	"encoding/binary"
)

// maxDepth bounds the recursion whatever the capabilities say.
const maxDepth = 16

// Request is one access to resolve.
type Request struct {
	// Key is the lkey or rkey used.
	Key Key
	// PD is the protection domain of the QP making the access (for a
	// remote access, the responder QP's).
	PD uint32
	// Addr and Len are the range accessed, in the key's address space.
	Addr, Len uint64
	// Access is what the operation needs: LocalRead for a gather,
	// LocalWrite for a scatter, RemoteRead / RemoteWrite / Atomic for the
	// rkey of a remote operation.
	Access Access
	// QPN is the QP making the access. A remote access through a key bound
	// to a QP (a type 2 memory window: its QPN is not NoQPN) must come
	// through that QP.
	QPN uint32
}

// NoQPN is the QPN of a key bound to no QP (mkc qpn 0xFFFFFF).
const NoQPN = 0xFFFFFF

// Resolve appends to segs the slices of host memory that [r.Addr,
// r.Addr+r.Len) of r.Key maps to, in order, and returns the extended
// slice. It checks every key on the way: index, variant, state, PD,
// permissions and range; an indirect key's entries are resolved through
// their own keys, with the local form of the permissions (the outer key
// already authorised the remote access) and the same PD, up to the
// capability's depth. On a fault it returns segs unchanged and a *Fault.
// A zero-length access still checks the key. It does not allocate when segs
// has room.
func (t *Table) Resolve(segs [][]byte, r Request) ([][]byte, error) {
	var chain [maxDepth]uint32
	start := len(segs)
	m, f := t.enter(r.Key, r.PD, r.QPN, r.Addr, r.Len, r.Access, 0, &chain)
	if f != nil {
		return segs, f
	}
	if r.Len == 0 {
		return segs, nil
	}
	segs, f = t.translate(segs, m, r.Key, r.PD, r.Addr, r.Len, r.Access, 0, &chain)
	if f != nil {
		return segs[:start], f
	}
	return segs, nil
}

// Entries describes what ResolveEntries appended when it took an access
// whole by entries: N segments, segment j holding entry j's Len[j] bytes
// of each of Cycles cycles. N is 0 when the segments are Resolve's.
type Entries struct {
	N      int
	Cycles uint64
	Len    [4]uint64
}

// ResolveEntries is Resolve for a consumer that can take a strided
// layout as its streams: when r.Key is a repeat block of at most four
// entries that are dense (each entry's stride equal to its byte count,
// as mlx5's data and PI entries are), r covers at least three whole
// cycles, and each entry's bytes over them are one piece of memory, it
// appends those pieces, one per entry in entry order, instead of one
// segment per entry per cycle, and describes them in e. Otherwise it
// appends what Resolve would and sets e.N to 0. The checks and faults are
// Resolve's.
func (t *Table) ResolveEntries(segs [][]byte, r Request, e *Entries) ([][]byte, error) {
	*e = Entries{}
	var chain [maxDepth]uint32
	start := len(segs)
	m, f := t.enter(r.Key, r.PD, r.QPN, r.Addr, r.Len, r.Access, 0, &chain)
	if f != nil {
		return segs, f
	}
	if r.Len == 0 {
		return segs, nil
	}
	if rep := m.tr.rep; rep != nil {
		out, ok, f := t.resolveDense(segs, rep, r.PD, r.Addr-m.StartAddr, r.Len, r.Access.Local(), 0, &chain, e)
		if f != nil {
			return segs[:start], f
		}
		if ok {
			return out, nil
		}
		*e = Entries{}
	}
	segs, f = t.translate(segs, m, r.Key, r.PD, r.Addr, r.Len, r.Access, 0, &chain)
	if f != nil {
		return segs[:start], f
	}
	return segs, nil
}

func (t *Table) fault(kind FaultKind, key Key, depth int, addr, n uint64, need Access) *Fault {
	return &Fault{Kind: kind, Key: key, Depth: depth, Addr: addr, Len: n, Need: need}
}

func (t *Table) resolve(segs [][]byte, key Key, pd uint32, addr, n uint64, need Access, depth int, chain *[maxDepth]uint32) ([][]byte, *Fault) {
	m, f := t.enter(key, pd, NoQPN, addr, n, need, depth, chain)
	if f != nil || n == 0 {
		return segs, f
	}
	return t.translate(segs, m, key, pd, addr, n, need, depth, chain)
}

// enter checks an access through key at depth: index, variant, state, PD,
// permissions, range and, for an indirect key, the depth and the chain of
// keys (which it extends with this one). qpn is the accessing QP, checked
// for a remote access through a key bound to a QP.
func (t *Table) enter(key Key, pd, qpn uint32, addr, n uint64, need Access, depth int, chain *[maxDepth]uint32) (*Mkey, *Fault) {
	idx := key.Index()
	m := t.Lookup(idx)
	switch {
	case m == nil:
		return nil, t.fault(FaultBadIndex, key, depth, addr, n, need)
	case m.Free:
		return nil, t.fault(FaultFree, key, depth, addr, n, need)
	case key.Variant() != m.Variant:
		return nil, t.fault(FaultVariant, key, depth, addr, n, need)
	case !m.AnyPD && m.PD != pd:
		return nil, t.fault(FaultPD, key, depth, addr, n, need)
	case need&^m.Access != 0:
		return nil, t.fault(FaultAccess, key, depth, addr, n, need)
	case m.QPN != NoQPN && m.QPN != qpn && need.Remote():
		return nil, t.fault(FaultQP, key, depth, addr, n, need)
	case addr < m.StartAddr || addr+n < addr:
		return nil, t.fault(FaultRange, key, depth, addr, n, need)
	case !m.tr.ok:
		return nil, t.fault(FaultTranslation, key, depth, addr, n, need)
	}
	off := addr - m.StartAddr
	if !m.Length64 && (off > m.Len || n > m.Len-off) {
		return nil, t.fault(FaultRange, key, depth, addr, n, need)
	}
	if n == 0 || m.Mode == ModePA || m.Mode == ModeMTT {
		return m, nil
	}
	// Indirect modes.
	if depth+1 > int(t.caps.MaxIndirection) || depth+1 >= maxDepth {
		return nil, t.fault(FaultDepth, key, depth, addr, n, need)
	}
	for _, c := range chain[:depth] {
		if c == idx {
			return nil, t.fault(FaultCycle, key, depth, addr, n, need)
		}
	}
	chain[depth] = idx
	if off+n > m.tr.mapped || off+n < off {
		return nil, t.fault(FaultRange, key, depth, addr, n, need)
	}
	return m, nil
}

// translate appends the memory of [addr, addr+n) of m, which enter
// admitted.
func (t *Table) translate(segs [][]byte, m *Mkey, key Key, pd uint32, addr, n uint64, need Access, depth int, chain *[maxDepth]uint32) ([][]byte, *Fault) {
	switch m.Mode {
	case ModePA:
		out, err := t.mem.Segments(segs, addr, n)
		if err != nil {
			return segs, t.fault(FaultUnmapped, key, depth, addr, n, need)
		}
		return out, nil
	case ModeMTT:
		return t.resolveMTT(segs, m, key, addr, n, need, depth)
	}
	off := addr - m.StartAddr
	inner := need.Local()
	var f *Fault
	switch {
	case m.tr.rep != nil:
		r := m.tr.rep
		if out, ok, f := t.resolveDense(segs, r, pd, off, n, inner, depth, chain, nil); f != nil {
			return segs, f
		} else if ok {
			return out, nil
		}
		for n > 0 {
			cyc, w := off/r.cycle, off%r.cycle
			j := 0
			for j+1 < len(r.ents) && r.ents[j+1].off <= w {
				j++
			}
			e := &r.ents[j]
			in := w - e.off
			take := min(e.len-in, n)
			if take > 0 {
				if segs, f = t.resolve(segs, e.key, pd, e.va+cyc*e.stride+in, take, inner, depth+1, chain); f != nil {
					return segs, f
				}
			}
			off, n = off+take, n-take
		}
	case m.Mode == ModeKSM:
		size := uint64(1) << m.LogPageSize
		for n > 0 {
			i, in := off>>m.LogPageSize, off&(size-1)
			e := KSM(m.XLT[i*KSMSize:]).Fields()
			take := min(size-in, n)
			if segs, f = t.resolve(segs, e.Key, pd, e.VA+in, take, inner, depth+1, chain); f != nil {
				return segs, f
			}
			off, n = off+take, n-take
		}
	default: // KLM list
		es := m.tr.entries
		// Binary search for the entry holding off: the first whose end is past it.
		lo, hi := 0, len(es)
		for lo < hi {
			mid := int(uint(lo+hi) >> 1)
			if es[mid].start+es[mid].len <= off {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		for i := lo; n > 0; i++ {
			e := &es[i]
			in := off - e.start
			take := min(e.len-in, n)
			if segs, f = t.resolve(segs, e.key, pd, e.va+in, take, inner, depth+1, chain); f != nil {
				return segs, f
			}
			off, n = off+take, n-take
		}
	}
	return segs, nil
}

// resolveDense is the fast path of a repeat block whose entries are dense
// (stride == byte count, as mlx5's data and PI entries are) over several
// cycles: each entry's bytes for all the cycles are resolved at once and,
// if each comes back as one piece of memory, cut per cycle. It reports
// ok false to leave the access to the cycle-by-cycle path.
//
// With ent not nil and an access of whole cycles, it appends the pieces
// themselves instead, one per entry, and describes them in ent.
func (t *Table) resolveDense(segs [][]byte, r *repeat, pd uint32, off, n uint64, need Access, depth int, chain *[maxDepth]uint32, ent *Entries) ([][]byte, bool, *Fault) {
	c0, c1 := off/r.cycle, (off+n-1)/r.cycle
	if c1-c0 < 2 || len(r.ents) > 4 {
		return segs, false, nil
	}
	w0, wEnd := off-c0*r.cycle, off+n-c1*r.cycle
	var pieces [4][]byte
	var base [4]uint64 // the entry address pieces[j] starts at
	for j := range r.ents {
		e := &r.ents[j]
		if e.stride != e.len || e.len == 0 {
			return segs, false, nil
		}
		start := e.va + c0*e.stride
		if w0 > e.off {
			start += min(w0-e.off, e.len)
		}
		end := e.va + c1*e.stride
		if wEnd > e.off {
			end += min(wEnd-e.off, e.len)
		}
		// Resolve into segs itself (no allocation when it has room), then
		// take the piece back out.
		mark := len(segs)
		got, f := t.resolve(segs, e.key, pd, start, end-start, need, depth+1, chain)
		if f != nil {
			return segs[:mark], false, f
		}
		if len(got) != mark+1 {
			return got[:mark], false, nil
		}
		pieces[j], base[j] = got[mark], start
		segs = got[:mark]
	}
	if ent != nil && w0 == 0 && wEnd == r.cycle {
		ent.N, ent.Cycles = len(r.ents), c1-c0+1
		for j := range r.ents {
			ent.Len[j] = r.ents[j].len
			segs = append(segs, pieces[j])
		}
		return segs, true, nil
	}
	// The cycle and the offset in it advance with the segments (no
	// division per segment: at 512-byte blocks there are two per block).
	cyc, w := off/r.cycle, off%r.cycle
	for n > 0 {
		j := 0
		for j+1 < len(r.ents) && r.ents[j+1].off <= w {
			j++
		}
		e := &r.ents[j]
		in := w - e.off
		take := min(e.len-in, n)
		if take > 0 {
			a := e.va + cyc*e.stride + in - base[j]
			// The segment's capacity runs to the end of the entry's
			// piece (bytes this access covers anyway, in later cycles),
			// so that a consumer can tell one cycle's segment continues
			// the previous one and take the run as one (hca's DIX runs).
			segs = append(segs, pieces[j][a:a+take])
		}
		n -= take
		if w += take; w >= r.cycle {
			cyc, w = cyc+w/r.cycle, w%r.cycle
		}
	}
	return segs, true, nil
}

// resolveMTT walks the page table, merging pages that are contiguous in
// the address space into one memory lookup.
func (t *Table) resolveMTT(segs [][]byte, m *Mkey, key Key, addr, n uint64, need Access, depth int) ([][]byte, *Fault) {
	size := uint64(1) << m.LogPageSize
	base := m.StartAddr &^ (size - 1)
	rel := addr - base
	wantRead := need&(LocalRead|RemoteRead) != 0
	wantWrite := need&(LocalWrite|RemoteWrite|Atomic) != 0
	var runIOVA, runLen, runAddr uint64 // a run of pages contiguous in IOVA, and where it starts in the key
	start := len(segs)
	flush := func() bool {
		if runLen == 0 {
			return true
		}
		var err error
		segs, err = t.mem.Segments(segs, runIOVA, runLen)
		return err == nil
	}
	for n > 0 {
		i, in := rel>>m.LogPageSize, rel&(size-1)
		if (i+1)*MTTSize > uint64(len(m.XLT)) {
			return segs[:start], t.fault(FaultRange, key, depth, base+rel, n, need)
		}
		v := binary.BigEndian.Uint64(m.XLT[i*MTTSize:])
		if (wantRead && v&MTTRead == 0) || (wantWrite && v&MTTWrite == 0) {
			return segs[:start], t.fault(FaultAccess, key, depth, base+rel, n, need)
		}
		iova := v&^(size-1) + in
		take := min(size-in, n)
		if runLen != 0 && runIOVA+runLen == iova {
			runLen += take
		} else {
			if !flush() {
				return segs[:start], t.fault(FaultUnmapped, key, depth, runAddr, runLen, need)
			}
			runIOVA, runLen, runAddr = iova, take, base+rel
		}
		rel, n = rel+take, n-take
	}
	if !flush() {
		return segs[:start], t.fault(FaultUnmapped, key, depth, runAddr, runLen, need)
	}
	return segs, nil
}
