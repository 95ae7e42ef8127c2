package psv

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSetPSVSeg(t *testing.T) {
	p := SetPSVFields{Index: 0x123456, Syndrome: 0, Guard: 0xFFFF, AppTag: 0x1234, RefTag: 0xdeadbeef}
	pb := make(SetPSVSeg, SetPSVSegSize)
	pb.Encode(&p)
	assert.Equal(t, p, pb.Fields(), "round trip")
	want, err := hex.DecodeString("00123456" + "0000" + "0000" + "ffff1234" + "deadbeef")
	require.NoError(t, err)
	assert.Equal(t, want, []byte(pb), "bytes")
}

// FuzzSetPSVSeg: any 16 bytes decode, and what they decode survives an
// encode and a second decode unchanged.
func FuzzSetPSVSeg(f *testing.F) {
	f.Add(make([]byte, SetPSVSegSize))
	f.Add([]byte{0x00, 0x12, 0x34, 0x56, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef})
	f.Fuzz(func(t *testing.T, b []byte) {
		seg := make(SetPSVSeg, SetPSVSegSize)
		copy(seg, b)
		p := seg.Fields()
		out := make(SetPSVSeg, SetPSVSegSize)
		out.Encode(&p)
		require.Equal(t, p, out.Fields(), "SET_PSV segment")
	})
}
