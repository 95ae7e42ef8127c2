package ucma

import (
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// link carries two Services' MADs: Send queues them, flush (or a pump)
// delivers them, drop decides which are lost.
type link struct {
	mu    sync.Mutex
	q     []linkMAD
	svc   map[netip.Addr]*Service
	drop  func(m *msg) bool
	sent  []uint16 // the attribute of every MAD sent, in order
	wake  chan struct{}
	stopc chan struct{}
}

type linkMAD struct {
	from, to netip.Addr
	mad      []byte
}

var (
	hostA = netip.MustParseAddr("10.0.0.2")
	hostB = netip.MustParseAddr("10.0.0.3")
)

// newLink returns Services on hostA and hostB joined by a link; retry
// sets their CM's retry time (0: the kernel's).
func newLink(retry time.Duration, maxRetries int) (*link, *Service, *Service) {
	l := &link{svc: map[netip.Addr]*Service{}, wake: make(chan struct{}, 1)}
	mk := func(own netip.Addr, guid uint64) *Service {
		s := New(Device{GUID: guid, GID: gidOf(own), SGIDIndex: 3, Addr: own, Retry: retry, MaxRetries: maxRetries, TimeWait: time.Hour,
			Local: func(a netip.Addr) bool { return a == own || a == netip.MustParseAddr("127.0.0.1") },
			Send: func(to netip.Addr, mad []byte) {
				m, err := decode(mad)
				if err != nil {
					panic(err)
				}
				l.mu.Lock()
				l.sent = append(l.sent, m.attr)
				if l.drop == nil || !l.drop(&m) {
					l.q = append(l.q, linkMAD{own, to, mad})
				}
				l.mu.Unlock()
				select {
				case l.wake <- struct{}{}:
				default:
				}
			}})
		l.svc[own] = s
		return s
	}
	return l, mk(hostA, 0xA), mk(hostB, 0xB)
}

// flush delivers the queued MADs (and those they cause) until none wait.
func (l *link) flush() {
	for !l.deliver(1 << 20) {
	}
}

// deliver delivers up to n queued MADs (and those they cause); it
// reports whether none wait.
func (l *link) deliver(n int) bool {
	for range n {
		l.mu.Lock()
		if len(l.q) == 0 {
			l.mu.Unlock()
			return true
		}
		m := l.q[0]
		l.q = l.q[1:]
		l.mu.Unlock()
		if s := l.svc[m.to]; s != nil {
			if err := s.HandleMAD(m.from, m.mad); err != nil {
				panic(err)
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.q) == 0
}

// pump delivers MADs as they are sent until the test ends.
func (l *link) pump(t *testing.T) {
	l.stopc = make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-l.stopc:
				return
			case <-l.wake:
				l.flush()
			}
		}
	}()
	t.Cleanup(func() { close(l.stopc); <-done })
}

func (l *link) attrs() []uint16 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]uint16(nil), l.sent...)
}

// waitEvent reads sd's next event, waiting (bounded) for the link to
// bring it.
func (sd *side) waitEvent(s *Service) (uid uint64, id, ev uint32, status int32, r []byte) {
	sd.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := len(sd.ch.events)
		s.mu.Unlock()
		if n > 0 {
			return sd.event()
		}
		require.True(sd.t, time.Now().Before(deadline), "no event within 10 s")
	}
}

func (sd *side) resolve(id uint32, dst netip.AddrPort) {
	sd.t.Helper()
	p := make([]byte, resolveIPIn)
	putSockaddr(p[28:], dst)
	le.PutUint32(p[56:], id)
	sd.do(cmdResolveIP, 0, p)
	_, _, ev, st, _ := sd.event()
	require.Equal(sd.t, [2]int32{evAddrResolved, 0}, [2]int32{int32(ev), st})
	sd.idCmd(cmdResolveRoute, id, 0, 0, 0, 0)
	_, _, ev, _, _ = sd.event()
	require.Equal(sd.t, uint32(evRouteResolved), ev)
}

func (sd *side) connect(id, qpn uint32, pd string) {
	sd.t.Helper()
	sd.do(cmdConnect, 0, append(append(conn(qpn, pd, true), le.AppendUint32(nil, id)...), make([]byte, 12)...))
}

