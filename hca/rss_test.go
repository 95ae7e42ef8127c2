package hca

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestToeplitz checks the hash against the verification suite of
// Microsoft's RSS specification (IPv4, addresses only and with TCP ports).
func TestToeplitz(t *testing.T) {
	key := []byte{0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
		0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
		0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa}
	for _, c := range []struct {
		dst, src       string
		dport, sport   uint16
		addrs, withTCP uint32
	}{
		{"161.142.100.80", "66.9.149.187", 1766, 2794, 0x323e8fc2, 0x51ccc178},
		{"65.69.140.83", "199.92.111.2", 4739, 14230, 0xd718262a, 0xc626b0ea},
		{"12.22.207.184", "24.19.198.95", 38024, 12898, 0xd2d0a5de, 0x5c2b394a},
	} {
		s, d := netip.MustParseAddr(c.src).As4(), netip.MustParseAddr(c.dst).As4()
		in := append(s[:], d[:]...)
		require.Equal(t, c.addrs, toeplitz(key, in), "%s → %s", c.src, c.dst)
		in = append(in, byte(c.sport>>8), byte(c.sport), byte(c.dport>>8), byte(c.dport))
		require.Equal(t, c.withTCP, toeplitz(key, in), "%s:%d → %s:%d", c.src, c.sport, c.dst, c.dport)
	}
}
