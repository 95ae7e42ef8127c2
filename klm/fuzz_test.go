package klm_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/hcasim/hcasim/klm"

	"github.com/stretchr/testify/require"
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
		require.Equal(t, in, out, "KLM → %+v →", kf)
		require.Equal(t, klm.KLMFields{ByteCount: be.Uint32(in), Key: klm.Key(be.Uint32(in[4:])), VA: be.Uint64(in[8:])}, kf, "KLM % x decodes", in)
		v := klm.KLM(in)
		require.Equal(t, kf, klm.KLMFields{ByteCount: v.ByteCount(), Key: v.Key(), VA: v.VA()}, "KLM accessors differ from Fields")

		// KSM: bytes 0-3 are reserved.
		sf := klm.KSM(in).Fields()
		klm.KSM(out).Encode(&sf)
		want := bytes.Clone(in)
		clear(want[:4])
		require.Equal(t, want, out, "KSM % x → %+v →", in, sf)
		require.Equal(t, klm.KSMFields{Key: klm.Key(be.Uint32(in[4:])), VA: be.Uint64(in[8:])}, sf, "KSM % x decodes", in)

		// MTT: every bit of the first 8 bytes round-trips.
		mf := klm.MTT(in).Fields()
		clear(out)
		klm.MTT(out).Encode(&mf)
		require.Equal(t, in[:8], out[:8], "MTT → %+v →", mf)
		require.Equal(t, make([]byte, 8), out[8:], "MTT % x → %+v: Encode wrote past the entry", in[:8], mf)
		w := be.Uint64(in)
		require.Equal(t, klm.MTTFields{Addr: w &^ 3, Read: w&1 != 0, Write: w&2 != 0}, mf, "MTT % x decodes", in[:8])

		// Repeat control: bytes 12-13 are reserved.
		cf := klm.RepeatCtrl(in).Fields()
		klm.RepeatCtrl(out).Encode(&cf)
		want = bytes.Clone(in)
		clear(want[12:14])
		require.Equal(t, want, out, "repeat ctrl % x → %+v →", in, cf)
		require.Equal(t, klm.RepeatCtrlFields{BytesPerCycle: be.Uint32(in), Op: be.Uint32(in[4:]), RepeatCount: be.Uint32(in[8:]), NumEntries: be.Uint16(in[14:])},
			cf, "repeat ctrl % x decodes", in)

		// Repeat entry: every byte is a field.
		ef := klm.RepeatEntry(in).Fields()
		klm.RepeatEntry(out).Encode(&ef)
		require.Equal(t, in, out, "repeat entry → %+v →", ef)
		require.Equal(t, klm.RepeatEntryFields{Stride: be.Uint16(in), ByteCount: be.Uint16(in[2:]), Key: klm.Key(be.Uint32(in[4:])), VA: be.Uint64(in[8:])},
			ef, "repeat entry % x decodes", in)

		// Fields → bytes → fields, with the fields taken from the input in
		// another arrangement, in a buffer with neighbours that must stay.
		buf := bytes.Repeat([]byte{0x5A}, 48)
		e := buf[16:32]
		check := func(what string) {
			require.Equal(t, bytes.Repeat([]byte{0x5A}, 16), buf[:16], "%s: Encode wrote before its entry", what)
			require.Equal(t, bytes.Repeat([]byte{0x5A}, 16), buf[32:], "%s: Encode wrote after its entry", what)
		}
		k2 := klm.KLMFields{ByteCount: be.Uint32(in[12:]), Key: klm.Key(be.Uint32(in[8:])), VA: be.Uint64(in)}
		klm.KLM(e).Encode(&k2)
		require.Equal(t, k2, klm.KLM(e).Fields(), "KLM fields round trip")
		check("KLM")
		s2 := klm.KSMFields{Key: klm.Key(be.Uint32(in[12:])), VA: be.Uint64(in)}
		klm.KSM(e).Encode(&s2)
		require.Equal(t, s2, klm.KSM(e).Fields(), "KSM fields round trip")
		check("KSM")
		m2 := klm.MTTFields{Addr: be.Uint64(in[8:]), Read: in[0]&1 != 0, Write: in[0]&2 != 0}
		klm.MTT(e).Encode(&m2)
		m2.Addr &^= 3
		require.Equal(t, m2, klm.MTT(e).Fields(), "MTT fields round trip")
		check("MTT")
		c2 := klm.RepeatCtrlFields{BytesPerCycle: be.Uint32(in[12:]), Op: be.Uint32(in[8:]), RepeatCount: be.Uint32(in[4:]), NumEntries: be.Uint16(in)}
		klm.RepeatCtrl(e).Encode(&c2)
		require.Equal(t, c2, klm.RepeatCtrl(e).Fields(), "repeat ctrl fields round trip")
		require.Equal(t, []byte{0, 0}, e[12:14], "repeat ctrl reserved bytes after a round trip")
		check("repeat ctrl")
		r2 := klm.RepeatEntryFields{Stride: be.Uint16(in[14:]), ByteCount: be.Uint16(in[12:]), Key: klm.Key(be.Uint32(in[8:])), VA: be.Uint64(in)}
		klm.RepeatEntry(e).Encode(&r2)
		require.Equal(t, r2, klm.RepeatEntry(e).Fields(), "repeat entry fields round trip")
		check("repeat entry")
	})
}
