package ucma

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// cmd builds a command: the header (in = len(p), out) and the payload.
func cmd(op uint32, out uint16, p []byte) []byte {
	b := le.AppendUint32(nil, op)
	b = le.AppendUint16(b, uint16(len(p)))
	b = le.AppendUint16(b, out)
	return append(b, p...)
}

type side struct {
	t  *testing.T
	ch *Channel
	// readable is what the notifier last said.
	readable bool
}

func newSide(t *testing.T, s *Service) *side {
	sd := &side{t: t}
	sd.ch = s.Open(func(r bool) { sd.readable = r })
	return sd
}

func (sd *side) do(op uint32, out uint16, p []byte) []byte {
	sd.t.Helper()
	e, r := sd.ch.Command(cmd(op, out, p))
	require.Zero(sd.t, e, "command %d: %v", op, e)
	return r
}

func (sd *side) fail(op uint32, out uint16, p []byte) syscall.Errno {
	sd.t.Helper()
	e, _ := sd.ch.Command(cmd(op, out, p))
	return e
}

func (sd *side) create(uid uint64, ps uint16) uint32 {
	p := make([]byte, createIDIn)
	le.PutUint64(p, uid)
	le.PutUint16(p[16:], ps)
	return le.Uint32(sd.do(cmdCreateID, 4, p))
}

func sin(a string, port uint16) []byte {
	b := make([]byte, sockaddrIn6Size)
	putSockaddr(b, netip.AddrPortFrom(netip.MustParseAddr(a), port))
	return b
}

func (sd *side) bindIP(id uint32, a string, port uint16) syscall.Errno {
	p := make([]byte, bindIPIn)
	copy(p[8:], sin(a, port))
	le.PutUint32(p[36:], id)
	return sd.fail(cmdBindIP, 0, p)
}

func (sd *side) idCmd(op uint32, id uint32, rest ...byte) {
	sd.t.Helper()
	sd.do(op, 0, append(le.AppendUint32(nil, id), rest...))
}

// event reads the next event: its uid, id, type, status and the whole
// response.
func (sd *side) event() (uid uint64, id, ev uint32, status int32, r []byte) {
	sd.t.Helper()
	r = sd.do(cmdGetEvent, eventOut, make([]byte, getEventIn))
	return le.Uint64(r), le.Uint32(r[8:]), le.Uint32(r[12:]), int32(le.Uint32(r[16:])), r
}

func (sd *side) qpAttr(id, state uint32) []byte {
	p := make([]byte, initQPAttrIn)
	le.PutUint32(p[8:], id)
	le.PutUint32(p[12:], state)
	return sd.do(cmdInitQPAttr, qpAttrOut, p)
}

func conn(qpn uint32, pd string, valid bool) []byte {
	b := make([]byte, connParamSize)
	le.PutUint32(b, qpn)
	copy(b[8:], pd)
	b[264], b[266], b[267], b[269], b[270] = uint8(len(pd)), 1, 1, 7, 7
	if valid {
		b[271] = 1
	}
	return b
}

