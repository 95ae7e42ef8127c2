package klm

// A Cache remembers the last translation of one MTT page through one key,
// as a NIC's mkey-context and MTT caches do, so that repeated accesses to
// the same buffer skip the table walk. An entry is used only while the
// key's context and the memory map are the very ones it was filled from
// (both are immutable snapshots, compared by identity), for the same key,
// PD and access, and for a range inside the page: every check Resolve
// makes then has the same outcome. A Cache is not safe for concurrent
// use: each engine keeps its own. The zero value is an empty cache.
type Cache struct {
	m      *Mkey
	mem    *[]region
	key    Key
	pd     uint32
	qpn    uint32
	need   Access
	lo, hi uint64 // the key addresses the entry covers
	buf    []byte // their memory
}

// ResolveCached is Resolve through c. m is r.Key's context as the caller
// just looked it up (Lookup of r.Key's index). A hit appends the one
// segment the cached page holds. A miss checks the access as Resolve does
// and, when it lies in one page of an MTT key whose bytes inside the key
// are one piece of memory, translates that page, fills c with it and
// appends r's part; otherwise it translates r as Resolve does.
func (t *Table) ResolveCached(c *Cache, m *Mkey, segs [][]byte, r *Request) ([][]byte, error) {
	if m == c.m && m != nil && r.Len > 0 && r.Key == c.key && r.PD == c.pd && r.QPN == c.qpn && r.Access == c.need &&
		r.Addr >= c.lo && r.Addr < c.hi && r.Len <= c.hi-r.Addr && t.mem.snap.Load() == c.mem {
		off := r.Addr - c.lo
		return append(segs, c.buf[off:off+r.Len:off+r.Len]), nil
	}
	var chain [maxDepth]uint32
	mk, f := t.enter(r.Key, r.PD, r.QPN, r.Addr, r.Len, r.Access, 0, &chain)
	if f != nil {
		return segs, f
	}
	if r.Len == 0 {
		return segs, nil
	}
	if seg, ok := t.fill(c, mk, r); ok {
		return append(segs, seg), nil
	}
	start := len(segs)
	segs, f = t.translate(segs, mk, r.Key, r.PD, r.Addr, r.Len, r.Access, 0, &chain)
	if f != nil {
		return segs[:start], f
	}
	return segs, nil
}

// fill caches the MTT page of m (which enter admitted r through) that
// holds r, if r lies in one page and the page's bytes inside the key are
// one piece of memory in one memory map, and returns r's part of it. The
// page's checks are r's: the same context, PD and access, the same MTT
// entry, a range inside the key.
func (t *Table) fill(c *Cache, m *Mkey, r *Request) ([]byte, bool) {
	*c = Cache{}
	if m.Mode != ModeMTT || m.BSFEnabled {
		return nil, false
	}
	size := uint64(1) << m.LogPageSize
	base := m.StartAddr &^ (size - 1)
	pageLo := base + (r.Addr-base)&^(size-1)
	hi := pageLo + size
	if hi < pageLo || r.Len > hi-r.Addr {
		return nil, false // the page wraps the address space, or the access crosses pages
	}
	lo := max(pageLo, m.StartAddr)
	if end := m.StartAddr + m.Len; !m.Length64 && end < hi {
		hi = end
	}
	mem := t.mem.snap.Load()
	var one [1][]byte
	got, f := t.resolveMTT(one[:0], m, r.Key, lo, hi-lo, r.Access, 0)
	if f != nil || len(got) != 1 || mem == nil || t.mem.snap.Load() != mem {
		return nil, false
	}
	*c = Cache{m: m, mem: mem, key: r.Key, pd: r.PD, qpn: r.QPN, need: r.Access, lo: lo, hi: hi, buf: got[0]}
	off := r.Addr - lo
	return got[0][off : off+r.Len : off+r.Len], true
}
