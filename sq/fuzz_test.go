package sq

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzSegments: every segment layout decodes any bytes, and what it
// decodes survives an encode and a second decode unchanged (decode ∘
// encode is the identity on decoded fields).
func FuzzSegments(f *testing.F) {
	f.Add(make([]byte, 16))
	f.Add([]byte{0x01, 0x00, 0x07, 0x08, 0x00, 0x01, 0x23, 0x03, 0xff, 0, 0, 0x48, 0xde, 0xad, 0xbe, 0xef})
	f.Fuzz(func(t *testing.T, b []byte) {
		seg := make([]byte, 16)
		copy(seg, b)
		out := make([]byte, 16)

		c := CtrlSeg(seg).Fields()
		CtrlSeg(out).Encode(&c)
		require.Equal(t, c, CtrlSeg(out).Fields(), "control segment")

		clear(out)
		d := DataSeg(seg).Fields()
		DataSeg(out).Encode(&d)
		require.Equal(t, d, DataSeg(out).Fields(), "data segment")

		clear(out)
		r := RaddrSeg(seg).Fields()
		RaddrSeg(out).Encode(&r)
		require.Equal(t, r, RaddrSeg(out).Fields(), "remote address segment")

		clear(out)
		a := AtomicSeg(seg).Fields()
		AtomicSeg(out).Encode(&a)
		require.Equal(t, a, AtomicSeg(out).Fields(), "atomic segment")
	})
}

// FuzzRingFetch: a send ring of any contents and any send counter is
// fetched to the counter without a panic or a loop: every Fetch advances
// the consumer by at least one WQEBB and never past the producer, and
// returns DS×16 bytes of a well-formed WQE or an error.
func FuzzRingFetch(f *testing.F) {
	f.Add(uint8(2), uint16(3), []byte{0, 0, 0, 0x08, 0, 0, 0x01, 0x04})
	f.Add(uint8(0), uint16(0xffff), []byte{})
	f.Fuzz(func(t *testing.T, logSize uint8, producer uint16, ring []byte) {
		logSize %= 7
		buf := make([]byte, WQEBBSize<<logSize)
		copy(buf, ring)
		db := make([]byte, 4)
		binary.BigEndian.PutUint32(db, uint32(producer))
		r, err := NewRing(buf, db, logSize)
		if err != nil {
			return
		}
		scratch := make([]byte, MaxWQEBBs*WQEBBSize)
		for i := 0; r.Pending(); i++ {
			require.Less(t, i, 1<<16, "fetch does not reach the producer")
			before := r.Consumer()
			w, c, err := r.Fetch(scratch)
			moved := r.Consumer() - before
			require.GreaterOrEqual(t, moved, uint16(1), "a fetch advances the consumer")
			require.LessOrEqual(t, moved, producer-before, "a fetch never passes the producer")
			if err == nil {
				require.Equal(t, int(c.DS)*16, len(w), "a fetched WQE is DS×16 bytes")
				require.Equal(t, int(moved), WQEBBs(c.DS), "the consumer moves by the WQE's WQEBBs")
			}
		}
	})
}

// FuzzDatagramSeg: the datagram segment of a UD WQE decodes any 48 bytes,
// and its fields survive an encode and a second decode.
func FuzzDatagramSeg(f *testing.F) {
	f.Add(make([]byte, DatagramSegSize))
	seed := make([]byte, DatagramSegSize)
	DatagramSeg(seed).Encode(&DatagramFields{QKey: 0x11111111, DestQPN: 0x101, RLID: 1, HopLimit: 64, GRH: true,
		SGIDIndex: 3, RGID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		seg := make([]byte, DatagramSegSize)
		copy(seg, b)
		d := DatagramSeg(seg).Fields()
		require.LessOrEqual(t, d.DestQPN, uint32(0xFFFFFF))
		out := make([]byte, DatagramSegSize)
		DatagramSeg(out).Encode(&d)
		require.Equal(t, d, DatagramSeg(out).Fields())
	})
}

// FuzzXRCSeg: the XRC segment of an XRC initiator's WQE decodes any 16
// bytes to a 24-bit SRQ number, which an encode and a decode keep.
func FuzzXRCSeg(f *testing.F) {
	f.Add(make([]byte, XRCSegSize))
	seed := make([]byte, XRCSegSize)
	XRCSeg(seed).Encode(0x123456)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		seg := make([]byte, XRCSegSize)
		copy(seg, b)
		n := XRCSeg(seg).SRQN()
		require.LessOrEqual(t, n, uint32(0xFFFFFF))
		out := make([]byte, XRCSegSize)
		XRCSeg(out).Encode(n)
		require.Equal(t, n, XRCSeg(out).SRQN())
		require.Equal(t, make([]byte, XRCSegSize-4), out[4:], "reserved bytes")
	})
}

// FuzzEthSeg: the Ethernet segment of a raw packet WQE decodes any bytes
// to an inline header inside them, or refuses; what decodes encodes back
// to the same header and size.
func FuzzEthSeg(f *testing.F) {
	f.Add(make([]byte, EthSegMin))
	seed := make([]byte, 64)
	EthSeg(seed).Encode([]byte("\x01\x50\x56\x19\x20\xa7\x24\x8a\x07\xa5\x28\xc8\x08\x00\x45\x00\x00\x54"), EthL3Csum)
	f.Add(seed)
	f.Add([]byte{12: 0xff, 13: 0xff, 15: 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		hdr, size, ok := EthSeg(b).Header()
		if !ok {
			return
		}
		require.LessOrEqual(t, size, len(b))
		require.Zero(t, size%16, "whole 16-byte units")
		require.LessOrEqual(t, EthInlineOff+len(hdr), size)
		out := make([]byte, size)
		require.Equal(t, size, EthSeg(out).Encode(hdr, EthSeg(b).CsumFlags()))
		h2, s2, ok2 := EthSeg(out).Header()
		require.True(t, ok2)
		require.Equal(t, size, s2)
		require.Equal(t, hdr, h2)
	})
}