// TestRCConnection: a whole RC connection's life between two channels —
// bind, listen, resolve, REQ, REP, RTU, DREQ, DREP — with the events and
// INIT_QP_ATTR answers librdmacm relies on, and events_reported.
func TestRCConnection(t *testing.T) {
	s := New(Device{GUID: 0x0002c90300000101, GID: gidOf(netip.MustParseAddr("127.0.0.1")), SGIDIndex: 3})
	srv, cli := newSide(t, s), newSide(t, s)
	l := srv.create(0x1111, psTCP)
	require.Zero(t, srv.bindIP(l, "127.0.0.1", 7174))
	srv.idCmd(cmdListen, l, 3, 0, 0, 0)
	route := srv.do(cmdQueryRoute, queryRouteOut, append(make([]byte, 8), le.AppendUint32(make([]byte, 0, 8), l)...)[:16])
	require.Equal(t, uint64(0x0002c90300000101), binary.BigEndian.Uint64(route), "node GUID")
	require.Equal(t, uint8(1), route[196], "port")

	c := cli.create(0x2222, psTCP)
	other := cli.create(0x3333, psTCP)
	require.Equal(t, syscall.EADDRINUSE, cli.bindIP(other, "0.0.0.0", 7174), "a port bound by another id")
	p := make([]byte, resolveIPIn)
	copy(p[28:], sin("127.0.0.1", 7174))
	le.PutUint32(p[56:], c)
	cli.do(cmdResolveIP, 0, p)
	require.True(t, cli.readable)
	_, id, ev, _, _ := cli.event()
	require.Equal(t, [2]uint32{c, evAddrResolved}, [2]uint32{id, ev})
	require.False(t, cli.readable, "no event waits")
	cli.idCmd(cmdResolveRoute, c, 0, 0, 0, 0)
	_, _, ev, _, _ = cli.event()
	require.Equal(t, uint32(evRouteResolved), ev)
	require.Equal(t, uint32(maskInitRC), le.Uint32(cli.qpAttr(c, 1)), "INIT before the REQ")
	rq := make([]byte, initQPAttrIn)
	le.PutUint32(rq[8:], c)
	le.PutUint32(rq[12:], 2)
	require.Equal(t, syscall.EINVAL, cli.fail(cmdInitQPAttr, qpAttrOut, rq), "RTR before a connection")

	cli.do(cmdConnect, 0, append(append(conn(0x101, "hello", true), le.AppendUint32(nil, c)...), make([]byte, 12)...))
	uid, child, ev, _, r := srv.event()
	require.Equal(t, uint32(evConnectRequest), ev)
	require.Equal(t, uint64(0x1111), uid, "the listener's uid")
	require.NotEqual(t, l, child, "a new id")
	require.Equal(t, uint32(0x101), le.Uint32(r[20:]), "the peer's QPN")
	require.Equal(t, "hello", string(r[28:33]))
	require.Equal(t, uint8(reqPD), r[284], "the REQ's private data length")

	// The passive side's QP: RTR receives with its own PSN from the peer's QPN.
	rtr := srv.qpAttr(child, 2)
	require.Equal(t, uint32(maskRTR), le.Uint32(rtr))
	require.Equal(t, uint32(0x101), le.Uint32(rtr[32:]))
	acc := append(le.AppendUint64(nil, 0x4444), conn(0x202, "world", true)...)
	srv.do(cmdAccept, 0, append(append(acc, le.AppendUint32(nil, child)...), make([]byte, 12)...))
	_, id, ev, _, r = cli.event()
	require.Equal(t, [2]uint32{c, evConnectResponse}, [2]uint32{id, ev})
	require.Equal(t, uint32(0x202), le.Uint32(r[20:]))
	require.Equal(t, uint8(repPD), r[284])
	crtr, crts, srts := cli.qpAttr(c, 2), cli.qpAttr(c, 3), srv.qpAttr(child, 3)
	require.Equal(t, le.Uint32(rtr[24:]), le.Uint32(crts[28:]), "the active side sends from the passive side's receive PSN")
	require.Equal(t, le.Uint32(crtr[24:]), le.Uint32(srts[28:]), "and the other way")
	require.Equal(t, uint32(0xE), le.Uint32(cli.qpAttr(c, 1)[36:]), "INIT after the REP grants remote access")

	// The RTU: an ACCEPT without parameters on the active side.
	rtu := make([]byte, acceptIn)
	le.PutUint32(rtu[280:], c)
	cli.do(cmdAccept, 0, rtu)
	uid, id, ev, _, _ = srv.event()
	require.Equal(t, [2]uint32{child, evEstablished}, [2]uint32{id, ev})
	require.Equal(t, uint64(0x4444), uid, "the ACCEPT's uid")

	// DREQ from the active side, DREP from the passive one.
	cli.idCmd(cmdDisconnect, c)
	_, id, ev, _, _ = srv.event()
	require.Equal(t, [2]uint32{child, evDisconnected}, [2]uint32{id, ev})
	require.False(t, cli.readable, "no DISCONNECTED before the DREP")
	srv.idCmd(cmdDisconnect, child)
	_, id, ev, _, _ = cli.event()
	require.Equal(t, [2]uint32{c, evDisconnected}, [2]uint32{id, ev})
	cli.idCmd(cmdDisconnect, c) // again: nothing to do

	for _, x := range []struct {
		sd       *side
		id, want uint32
	}{{cli, c, 4}, {srv, child, 2}, {srv, l, 1}, {cli, other, 0}} {
		d := make([]byte, destroyIDIn)
		le.PutUint32(d[8:], x.id)
		require.Equal(t, x.want, le.Uint32(x.sd.do(cmdDestroyID, 4, d)), "events reported of id %d", x.id)
	}
	require.Empty(t, s.ids)
	require.Empty(t, s.ports)
}

