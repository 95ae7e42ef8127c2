package hca

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestBuildGRH: the 40 bytes at the head of a UD receive buffer follow
// the GID type the datagram left from, as a ConnectX writes them: RoCEv2
// between IPv4-mapped GIDs is 20 zero bytes and the IPv4 header (UDP
// inside); RoCE v1 is a GRH, an IPv6 header whose next header is the BTH,
// whatever the GIDs; RoCEv2 between IPv6 GIDs is an IPv6 header (UDP
// inside).
func TestBuildGRH(t *testing.T) {
	v4 := [16]byte{10: 0xff, 11: 0xff, 12: 127, 13: 0, 14: 5, 15: 2}
	v4b := [16]byte{10: 0xff, 11: 0xff, 12: 127, 13: 0, 14: 5, 15: 3}
	v6 := [16]byte{0: 0xfe, 1: 0x80, 15: 1}
	const payload = 64
	for _, c := range []struct {
		name     string
		sgid     [16]byte
		dgid     [16]byte
		v1       bool
		wantIPv4 bool
		next     byte
		length   int // the IPv4 total length or the IPv6 payload length
	}{
		{"v2 over IPv4", v4, v4b, false, true, 17, 20 + 8 + 12 + 8 + payload + 4},
		{"v1 with IPv4-mapped GIDs", v4, v4b, true, false, 0x1B, 12 + 8 + payload + 4},
		{"v2 over IPv6", v6, v6, false, false, 17, 8 + 12 + 8 + payload + 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &request{udSGID: c.sgid, udDGID: c.dgid, udV1: c.v1, length: payload}
			var b [GRHSize]byte
			assert.Equal(t, c.wantIPv4, buildGRH(b[:], r))
			if c.wantIPv4 {
				h := b[20:]
				assert.Equal(t, make([]byte, 20), b[:20], "20 reserved bytes")
				assert.Equal(t, byte(0x45), h[0])
				assert.Equal(t, c.next, h[9], "protocol")
				assert.Equal(t, c.length, int(binary.BigEndian.Uint16(h[2:])), "total length")
				assert.Equal(t, c.sgid[12:], h[12:16])
				assert.Equal(t, c.dgid[12:], h[16:20])
				return
			}
			assert.Equal(t, byte(6), b[0]>>4, "version")
			assert.Equal(t, c.next, b[6], "next header")
			assert.Equal(t, c.length, int(binary.BigEndian.Uint16(b[4:])), "payload length")
			assert.Equal(t, c.sgid[:], b[8:24])
			assert.Equal(t, c.dgid[:], b[24:40])
		})
	}
}