func (sd *side) accept(id uint32, uid uint64, qpn uint32, pd string) {
	sd.t.Helper()
	acc := append(le.AppendUint64(nil, uid), conn(qpn, pd, true)...)
	sd.do(cmdAccept, 0, append(append(acc, le.AppendUint32(nil, id)...), make([]byte, 12)...))
}

func (sd *side) listen(ps uint16, port uint16) uint32 {
	sd.t.Helper()
	l := sd.create(0x1111, ps)
	require.Zero(sd.t, sd.bindIP(l, "0.0.0.0", port))
	sd.idCmd(cmdListen, l, 3, 0, 0, 0)
	return l
}

// TestWireConnection: an RC connection's life between the CMs of two
// hosts, every message a MAD on the link: REQ, REP, RTU, DREQ, DREP, with
// the same events and QP attributes as within one Service, and each
// side's path naming the other's GID.
func TestWireConnection(t *testing.T) {
	lk, a, b := newLink(0, 0)
	srv, cli := newSide(t, a), newSide(t, b)
	srv.listen(psTCP, 7174)
	c := cli.create(0x2222, psTCP)
	cli.resolve(c, netip.AddrPortFrom(hostA, 7174))
	route := cli.do(cmdQueryRoute, queryRouteOut, append(make([]byte, 8), le.AppendUint32(make([]byte, 0, 8), c)...)[:16])
	require.Equal(t, gidOf(hostA), [16]byte(route[8:24]), "the route's dgid: A's")
	require.Equal(t, gidOf(hostB), [16]byte(route[24:40]), "its sgid: B's")

	cli.connect(c, 0x101, "hello")
	lk.flush()
	_, child, ev, _, r := srv.event()
	require.Equal(t, uint32(evConnectRequest), ev)
	require.Equal(t, uint32(0x101), le.Uint32(r[20:]), "the peer's QPN")
	require.Equal(t, "hello", string(r[28:33]))
	require.Equal(t, uint8(reqPD), r[284])
	rtr := srv.qpAttr(child, 2)
	require.Equal(t, uint32(0x101), le.Uint32(rtr[32:]))
	require.Equal(t, gidOf(hostB), [16]byte(rtr[40:56]), "the passive side's RTR address: B's GID")

	srv.accept(child, 0x4444, 0x202, "world")
	lk.flush()
	_, id, ev, _, r := cli.event()
	require.Equal(t, [2]uint32{c, evConnectResponse}, [2]uint32{id, ev})
	require.Equal(t, uint32(0x202), le.Uint32(r[20:]))
	require.Equal(t, "world", string(r[28:33]))
	crtr, crts, srts := cli.qpAttr(c, 2), cli.qpAttr(c, 3), srv.qpAttr(child, 3)
	require.Equal(t, le.Uint32(rtr[24:]), le.Uint32(crts[28:]), "the active side sends from the passive side's receive PSN")
	require.Equal(t, le.Uint32(crtr[24:]), le.Uint32(srts[28:]), "and the other way")
	require.Equal(t, gidOf(hostA), [16]byte(crtr[40:56]), "the active side's RTR address: A's GID")

	rtu := make([]byte, acceptIn)
	le.PutUint32(rtu[280:], c)
	cli.do(cmdAccept, 0, rtu)
	lk.flush()
	uid, id, ev, _, _ := srv.event()
	require.Equal(t, [2]uint32{child, evEstablished}, [2]uint32{id, ev})
	require.Equal(t, uint64(0x4444), uid)

	cli.idCmd(cmdDisconnect, c)
	lk.flush()
	_, id, ev, _, _ = srv.event()
	require.Equal(t, [2]uint32{child, evDisconnected}, [2]uint32{id, ev})
	require.False(t, cli.readable, "no DISCONNECTED before the DREP")
	srv.idCmd(cmdDisconnect, child)
	lk.flush()
	_, id, ev, st, _ := cli.event()
	require.Equal(t, [3]int32{int32(c), evDisconnected, 0}, [3]int32{int32(id), int32(ev), st})
	require.Equal(t, []uint16{attrREQ, attrREP, attrRTU, attrDREQ, attrDREP}, lk.attrs())

	// No listener: REJ, reason 8.
	c2 := cli.create(1, psTCP)
	cli.resolve(c2, netip.AddrPortFrom(hostA, 9000))
	cli.connect(c2, 0x10, "")
	lk.flush()
	_, _, ev, st, _ = cli.event()
	require.Equal(t, [2]int32{evRejected, rejInvalidServiceID}, [2]int32{int32(ev), st})

	srv.ch.Close()
	cli.ch.Close()
	lk.flush()
	require.Empty(t, a.ids)
	require.Empty(t, b.ids)
	require.Empty(t, a.comms)
}

