package klm_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/hcasim/hcasim/klm"
)

// FuzzResolve: a world (regions, a tree of keys, changes) generated from
// the fuzzer's first argument, and requests against it. Resolve never
// panics; on success the segments lie in mapped memory and total the
// request's length; on a fault it returns a *Fault and the caller's segs
// unchanged; and unless a translation was replaced by raw bytes, the
// result is the byte-by-byte model's.
//
// raw, when the choices say so, replaces one key's mode, page size, range
// and translation with fuzz bytes, through Table.Update: a translation the
// table accepts is then resolved without a model, checking only the
// invariants.
func FuzzResolve(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, []byte{})
	f.Add(bytes.Repeat([]byte{0xFF}, 64), []byte{})
	f.Add(bytes.Repeat([]byte{3, 1, 4, 1, 5, 9, 2, 6}, 16), sigXLT(2, klm.ReservedLKey, 0x10000, klm.ReservedLKey, 0x20000))
	f.Fuzz(func(t *testing.T, choices, raw []byte) {
		ch := &byteChooser{b: choices}
		w := newWorld(t, ch)
		if len(raw) > 0 && ch.intn(2) == 1 {
			w.rawUpdate(raw)
		}
		for range 1 + ch.intn(8) {
			w.check(w.request(), nil)
		}
	})
}

// rawUpdate replaces a key's translation with raw bytes; when the table
// accepts it, the world has no model any more.
func (w *world) rawUpdate(raw []byte) {
	ch := w.ch
	n := w.all[ch.intn(len(w.all))]
	if n == w.res || w.nodes[n.key.Index()] == nil {
		return
	}
	m := n.m
	m.Mode = pick(ch, klm.ModeKLM, klm.ModeKSM, klm.ModeMTT, klm.ModePA, klm.AccessMode(ch.intn(256)))
	m.LogPageSize = uint8(ch.intn(16))
	if ch.intn(2) == 1 && len(raw) >= 8 {
		m.StartAddr = binary.BigEndian.Uint64(raw)
		m.Len = uint64(ch.intn(1 << 16))
	}
	m.Length64 = ch.intn(4) == 1
	m.XLT = raw
	m.XLTOctowords = octowords(len(raw)) + uint32(ch.intn(4))
	m.Free = false
	err := w.tbl.Update(n.key.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
		c := cur.Clone()
		*c = m
		return c, nil
	})
	if err == nil {
		w.raw = true
	}
}

