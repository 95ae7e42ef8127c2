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
	need   Access
	lo, hi uint64 // the key addresses the entry covers
	buf    []byte // their memory
}

// ResolveCached is Resolve through c. m is r.Key's context as the caller
// just looked it up (Lookup of r.Key's index). A hit appends the one
// segment the cached page holds; a miss resolves through the table and,
// when the access lies in one page of an MTT key that maps one piece of
// memory, fills c with that page.
func (t *Table) ResolveCached(c *Cache, m *Mkey, segs [][]byte, r *Request) ([][]byte, error) {
	if m == c.m && m != nil && r.Len > 0 && r.Key == c.key && r.PD == c.pd && r.Access == c.need &&
		r.Addr >= c.lo && r.Addr < c.hi && r.Len <= c.hi-r.Addr && t.mem.snap.Load() == c.mem {
		off := r.Addr - c.lo
		return append(segs, c.buf[off:off+r.Len:off+r.Len]), nil
	}
	mem := t.mem.snap.Load()
	start := len(segs)
	segs, err := t.Resolve(segs, *r)
	if err == nil && len(segs) == start+1 {
		t.fill(c, mem, *r)
	}
	return segs, err
}

// fill caches the MTT page of r.Key that holds r, if the key is an MTT
// key, r lies in one page, and the page's bytes inside the key resolve to
// one piece of memory with r's checks, through the context and memory map
// current before and after (so the entry is what Resolve gives for them).
func (t *Table) fill(c *Cache, mem *[]region, r Request) {
	*c = Cache{}
	m := t.Lookup(r.Key.Index())
	if m == nil || m.Mode != ModeMTT || m.BSFEnabled || mem == nil {
		return
	}
	size := uint64(1) << m.LogPageSize
	base := m.StartAddr &^ (size - 1)
	pageLo := base + (r.Addr-base)&^(size-1)
	hi := pageLo + size
	if hi < pageLo || r.Len > hi-r.Addr {
		return // the page wraps the address space, or the access crosses pages
	}
	lo := max(pageLo, m.StartAddr)
	if end := m.StartAddr + m.Len; !m.Length64 && end < hi {
		hi = end
	}
	if lo >= hi {
		return
	}
	var one [1][]byte
	got, err := t.Resolve(one[:0], Request{Key: r.Key, PD: r.PD, Addr: lo, Len: hi - lo, Access: r.Access})
	if err != nil || len(got) != 1 || t.Lookup(r.Key.Index()) != m || t.mem.snap.Load() != mem {
		return
	}
	*c = Cache{m: m, mem: mem, key: r.Key, pd: r.PD, need: r.Access, lo: lo, hi: hi, buf: got[0]}
}