// TestWireSIDR: a UD "connection" between two hosts: SIDR_REQ, then
// SIDR_REP with the passive QPN, the UDP port space's Q_Key and A's GID
// as the address; a rejected SIDR carries its private data.
func TestWireSIDR(t *testing.T) {
	lk, a, b := newLink(0, 0)
	srv, cli := newSide(t, a), newSide(t, b)
	srv.listen(psUDP, 7174)
	u := cli.create(4, psUDP)
	cli.resolve(u, netip.AddrPortFrom(hostA, 7174))
	cli.connect(u, 0x20, "ud")
	lk.flush()
	_, child, ev, _, r := srv.event()
	require.Equal(t, uint32(evConnectRequest), ev)
	require.Equal(t, "ud", string(r[60:62]))
	srv.accept(child, 5, 0x30, "")
	lk.flush()
	_, id, ev, _, r := cli.event()
	require.Equal(t, [2]uint32{u, evEstablished}, [2]uint32{id, ev})
	require.Equal(t, uint32(0x30), le.Uint32(r[20:]))
	require.Equal(t, uint32(udpQKey), le.Uint32(r[24:]))
	require.Equal(t, gidOf(hostA), [16]byte(r[28:44]), "the AH's dgid: A's GID")

	u2 := cli.create(6, psUDP)
	cli.resolve(u2, netip.AddrPortFrom(hostA, 7174))
	cli.connect(u2, 0x21, "")
	lk.flush()
	_, child, _, _, _ = srv.event()
	rej := make([]byte, rejectIn)
	le.PutUint32(rej, child)
	rej[4] = 3
	copy(rej[8:], "no!")
	srv.do(cmdReject, 0, rej)
	lk.flush()
	_, _, ev, st, r := cli.event()
	require.Equal(t, [2]int32{evUnreachable, sidrReject}, [2]int32{int32(ev), st})
	require.Equal(t, "no!", string(r[60:63]))
	require.Equal(t, []uint16{attrSIDRReq, attrSIDRRep, attrSIDRReq, attrSIDRRep}, lk.attrs())
}

