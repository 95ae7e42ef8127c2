package ucma

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzCommands: any sequence of commands on two channels of one service:
// each gets an errno or an answer, never a panic; a channel's fd is
// readable exactly while its events wait; closing both leaves no ids,
// ports or events.
func FuzzCommands(f *testing.F) {
	// A seed: create, bind, listen on one channel; create, resolve,
	// route, connect on the other; read events on both.
	var seed []byte
	add := func(ch byte, op uint32, out uint16, p []byte) {
		seed = append(seed, ch<<7|byte(op), byte(out>>8), byte(out), byte(len(p)>>8), byte(len(p)))
		seed = append(seed, p...)
	}
	cr := make([]byte, createIDIn)
	le.PutUint16(cr[16:], psTCP)
	add(0, cmdCreateID, 4, cr)
	b := make([]byte, bindIPIn)
	putSockaddr(b[8:], netip.MustParseAddrPort("127.0.0.1:7174"))
	add(0, cmdBindIP, 0, b)
	add(0, cmdListen, 0, make([]byte, listenIn))
	add(1, cmdCreateID, 4, cr)
	r := make([]byte, resolveIPIn)
	putSockaddr(r[28:], netip.MustParseAddrPort("127.0.0.1:7174"))
	le.PutUint32(r[56:], 1)
	add(1, cmdResolveIP, 0, r)
	add(1, cmdGetEvent, eventOut, make([]byte, getEventIn))
	add(1, cmdResolveRoute, 0, le.AppendUint32(nil, 1))
	add(1, cmdGetEvent, eventOut, make([]byte, getEventIn))
	cp := make([]byte, connectIn)
	cp[271] = 1
	le.PutUint32(cp[272:], 1)
	add(1, cmdConnect, 0, cp)
	add(0, cmdGetEvent, eventOut, make([]byte, getEventIn))
	f.Add(seed)
	f.Add([]byte{0x0c, 0x01, 0x50, 0x00, 0x08, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		s := New(Device{GUID: 1, GID: gidOf(netip.MustParseAddr("127.0.0.1")), SGIDIndex: 3})
		var readable [2]bool
		var chs [2]*Channel
		for i := range chs {
			chs[i] = s.Open(func(r bool) { readable[i] = r })
		}
		for len(in) >= 5 {
			ch, op, out, n := in[0]>>7, uint32(in[0]&0x7F)%(numCmds+2), uint16(in[1])<<8|uint16(in[2]), int(in[3])<<8|int(in[4])
			in = in[5:]
			n = min(n, len(in))
			p := in[:n]
			in = in[n:]
			c := cmd(op, out, p)
			if op == cmdMigrateID {
				c = append(c, 0, 0, 0, 0, 0, 0, 0, byte(chs[1-ch].Token()))
			}
			errno, resp := chs[ch].Command(c)
			if errno != 0 {
				require.Nil(t, resp)
			}
			require.LessOrEqual(t, len(resp), 512)
			for i, c := range chs {
				require.Equal(t, len(c.events) > 0, readable[i], "channel %d readable iff events wait", i)
			}
		}
		for _, c := range chs {
			c.Close()
		}
		require.Empty(t, s.ids)
		require.Empty(t, s.ports)
	})
}