// TestRejectsAndSIDR: no listener is REJECTED with reason 8; a rejected
// request carries the private data; a UD request is answered with the
// QPN, Q_Key and address of the passive side.
func TestRejectsAndSIDR(t *testing.T) {
	s := New(Device{GUID: 1, GID: gidOf(netip.MustParseAddr("127.0.0.1")), SGIDIndex: 3})
	srv, cli := newSide(t, s), newSide(t, s)
	resolve := func(id uint32, port uint16) {
		p := make([]byte, resolveIPIn)
		copy(p[28:], sin("127.0.0.1", port))
		le.PutUint32(p[56:], id)
		cli.do(cmdResolveIP, 0, p)
		cli.event()
		cli.idCmd(cmdResolveRoute, id, 0, 0, 0, 0)
		cli.event()
	}
	connect := func(id, qpn uint32) {
		cli.do(cmdConnect, 0, append(append(conn(qpn, "pd", true), le.AppendUint32(nil, id)...), make([]byte, 12)...))
	}
	c := cli.create(1, psTCP)
	resolve(c, 9000)
	connect(c, 0x10)
	_, _, ev, st, _ := cli.event()
	require.Equal(t, [2]int32{evRejected, rejInvalidServiceID}, [2]int32{int32(ev), st})

	l := srv.create(2, psTCP)
	require.Zero(t, srv.bindIP(l, "0.0.0.0", 9000))
	srv.idCmd(cmdListen, l, 0, 0, 0, 0)
	connect(c, 0x10)
	_, child, _, _, _ := srv.event()
	rej := make([]byte, rejectIn)
	le.PutUint32(rej, child)
	rej[4] = 3
	copy(rej[8:], "no!")
	srv.do(cmdReject, 0, rej)
	_, _, ev, st, r := cli.event()
	require.Equal(t, [2]int32{evRejected, rejConsumer}, [2]int32{int32(ev), st})
	require.Equal(t, "no!", string(r[28:31]))
	require.Equal(t, uint8(rejPD), r[284])

	ul := srv.create(3, psUDP)
	require.Zero(t, srv.bindIP(ul, "127.0.0.1", 7174))
	srv.idCmd(cmdListen, ul, 0, 0, 0, 0)
	u := cli.create(4, psUDP)
	resolve(u, 7174)
	require.Equal(t, uint32(maskInitUD), le.Uint32(cli.qpAttr(u, 1)))
	connect(u, 0x20)
	_, uchild, ev, _, _ := srv.event()
	require.Equal(t, uint32(evConnectRequest), ev)
	acc := append(le.AppendUint64(nil, 5), conn(0x30, "", true)...)
	srv.do(cmdAccept, 0, append(append(acc, le.AppendUint32(nil, uchild)...), make([]byte, 12)...))
	require.False(t, srv.readable, "the passive UD side hears nothing more")
	_, id, ev, _, r := cli.event()
	require.Equal(t, [2]uint32{u, evEstablished}, [2]uint32{id, ev})
	require.Equal(t, uint32(0x30), le.Uint32(r[20:]), "the passive QPN")
	require.Equal(t, uint32(udpQKey), le.Uint32(r[24:]))
	require.Equal(t, uint8(1), r[28+29], "a global route")
	srv.ch.Close()
	cli.ch.Close()
	require.Empty(t, s.ids)
}