// TestWireRetries: each message that waits for an answer is sent again
// when the first copy is lost (REQ, REP, DREQ, and SIDR_REQ), answers to
// repeated messages are repeated (REP, DREP), both sides of a connection
// leave the timewait with TIMEWAIT_EXIT, and a host that never answers
// times out: UNREACHABLE -ETIMEDOUT after MaxRetries resends.
func TestWireRetries(t *testing.T) {
	lk, a, b := newLink(20*time.Millisecond, 3)
	a.dev.TimeWait, b.dev.TimeWait = 30*time.Millisecond, 30*time.Millisecond
	lost := map[uint16]bool{}
	lk.drop = func(m *msg) bool {
		if (m.attr == attrREQ || m.attr == attrREP || m.attr == attrDREQ || m.attr == attrSIDRReq) && !lost[m.attr] {
			lost[m.attr] = true
			return true
		}
		return false
	}
	lk.pump(t)
	srv, cli := newSide(t, a), newSide(t, b)
	srv.listen(psTCP, 7174)
	c := cli.create(0x2222, psTCP)
	cli.resolve(c, netip.AddrPortFrom(hostA, 7174))
	cli.connect(c, 0x101, "")
	_, child, ev, _, _ := srv.waitEvent(a)
	require.Equal(t, uint32(evConnectRequest), ev, "the REQ sent again")
	srv.accept(child, 0x4444, 0x202, "")
	_, _, ev, _, _ = cli.waitEvent(b)
	require.Equal(t, uint32(evConnectResponse), ev, "the REP sent again")
	rtu := make([]byte, acceptIn)
	le.PutUint32(rtu[280:], c)
	cli.do(cmdAccept, 0, rtu)
	_, _, ev, _, _ = srv.waitEvent(a)
	require.Equal(t, uint32(evEstablished), ev)
	cli.idCmd(cmdDisconnect, c)
	_, _, ev, _, _ = srv.waitEvent(a)
	require.Equal(t, uint32(evDisconnected), ev, "the DREQ sent again")
	srv.idCmd(cmdDisconnect, child)
	_, _, ev, st, _ := cli.waitEvent(b)
	require.Equal(t, [2]int32{evDisconnected, 0}, [2]int32{int32(ev), st})
	// Both sides leave the timewait: TIMEWAIT_EXIT.
	_, id, ev, _, _ := cli.waitEvent(b)
	require.Equal(t, [2]uint32{c, evTimewaitExit}, [2]uint32{id, ev})
	_, id, ev, _, _ = srv.waitEvent(a)
	require.Equal(t, [2]uint32{child, evTimewaitExit}, [2]uint32{id, ev})

	u := cli.create(4, psUDP)
	srv.listen(psUDP, 7175)
	cli.resolve(u, netip.AddrPortFrom(hostA, 7175))
	cli.connect(u, 0x20, "")
	_, uchild, ev, _, _ := srv.waitEvent(a)
	require.Equal(t, uint32(evConnectRequest), ev, "the SIDR_REQ sent again")
	srv.accept(uchild, 5, 0x30, "")
	_, _, ev, _, _ = cli.waitEvent(b)
	require.Equal(t, uint32(evEstablished), ev)

	// A host that does not answer.
	lk.mu.Lock()
	lk.drop = func(*msg) bool { return true }
	before := len(lk.sent)
	lk.mu.Unlock()
	c2 := cli.create(7, psTCP)
	cli.resolve(c2, netip.AddrPortFrom(hostA, 7174))
	cli.connect(c2, 0x102, "")
	_, id, ev, st, _ = cli.waitEvent(b)
	require.Equal(t, [3]int32{int32(c2), evUnreachable, -int32(syscall.ETIMEDOUT)}, [3]int32{int32(id), int32(ev), st})
	require.Equal(t, []uint16{attrREQ, attrREQ, attrREQ, attrREQ}, lk.attrs()[before:], "the REQ and 3 resends")
}

// TestWireMRA: an MRA for the REQ stops its resends for the service
// timeout it names; the REP then connects as usual.
func TestWireMRA(t *testing.T) {
	lk, _, b := newLink(5*time.Millisecond, 15)
	lk.drop = func(*msg) bool { return true } // host A is not there: the test answers for it
	cli := newSide(t, b)
	c := cli.create(0x2222, psTCP)
	cli.resolve(c, netip.AddrPortFrom(hostA, 7174))
	cli.connect(c, 0x101, "")
	b.mu.Lock()
	comm := b.ids[c].comm
	b.mu.Unlock()
	mra := msg{attr: attrMRA, local: 77, remote: comm, which: rejMsgREQ, serviceTO: 20}
	require.NoError(t, b.HandleMAD(hostA, mra.encode()))
	n := len(lk.attrs())
	time.Sleep(50 * time.Millisecond)
	require.Len(t, lk.attrs(), n, "no REQ resent while the peer asked for time")
	rep := msg{attr: attrREP, local: 77, remote: comm, qpn: 0x202, psn: 5, rnrRetry: 7}
	require.NoError(t, b.HandleMAD(hostA, rep.encode()))
	_, id, ev, _, r := cli.event()
	require.Equal(t, [2]uint32{c, evConnectResponse}, [2]uint32{id, ev})
	require.Equal(t, uint32(0x202), le.Uint32(r[20:]))
	rep.qpn = 0x303
	require.NoError(t, b.HandleMAD(hostB, rep.encode()), "a REP from another host")
	require.False(t, cli.readable, "is not this id's")
}