// FuzzEntries: every entry view decodes and re-encodes the bytes it was
// given (reserved bytes become zero), and encodes and decodes fields made
// of the fuzz bytes.
func FuzzEntries(f *testing.F) {
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xFF}, 16))
	f.Add([]byte{0x00, 0x00, 0x02, 0x08, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x02})
	f.Add([]byte{0x02, 0x00, 0x02, 0x00, 0x00, 0x00, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0xAA})
	f.Fuzz(func(t *testing.T, b []byte) {
		in := make([]byte, 16)
		copy(in, b)
		out := make([]byte, 16)
		be := binary.BigEndian

		// KLM: every byte is a field.
		kf := klm.KLM(in).Fields()
		klm.KLM(out).Encode(&kf)
		if !bytes.Equal(out, in) {
			t.Fatalf("KLM % x → %+v → % x", in, kf, out)
		}
		if kf.ByteCount != be.Uint32(in) || kf.Key != klm.Key(be.Uint32(in[4:])) || kf.VA != be.Uint64(in[8:]) {
			t.Fatalf("KLM % x decodes as %+v", in, kf)
		}
		if v := klm.KLM(in); v.ByteCount() != kf.ByteCount || v.Key() != kf.Key || v.VA() != kf.VA {
			t.Fatal("KLM accessors differ from Fields")
		}

		// KSM: bytes 0-3 are reserved.
		sf := klm.KSM(in).Fields()
		klm.KSM(out).Encode(&sf)
		want := bytes.Clone(in)
		clear(want[:4])
		if !bytes.Equal(out, want) {
			t.Fatalf("KSM % x → %+v → % x", in, sf, out)
		}
		if sf.Key != klm.Key(be.Uint32(in[4:])) || sf.VA != be.Uint64(in[8:]) {
			t.Fatalf("KSM % x decodes as %+v", in, sf)
		}

		// MTT: every bit of the first 8 bytes round-trips.
		mf := klm.MTT(in).Fields()
		clear(out)
		klm.MTT(out).Encode(&mf)
		if !bytes.Equal(out[:8], in[:8]) || !bytes.Equal(out[8:], make([]byte, 8)) {
			t.Fatalf("MTT % x → %+v → % x", in[:8], mf, out)
		}
		v := be.Uint64(in)
		if mf.Addr != v&^3 || mf.Read != (v&1 != 0) || mf.Write != (v&2 != 0) {
			t.Fatalf("MTT % x decodes as %+v", in[:8], mf)
		}

		// Repeat control: bytes 12-13 are reserved.
		cf := klm.RepeatCtrl(in).Fields()
		klm.RepeatCtrl(out).Encode(&cf)
		want = bytes.Clone(in)
		clear(want[12:14])
		if !bytes.Equal(out, want) {
			t.Fatalf("repeat ctrl % x → %+v → % x", in, cf, out)
		}
		if cf.BytesPerCycle != be.Uint32(in) || cf.Op != be.Uint32(in[4:]) || cf.RepeatCount != be.Uint32(in[8:]) || cf.NumEntries != be.Uint16(in[14:]) {
			t.Fatalf("repeat ctrl % x decodes as %+v", in, cf)
		}

		// Repeat entry: every byte is a field.
		ef := klm.RepeatEntry(in).Fields()
		klm.RepeatEntry(out).Encode(&ef)
		if !bytes.Equal(out, in) {
			t.Fatalf("repeat entry % x → %+v → % x", in, ef, out)
		}
		if ef.Stride != be.Uint16(in) || ef.ByteCount != be.Uint16(in[2:]) || ef.Key != klm.Key(be.Uint32(in[4:])) || ef.VA != be.Uint64(in[8:]) {
			t.Fatalf("repeat entry % x decodes as %+v", in, ef)
		}

		// Fields → bytes → fields, with the fields taken from the input in
		// another arrangement, in a buffer with neighbours that must stay.
		buf := bytes.Repeat([]byte{0x5A}, 48)
		e := buf[16:32]
		check := func(what string) {
			if !bytes.Equal(buf[:16], bytes.Repeat([]byte{0x5A}, 16)) || !bytes.Equal(buf[32:], bytes.Repeat([]byte{0x5A}, 16)) {
				t.Fatalf("%s: Encode wrote outside its entry", what)
			}
		}
		k2 := klm.KLMFields{ByteCount: be.Uint32(in[12:]), Key: klm.Key(be.Uint32(in[8:])), VA: be.Uint64(in)}
		klm.KLM(e).Encode(&k2)
		if klm.KLM(e).Fields() != k2 {
			t.Fatal("KLM fields round trip")
		}
		check("KLM")
		s2 := klm.KSMFields{Key: klm.Key(be.Uint32(in[12:])), VA: be.Uint64(in)}
		klm.KSM(e).Encode(&s2)
		if klm.KSM(e).Fields() != s2 {
			t.Fatal("KSM fields round trip")
		}
		check("KSM")
		m2 := klm.MTTFields{Addr: be.Uint64(in[8:]), Read: in[0]&1 != 0, Write: in[0]&2 != 0}
		klm.MTT(e).Encode(&m2)
		m2.Addr &^= 3
		if klm.MTT(e).Fields() != m2 {
			t.Fatal("MTT fields round trip")
		}
		check("MTT")
		c2 := klm.RepeatCtrlFields{BytesPerCycle: be.Uint32(in[12:]), Op: be.Uint32(in[8:]), RepeatCount: be.Uint32(in[4:]), NumEntries: be.Uint16(in)}
		klm.RepeatCtrl(e).Encode(&c2)
		if klm.RepeatCtrl(e).Fields() != c2 || e[12] != 0 || e[13] != 0 {
			t.Fatal("repeat ctrl fields round trip")
		}
		check("repeat ctrl")
		r2 := klm.RepeatEntryFields{Stride: be.Uint16(in[14:]), ByteCount: be.Uint16(in[12:]), Key: klm.Key(be.Uint32(in[8:])), VA: be.Uint64(in)}
		klm.RepeatEntry(e).Encode(&r2)
		if klm.RepeatEntry(e).Fields() != r2 {
			t.Fatal("repeat entry fields round trip")
		}
		check("repeat entry")
	})
}
