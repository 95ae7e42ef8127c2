package klm_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/hcasim/hcasim/klm"

	"github.com/stretchr/testify/require"
)

// cacheWorld is a table with a few keys over a few regions, changed and
// accessed at random, where every access goes through Resolve and through
// ResolveCached with one Cache: they must agree on every outcome.
type cacheWorld struct {
	*tbench
	keys []klm.Key
	c    klm.Cache
	last klm.Request // the last access: accesses often repeat it
}

const cacheBase = 0x7000_0000_0000

func newCacheWorld(tb testing.TB) *cacheWorld {
	w := &cacheWorld{tbench: newTbench(tb, klm.ConnectX5)}
	w.mapNew(0x10000, 0x2000)
	w.mapNew(0x30000, 0x1000)
	w.mapNew(0x40000, 0x1000)
	// An MTT key over three pages, starting inside page 0; a second one
	// sharing a page; a PA key (never cached);
	w.keys = append(w.keys,
		w.create(mttMkey(cacheBase+0x800, 3<<12-0x900, 12, rw(0x10000), rw(0x11000), klm.MTTFields{Addr: 0x30000, Read: true})),
		w.create(mttMkey(cacheBase, 2<<12, 12, rw(0x40000), rw(0x10000))),
		w.create(paMkey(0x10000, 0x2000)))
	// An indirect key over the first MTT key and the PA key (never cached:
	// ResolveCached translates it as Resolve does).
	w.keys = append(w.keys, w.create(klmMkey(cacheBase, 0x2000,
		klm.KLMFields{ByteCount: 0x1000, Key: w.keys[0], VA: cacheBase + 0x800},
		klm.KLMFields{ByteCount: 0x1000, Key: w.keys[2], VA: 0x10800})))
	w.last = klm.Request{Key: w.keys[0], PD: testPD, Addr: cacheBase + 0x800, Len: 64, Access: klm.LocalRead}
	return w
}

// step makes one random change or access; an access is checked.
func (w *cacheWorld) step(ch chooser) {
	tb := w.tb
	tb.Helper()
	k := pick(ch, w.keys...)
	switch ch.intn(12) {
	case 0: // a change of the key's context
		err := w.tbl.Update(k.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
			m := cur.Clone()
			switch ch.intn(5) {
			case 0:
				m.Free = !m.Free
			case 1:
				m.Access ^= pick(ch, klm.LocalWrite, klm.RemoteRead, klm.RemoteWrite|klm.LocalWrite)
			case 2:
				m.PD ^= 1
			case 3:
				m.Variant++
			case 4:
				if m.Mode == klm.ModeMTT && len(m.XLT) >= klm.MTTSize {
					i := ch.intn(len(m.XLT) / klm.MTTSize)
					klm.MTT(m.XLT[i*klm.MTTSize:]).Encode(&klm.MTTFields{Addr: pick(ch, uint64(0x10000), 0x11000, 0x30000, 0x40000, 0x50000), Read: ch.intn(2) == 0, Write: ch.intn(2) == 0})
				}
			}
			return m, nil
		})
		if err != nil && !errors.Is(err, klm.ErrBadAccess) {
			require.NoError(tb, err, "update")
		}
	case 1: // the memory map changes
		if w.mapped(0x40000) {
			w.unmap(0x40000)
		} else {
			w.mapNew(0x40000, 0x1000)
		}
	case 2, 3, 4, 5: // the last access again, a little further on
		r := w.last
		r.Addr += uint64(pick(ch, 0, 0, 16, 0x40))
		w.check(r)
	default:
		key := k
		if rare(ch, 8) {
			key = klm.Key(uint32(k) ^ 1) // another variant
		}
		pd := uint32(testPD)
		if rare(ch, 8) {
			pd++
		}
		r := klm.Request{Key: key, PD: pd,
			Addr:   cacheBase + uint64(ch.intn(3<<12+0x100)),
			Len:    uint64(pick(ch, 1, 16, 64, 0x100, 0x800, 0x1000, 0)),
			Access: pick(ch, klm.LocalRead, klm.LocalWrite, klm.RemoteWrite, klm.RemoteRead, klm.Atomic)}
		if k == w.keys[2] {
			r.Addr = 0x10000 + uint64(ch.intn(0x2100))
		}
		w.last = r
		w.check(r)
	}
}

