package ucma

import (
	"net/netip"
	"testing"
	"time"

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

// FuzzMAD: any MADs from the wire, to a CM with a listener (RC and UD)
// and an active id waiting for its REP: each is taken or refused with an
// error, never a panic; what they cause settles (a bounded number of
// answers); a channel is readable exactly while its events wait; closing
// the channels leaves no ids or communication IDs. A MAD that decodes
// encodes to itself.
func FuzzMAD(f *testing.F) {
	pd := make([]byte, reqPDArea)
	putCMAHdr(pd, netip.AddrPortFrom(hostB, 40000), netip.AddrPortFrom(hostA, 7174))
	req := msg{attr: attrREQ, tid: 9, local: 0x55, serviceID: serviceID(psTCP, 7174), qpn: 0x101, psn: 1, pd: pd}
	sreq := req
	sreq.attr, sreq.serviceID = attrSIDRReq, serviceID(psUDP, 7175)
	sreq.pd = append(append([]byte(nil), pd...), make([]byte, sidrReqPDArea-reqPDArea)...)
	seeds := [][]byte{
		append([]byte{0}, req.encode()...),
		append([]byte{0}, sreq.encode()...),
		append([]byte{1}, (&msg{attr: attrREP, local: 0x66, remote: 1, qpn: 0x202}).encode()...),
		append([]byte{1}, (&msg{attr: attrREJ, local: 0x66, remote: 1, reason: rejConsumer}).encode()...),
		append([]byte{1}, (&msg{attr: attrMRA, local: 0x66, remote: 1, serviceTO: 30}).encode()...),
		append([]byte{0}, (&msg{attr: attrDREQ, local: 0x66, remote: 1}).encode()...),
	}
	f.Add(append(append([]byte(nil), seeds[0]...), seeds[5]...))
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		lk, a, b := newLink(time.Hour, 1)
		a.nextCM, b.nextCM = 0, 0
		srv, cli := newSide(t, a), newSide(t, b)
		srv.listen(psTCP, 7174)
		srv.listen(psUDP, 7175)
		c := cli.create(0x2222, psTCP)
		cli.resolve(c, netip.AddrPortFrom(hostA, 7174))
		cli.connect(c, 0x101, "")
		lk.mu.Lock()
		lk.q = nil // the REQ is not delivered: the fuzzer answers for A
		lk.mu.Unlock()
		for len(in) >= 1+MADSize {
			to, from := b, hostA
			if in[0]&1 == 0 {
				to, from = a, hostB
			}
			if in[0]&2 != 0 {
				from = netip.MustParseAddr("10.9.9.9")
			}
			mad := in[1 : 1+MADSize]
			in = in[1+MADSize:]
			m, derr := decode(mad)
			err := to.HandleMAD(from, mad)
			if derr != nil {
				require.Error(t, err)
				continue
			}
			if err == nil {
				got, err := decode(m.encode())
				require.NoError(t, err)
				require.Equal(t, m, got)
			}
			require.True(t, lk.deliver(1000), "answers settle")
			for _, sd := range []*side{srv, cli} {
				sd.ch.s.mu.Lock()
				require.Equal(t, len(sd.ch.events) > 0, sd.readable)
				sd.ch.s.mu.Unlock()
			}
		}
		srv.ch.Close()
		cli.ch.Close()
		lk.flush()
		require.Empty(t, a.ids)
		require.Empty(t, b.ids)
		require.Empty(t, a.comms)
		require.Empty(t, b.comms)
	})
}