// TestMADLayout: the encoded messages have the byte layout of IBTA vol. 1
// ch. 12 (Linux's ibta_vol1_c12.h) at a few fields each, and decode back.
func TestMADLayout(t *testing.T) {
	req := msg{attr: attrREQ, tid: 0x1122334455667788, local: 0xAABBCCDD, serviceID: serviceID(psTCP, 7174),
		guid: 0x0002c90300000101, qpn: 0x123456, psn: 0xABCDEF, respRes: 4, initDepth: 3, retry: 7, rnrRetry: 6,
		mtu: 5, respTimeout: 20, maxRetries: 15, ackTimeout: 19, rate: 7, hopLimit: 64, srq: true,
		sgid: gidOf(hostB), dgid: gidOf(hostA), pd: make([]byte, reqPDArea)}
	putCMAHdr(req.pd, netip.AddrPortFrom(hostB, 40000), netip.AddrPortFrom(hostA, 7174))
	b := req.encode()
	require.Equal(t, []byte{1, 7, 2, 3}, b[:4], "base version, CM class, class version, Send")
	require.Equal(t, []byte{0, 0x10}, b[16:18], "attribute REQ")
	d := b[24:]
	require.Equal(t, []byte{0xAA, 0xBB, 0xCC, 0xDD}, d[0:4])
	require.Equal(t, []byte{0, 0, 0, 0, 0x01, 0x06, 0x1C, 0x06}, d[8:16], "service ID: RDMA_PS_TCP, port 7174")
	require.Equal(t, []byte{0x12, 0x34, 0x56, 4}, d[32:36], "local QPN, responder resources")
	require.Equal(t, []byte{0xAB, 0xCD, 0xEF, 20<<3 | 7}, d[44:48], "starting PSN, local CM response timeout, retry count")
	require.Equal(t, []byte{0xFF, 0xFF, 5<<4 | 6, 15<<4 | 8}, d[48:52], "P_Key, MTU and RNR retry, max CM retries and SRQ")
	require.Equal(t, byte(0x40), d[140+1], "the cma header: IPv4")
	got, err := decode(b)
	require.NoError(t, err)
	require.Equal(t, req, got)
	src, dst, ok := cmaHdr(got.pd)
	require.True(t, ok)
	require.Equal(t, netip.AddrPortFrom(hostB, 40000), src)
	require.Equal(t, hostA, dst)

	for _, m := range []msg{
		{attr: attrREP, local: 1, remote: 2, qpn: 0x202, psn: 9, respRes: 1, initDepth: 2, ackTimeout: 19, rnrRetry: 7, srq: true, guid: 5, pd: make([]byte, repPDArea)},
		{attr: attrREJ, local: 1, remote: 2, which: rejMsgREP, reason: rejTimeout, guid: 9, pd: make([]byte, rejPDArea)},
		{attr: attrMRA, local: 1, remote: 2, which: 1, serviceTO: 22, pd: make([]byte, mraPDArea)},
		{attr: attrRTU, local: 1, remote: 2, pd: make([]byte, rtuPDArea)},
		{attr: attrDREQ, local: 1, remote: 2, qpn: 0x77, pd: make([]byte, dreqPDArea)},
		{attr: attrDREP, local: 1, remote: 2, pd: make([]byte, drepPDArea)},
		{attr: attrSIDRReq, local: 3, serviceID: serviceID(psUDP, 7174), pd: make([]byte, sidrReqPDArea)},
		{attr: attrSIDRRep, local: 3, status: 2, qpn: 0x30, serviceID: 7, qkey: udpQKey, pd: make([]byte, sidrRepPDArea)},
	} {
		got, err := decode(m.encode())
		require.NoError(t, err)
		require.Equal(t, m, got, "attribute %#x", m.attr)
	}
	rep := (&msg{attr: attrREP, qpn: 0x202, rnrRetry: 7, srq: true}).encode()[24:]
	require.Equal(t, []byte{0, 0x02, 0x02}, rep[12:15], "REP local QPN")
	require.Equal(t, byte(7<<5|0x10), rep[27], "REP RNR retry count and SRQ")
	_, err = decode(make([]byte, MADSize))
	require.ErrorIs(t, err, ErrMAD)
}
