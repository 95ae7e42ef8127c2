package hca_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hcasim/hcasim/hca"
)

// TestMADOnQP1: a MAD sent from one port's QP1 reaches the MAD handler
// of the port it is addressed to, with the sender's address; a MAD of
// the wrong size and one from a port without a wire are refused.
func TestMADOnQP1(t *testing.T) {
	x, y := byte(1+rand.IntN(254)), byte(rand.IntN(256))
	var devs [2]*hca.Device
	var addrs [2]netip.Addr
	for i := range devs {
		devs[i] = hca.New(hca.Options{})
		t.Cleanup(func() { devs[i].Close() })
		addrs[i] = netip.AddrFrom4([4]byte{127, x, y, byte(2 + i)})
		require.NoError(t, devs[i].ListenRoCE(hca.WireOptions{Addr: netip.AddrPortFrom(addrs[i], 4791)}))
	}
	type got struct {
		from netip.Addr
		mad  []byte
	}
	ch := make(chan got, 4)
	devs[1].SetMADHandler(func(from netip.Addr, mad []byte) { ch <- got{from, append([]byte(nil), mad...)} })
	mad := make([]byte, hca.MADSize)
	for i := range mad {
		mad[i] = byte(i)
	}
	require.NoError(t, devs[0].SendMAD(addrs[1], mad))
	select {
	case g := <-ch:
		require.Equal(t, addrs[0], g.from)
		require.Equal(t, mad, g.mad)
	case <-time.After(10 * time.Second):
		t.Fatal("no MAD within 10 s")
	}
	require.ErrorIs(t, devs[0].SendMAD(addrs[1], mad[:100]), hca.ErrWire)
	plain := hca.New(hca.Options{})
	defer plain.Close()
	require.ErrorIs(t, plain.SendMAD(addrs[1], mad), hca.ErrWire)
}
