package cq

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzCQE: any 64 bytes decode; the fields of a CQE encoded from decoded
// fields are a fixpoint (encode then decode again changes nothing), and
// the view's accessors agree with Fields.
func FuzzCQE(f *testing.F) {
	f.Add(make([]byte, 64), uint8(1))
	seed := make([]byte, 64)
	seed[63] = 0xc1 // signature error, owner 1
	seed[33] = 0x20
	f.Add(seed, uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, owner uint8) {
		in := make([]byte, 64)
		copy(in, b)
		c := CQE(in)
		fl := c.Fields()
		require.Equal(t, c.Opcode(), fl.Opcode)
		once := make([]byte, 64)
		// Encode leaves the last word to the caller (the ring stores it
		// last, atomically).
		last := CQE(once).Encode(&fl, owner&1)
		copy(once[60:], last[:])
		f1 := CQE(once).Fields()
		twice := make([]byte, 64)
		last = CQE(twice).Encode(&f1, owner&1)
		copy(twice[60:], last[:])
		require.Equal(t, f1, CQE(twice).Fields(), "decode ∘ encode is a fixpoint")
		require.Equal(t, once, twice, "the same fields encode to the same bytes")
		require.Equal(t, owner&1, CQE(once).Owner(), "the owner bit is the one given")
	})
}

// FuzzPoll: the driver's poll over a ring of any contents, at any
// consumer index, returns a CQE of the ring or nothing, never a panic.
func FuzzPoll(f *testing.F) {
	f.Add([]byte{}, uint8(2), uint32(0))
	f.Add(make([]byte, 256), uint8(2), uint32(5))
	f.Fuzz(func(t *testing.T, ring []byte, logSize uint8, ci uint32) {
		logSize %= 8
		buf := make([]byte, 64<<logSize)
		copy(buf, ring)
		e, ok := Poll(buf, logSize, ci)
		if ok {
			require.Len(t, e, 64)
			i := int(ci) & (1<<logSize - 1)
			require.Equal(t, buf[i*64:(i+1)*64], []byte(e), "the CQE at ci")
		}
	})
}