// check resolves r both ways and compares: the same fault kind, or the
// same segments (the same memory, byte for byte by address).
func (w *cacheWorld) check(r klm.Request) {
	tb := w.tb
	tb.Helper()
	want, werr := w.tbl.Resolve(nil, r)
	got, gerr := w.tbl.ResolveCached(&w.c, w.tbl.Lookup(r.Key.Index()), newSegs(), &r)
	checkSentinel(tb, got)
	got = got[len(sentinel):]
	if werr != nil {
		require.Error(tb, gerr, "cached resolve of %+v succeeded where Resolve faults (%v)", r, werr)
		var wf, gf *klm.Fault
		require.ErrorAs(tb, werr, &wf)
		require.ErrorAs(tb, gerr, &gf)
		require.Equal(tb, wf.Kind, gf.Kind, "fault of %+v", r)
		require.Empty(tb, got, "segments of a fault")
		return
	}
	require.NoError(tb, gerr, "cached resolve of %+v", r)
	require.Equal(tb, len(want), len(got), "segments of %+v", r)
	for i := range want {
		require.Equal(tb, len(want[i]), len(got[i]), "segment %d of %+v", i, r)
		require.Equal(tb, cap(want[i]), cap(got[i]), "segment %d of %+v: capacity", i, r)
		if len(want[i]) > 0 {
			require.True(tb, unsafe.SliceData(want[i]) == unsafe.SliceData(got[i]), "segment %d of %+v: other memory", i, r)
		}
	}
}

func TestResolveCachedAgrees(t *testing.T) {
	for seed := range uint64(20) {
		w := newCacheWorld(t)
		ch := randChooser{rand.New(rand.NewPCG(seed, 13))}
		for range 2000 {
			w.step(ch)
		}
	}
}

// The cache hits: a repeated access to one page is served without a walk
// (no allocation, the same memory), and a change of the key is seen.
func TestResolveCachedHit(t *testing.T) {
	w := newCacheWorld(t)
	r := klm.Request{Key: w.keys[0], PD: testPD, Addr: cacheBase + 0x1100, Len: 64, Access: klm.LocalRead}
	w.check(r)
	segs := make([][]byte, 0, 4)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		segs, err = w.tbl.ResolveCached(&w.c, w.tbl.Lookup(r.Key.Index()), segs[:0], &r)
		require.NoError(t, err)
	})
	require.Zero(t, allocs)
	require.Equal(t, w.bufAt(0x10100, 64)[:1], segs[0][:1])
	require.NoError(t, w.tbl.Update(w.keys[0].Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
		m := cur.Clone()
		m.Free = true
		return m, nil
	}))
	_, err := w.tbl.ResolveCached(&w.c, w.tbl.Lookup(r.Key.Index()), nil, &r)
	var f *klm.Fault
	require.ErrorAs(t, err, &f)
	require.Equal(t, klm.FaultFree, f.Kind, "an invalidated key through a cache that held it")
	// The memory under a cached page goes away.
	r = klm.Request{Key: w.keys[1], PD: testPD, Addr: cacheBase + 0x10, Len: 16, Access: klm.RemoteWrite}
	w.check(r)
	w.unmap(0x40000)
	_, err = w.tbl.ResolveCached(&w.c, w.tbl.Lookup(r.Key.Index()), nil, &r)
	require.ErrorAs(t, err, &f)
	require.Equal(t, klm.FaultUnmapped, f.Kind, "unmapped memory through a cache that held it")
}

// FuzzResolveCached: the random world driven by the fuzzer's bytes.
func FuzzResolveCached(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0, 0, 0x11, 0, 3, 0, 2, 0, 0, 0, 0x11, 0, 3, 0, 0, 0, 0, 2, 0, 0, 0x11, 0, 3, 0})
	f.Add([]byte{3, 1, 0x20, 0, 1, 0, 0, 1, 3, 1, 0x20, 0, 1, 0, 1, 0, 0, 4, 2, 3, 0, 0x20, 0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		w := newCacheWorld(t)
		ch := &byteChooser{b: b}
		for range 64 {
			w.step(ch)
		}
	})
}
