// Package ucma is the daemon's connection manager: the kernel rdma_ucm
// device (/dev/infiniband/rdma_cm) as rdma-core's librdmacm speaks to it,
// answered from bytes. A Channel is one open of the device; Command takes
// one command as librdmacm writes it (the rdma_ucm_cmd_hdr and its
// payload) and returns the errno and the bytes the kernel would write to
// the command's response pointer. Connections are made between the ids of
// one Service — one daemon's device — with the kernel CM's semantics (REQ,
// REP, RTU, REJ, DREQ/DREP and SIDR, as the events and INIT_QP_ATTR
// answers show them; docs/CONFORMANCE.md "The connection manager").
//
// A channel's events are queued in order; the channel's notifier is
// called with true when the queue becomes non-empty and false when it
// empties, so the daemon can keep the caller's fd readable exactly while
// events wait, as the kernel's poll does.
package ucma

import (
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Device describes the one device a Service connects on.
type Device struct {
	// GUID is the node GUID, as ibv_get_device_guid returns it (in host
	// order here; it is written big-endian) and Index the device index
	// librdmacm matches it with.
	GUID  uint64
	Index uint32
	// Local reports whether addr is an address of this host's RDMA
	// device: connections to such addresses are made within the Service.
	Local func(addr netip.Addr) bool
	// Addr is the port's own address on the wire (the source of the
	// connections it makes to other hosts); Send, if not nil, sends a
	// CM MAD to the CM of the host at addr (QP1 on the RoCEv2 wire). An
	// address that is neither Local nor reachable by Send is unreachable.
	Addr netip.Addr
	Send func(to netip.Addr, mad []byte)
	// Retry is how long the CM waits for the answer to a message on the
	// wire before it sends it again (0: the kernel CM's 6.144 s for the
	// path rdma_cm sets up); MaxRetries how often (0: rdma_cm's 15).
	Retry      time.Duration
	MaxRetries int
	// TimeWait is how long a disconnected id stays in the CM's timewait
	// before TIMEWAIT_EXIT (0: the kernel's 2.048 s, the path's local ACK
	// timeout).
	TimeWait time.Duration
	// Log, if not nil, hears the CM's debug lines.
	Log *slog.Logger
	// SGIDIndex is the GID table index of the RoCEv2 GID for the local
	// addresses (an address handle's sgid_index).
	SGIDIndex uint8
	// GID is the port's GID the local addresses stand for.
	GID [16]byte
}

// Service is one device's connection manager.
type Service struct {
	dev Device

	mu     sync.Mutex
	ids    map[uint32]*cmID
	chans  map[uint64]*Channel
	nextCh uint64
	ports  map[portKey][]*cmID // ids bound to a port
	nextEP uint16              // the next ephemeral port tried
	comms  map[uint32]*cmID    // ids by communication ID
	nextCM uint32              // the next communication ID
}

type portKey struct {
	ps   uint16
	port uint16
}

// New returns a connection manager for dev.
func New(dev Device) *Service {
	if dev.Local == nil {
		dev.Local = func(a netip.Addr) bool { return a.IsLoopback() }
	}
	return &Service{dev: dev, ids: map[uint32]*cmID{}, chans: map[uint64]*Channel{}, ports: map[portKey][]*cmID{}, nextEP: 32768,
		comms: map[uint32]*cmID{}, nextCM: rand.Uint32()}
}

// Usage is what a connection manager holds: open channels (event
// files), CM ids, port bindings and connections by communication ID.
type Usage struct {
	Channels, IDs, Ports, Comms int
}

// Usage returns what the service holds now.
func (s *Service) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Usage{Channels: len(s.chans), IDs: len(s.ids), Ports: len(s.ports), Comms: len(s.comms)}
}

// Channel is one open of the device: its ids and its events.
type Channel struct {
	s      *Service
	token  uint64
	notify func(readable bool)
	events []event // under s.mu
	closed bool
}

// event is a queued event: its bytes and the id whose events_reported it
// counts toward (the listener's, for CONNECT_REQUEST).
type event struct {
	resp  [eventOut]byte
	owner *cmID
}

// Open opens a channel; notify (may be nil) hears whether events wait.
func (s *Service) Open(notify func(readable bool)) *Channel {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextCh++
	ch := &Channel{s: s, token: s.nextCh, notify: notify}
	s.chans[ch.token] = ch
	return ch
}

// Token names the channel for MIGRATE_ID (the shim sends it in place of
// the old fd).
func (ch *Channel) Token() uint64 { return ch.token }

// Close destroys the channel's ids, as closing the fd does: each one's
// peer sees what the kernel's destroy sends it.
func (ch *Channel) Close() {
	s := ch.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch.closed {
		return
	}
	ch.closed = true
	for _, id := range s.sortedIDs() {
		if id.ch == ch {
			s.destroy(id)
		}
	}
	ch.events = nil
	delete(s.chans, ch.token)
}

// sortedIDs returns the ids in number order (deterministic teardown).
func (s *Service) sortedIDs() []*cmID {
	out := make([]*cmID, 0, len(s.ids))
	for _, id := range s.ids {
		out = append(out, id)
	}
	slices.SortFunc(out, func(a, b *cmID) int { return int(a.id) - int(b.id) })
	return out
}

// push queues an event on ch (under s.mu).
func (ch *Channel) push(e *event) {
	if ch.closed {
		return
	}
	ch.events = append(ch.events, *e)
	if len(ch.events) == 1 && ch.notify != nil {
		ch.notify(true)
	}
}

// connection states of an id.
type state uint8

const (
	stIdle state = iota
	stBound
	stListen
	stAddrResolved
	stRouteResolved
	stReqSent     // active: CONNECT sent, no answer yet
	stReqRcvd     // passive child: CONNECT_REQUEST queued
	stRepSent     // passive: accepted, waiting for the RTU
	stRepRcvd     // active: CONNECT_RESPONSE queued
	stEstablished // connected (UD: the SIDR exchange done)
	stDreqSent    // DISCONNECT sent, waiting for the DREP
	stDreqRcvd    // the peer disconnected; our DREP not yet sent
	stDisconnected
)

// cmID is a kernel rdma_cm id.
type cmID struct {
	id       uint32
	ch       *Channel
	uid      uint64
	ps       uint16
	ud       bool
	st       state
	src, dst netip.AddrPort
	hasDev   bool
	reuse    bool
	ackTO    uint8 // RDMA_OPTION_ID_ACK_TIMEOUT (0: not set)
	backlog  int
	reported uint32 // events handed out by GET_EVENT

	seq                uint32 // the starting PSN it sends with
	qpn                uint32 // its QP, from CONNECT or ACCEPT
	comm               uint32 // its communication ID (a SIDR request's request ID)
	tid                uint64 // the transaction ID of its connection's messages
	peerHost           netip.Addr
	peerComm           uint32   // the peer's communication ID (0: not known, or gone)
	peerGID            [16]byte // the path's remote GID
	peerQPN, peerPSN   uint32
	retrans            retrans // the message it waits for an answer to (on the wire)
	sent               *msg    // a passive id's REP or SIDR_REP, sent again for a repeated request
	timewait           *time.Timer
	respRes, initDepth uint8
	retry, rnrRetry    uint8
	listener           *cmID // a child: the listener its request came to
	delivered          bool  // a child: its CONNECT_REQUEST was read
}

// Command executes one command: in is the header and payload librdmacm
// wrote (for SET_OPTION followed by the option's bytes, for MIGRATE_ID by
// the old channel's token, big-endian). It returns 0 and the response
// bytes, or an errno.
func (ch *Channel) Command(in []byte) (syscall.Errno, []byte) {
	if len(in) < 8 {
		return syscall.EINVAL, nil
	}
	op, n, out := le.Uint32(in), int(le.Uint16(in[4:])), int(le.Uint16(in[6:]))
	if op >= numCmds || 8+n > len(in) {
		return syscall.EINVAL, nil
	}
	extra := in[8+n:]
	p := in[8 : 8+n]
	s := ch.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch.closed {
		return syscall.EBADF, nil
	}
	c := &call{s: s, ch: ch, p: p, out: out, extra: extra}
	errno := c.run(op)
	if errno != 0 {
		return errno, nil
	}
	return 0, c.resp
}

// call is one command in execution (under s.mu).
type call struct {
	s     *Service
	ch    *Channel
	p     []byte
	out   int
	extra []byte
	resp  []byte
}

// need reports whether the payload has n bytes.
func (c *call) need(n int) bool { return len(c.p) >= n }

// lookup returns the channel's id at payload offset off: ENOENT for none,
// EINVAL for another channel's.
func (c *call) lookup(off int) (*cmID, syscall.Errno) {
	id := c.s.ids[le.Uint32(c.p[off:])]
	switch {
	case id == nil:
		return nil, syscall.ENOENT
	case id.ch != c.ch:
		return nil, syscall.EINVAL
	}
	return id, 0
}

func (c *call) run(op uint32) syscall.Errno {
	sizes := map[uint32]int{cmdCreateID: createIDIn, cmdDestroyID: destroyIDIn, cmdBindIP: bindIPIn, cmdResolveIP: resolveIPIn,
		cmdResolveRoute: resolveRouteIn, cmdQueryRoute: queryIn, cmdConnect: connectIn, cmdListen: listenIn, cmdAccept: acceptIn,
		cmdReject: rejectIn, cmdDisconnect: disconnectIn, cmdInitQPAttr: initQPAttrIn, cmdGetEvent: getEventIn,
		cmdSetOption: setOptionIn, cmdNotify: notifyIn, cmdMigrateID: migrateIDIn, cmdBind: bindIn, cmdQuery: queryIn}
	if n, ok := sizes[op]; ok && !c.need(n) {
		return syscall.EINVAL
	}
	switch op {
	case cmdCreateID:
		return c.createID()
	case cmdGetEvent:
		return c.getEvent()
	case cmdMigrateID:
		return c.migrate()
	case cmdGetOption, cmdJoinIPMcast, cmdLeaveMcast, cmdJoinMcast, cmdResolveAddr:
		return syscall.ENOSYS // multicast is not modelled; AF_IB's commands never come (BIND refuses AF_IB)
	}
	off := map[uint32]int{cmdDestroyID: 8, cmdBindIP: 36, cmdResolveIP: 56, cmdResolveRoute: 0, cmdQueryRoute: 8,
		cmdConnect: 272, cmdListen: 0, cmdAccept: 280, cmdReject: 0, cmdDisconnect: 0, cmdInitQPAttr: 8, cmdSetOption: 8,
		cmdNotify: 0, cmdBind: 0, cmdQuery: 8}[op]
	id, errno := c.lookup(off)
	if errno != 0 {
		return errno
	}
	switch op {
	case cmdDestroyID:
		return c.destroyID(id)
	case cmdBindIP:
		a, ok := sockaddr(c.p[8:36])
		if !ok {
			return syscall.EINVAL
		}
		return c.s.bind(id, a)
	case cmdBind:
		if le.Uint16(c.p[8:]) == afIB {
			return syscall.EAFNOSUPPORT // no AF_IB: librdmacm turns its AF_IB support off
		}
		a, ok := sockaddr(c.p[8:])
		if !ok || le.Uint16(c.p[6:]) != 0 {
			return syscall.EINVAL
		}
		return c.s.bind(id, a)
	case cmdResolveIP:
		return c.resolveIP(id)
	case cmdResolveRoute:
		if id.st != stAddrResolved {
			return syscall.EINVAL
		}
		id.st = stRouteResolved
		c.s.emit(id, evRouteResolved, 0, nil, 0)
		return 0
	case cmdQueryRoute:
		if c.out < queryRouteMin {
			return syscall.ENOSPC
		}
		c.resp = c.s.route(id)
		return 0
	case cmdQuery:
		return syscall.ENOSYS // only AF_IB mode asks, and it is off
	case cmdListen:
		return c.listen(id)
	case cmdConnect:
		return c.connect(id)
	case cmdAccept:
		return c.accept(id)
	case cmdReject:
		return c.reject(id)
	case cmdDisconnect:
		return c.s.disconnect(id)
	case cmdInitQPAttr:
		return c.initQPAttr(id)
	case cmdSetOption:
		return c.setOption(id)
	case cmdNotify:
		if le.Uint32(c.p[4:]) == 9 && id.st == stRepSent { // IBV_EVENT_COMM_EST: as if the RTU came
			c.s.establish(id)
		}
		return 0
	}
	return syscall.EINVAL
}

func (c *call) createID() syscall.Errno {
	ps := le.Uint16(c.p[16:])
	switch ps {
	case psTCP, psUDP, psIB, psIPoIB:
	default:
		return syscall.EINVAL
	}
	if c.out < 4 {
		return syscall.ENOSPC
	}
	s := c.s
	var n uint32
	for s.ids[n] != nil {
		n++
	}
	id := &cmID{id: n, ch: c.ch, uid: le.Uint64(c.p), ps: ps, ud: ps == psUDP || ps == psIPoIB, seq: rand.Uint32() & 0xFFFFFF}
	s.ids[n] = id
	s.newComm(id)
	c.resp = le.AppendUint32(nil, n)
	return 0
}

func (c *call) destroyID(id *cmID) syscall.Errno {
	if c.out < 4 {
		return syscall.ENOSPC
	}
	reported := id.reported
	c.s.destroy(id)
	c.resp = le.AppendUint32(nil, reported)
	return 0
}

// remove takes id out of every table and drops its queued events.
func (s *Service) remove(id *cmID) {
	delete(s.ids, id.id)
	if id.src.IsValid() {
		k := portKey{id.ps, id.src.Port()}
		s.ports[k] = slices.DeleteFunc(s.ports[k], func(o *cmID) bool { return o == id })
		if len(s.ports[k]) == 0 {
			delete(s.ports, k)
		}
	}
	delete(s.comms, id.comm)
	id.retrans.stop()
	if id.timewait != nil {
		id.timewait.Stop()
	}
	for _, o := range s.ids {
		if o.listener == id {
			o.listener = nil
		}
	}
	ch := id.ch
	was := len(ch.events)
	ch.events = slices.DeleteFunc(ch.events, func(e event) bool {
		return e.owner == id || le.Uint32(e.resp[8:]) == id.id && le.Uint32(e.resp[12:]) != evConnectRequest
	})
	if was > 0 && len(ch.events) == 0 && ch.notify != nil {
		ch.notify(false)
	}
}

// bind binds id to a (port 0: an ephemeral one).
func (s *Service) bind(id *cmID, a netip.AddrPort) syscall.Errno {
	if id.st != stIdle {
		return syscall.EINVAL
	}
	addr := a.Addr()
	wild := addr.IsUnspecified()
	if !wild && !s.dev.Local(addr) {
		return syscall.EADDRNOTAVAIL
	}
	port := a.Port()
	if port == 0 {
		var ok bool
		if port, ok = s.ephemeral(id.ps); !ok {
			return syscall.EADDRINUSE
		}
	}
	for _, o := range s.ports[portKey{id.ps, port}] {
		oa := o.src.Addr()
		if (oa == addr || oa.IsUnspecified() || wild) && !(o.reuse && id.reuse) {
			return syscall.EADDRINUSE
		}
	}
	id.src = netip.AddrPortFrom(addr, port)
	id.hasDev = !wild
	id.st = stBound
	k := portKey{id.ps, port}
	s.ports[k] = append(s.ports[k], id)
	return 0
}

// ephemeral returns a free port of ps from 32768 … 60999.
func (s *Service) ephemeral(ps uint16) (uint16, bool) {
	for range 61000 - 32768 {
		p := s.nextEP
		if s.nextEP++; s.nextEP >= 61000 {
			s.nextEP = 32768
		}
		if len(s.ports[portKey{ps, p}]) == 0 {
			return p, true
		}
	}
	return 0, false
}

func (c *call) resolveIP(id *cmID) syscall.Errno {
	src, _ := sockaddr(c.p[0:28])
	dst, ok := sockaddr(c.p[28:56])
	if !ok {
		return syscall.EINVAL
	}
	s := c.s
	switch id.st {
	case stIdle:
		if !src.IsValid() {
			src = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
		}
		if e := s.bind(id, netip.AddrPortFrom(src.Addr(), 0)); e != 0 {
			return e
		}
	case stBound, stAddrResolved, stRouteResolved:
	default:
		return syscall.EINVAL
	}
	d := dst.Addr()
	if d.IsUnspecified() {
		d = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	local := s.dev.Local(d)
	if !local && (s.dev.Send == nil || !s.dev.Addr.IsValid() || d.Is4() != s.dev.Addr.Is4()) {
		s.emit(id, evAddrError, -int32(syscall.EHOSTUNREACH), nil, 0) // only this host's and the wire's addresses answer
		return 0
	}
	if id.src.Addr().IsUnspecified() { // the source the route to d would take
		a := d
		switch {
		case !local:
			a = s.dev.Addr
		case d.IsLoopback():
			a = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
		id.src = netip.AddrPortFrom(a, id.src.Port())
	}
	id.peerHost, id.peerGID = d, s.gid()
	if !local {
		id.peerGID = gidOf(d)
	}
	id.dst = netip.AddrPortFrom(d, dst.Port())
	id.hasDev = true
	id.st = stAddrResolved
	s.emit(id, evAddrResolved, 0, nil, 0)
	return 0
}

func (c *call) listen(id *cmID) syscall.Errno {
	s := c.s
	switch id.st {
	case stIdle:
		if e := s.bind(id, netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); e != 0 {
			return e
		}
	case stBound, stListen:
	default:
		return syscall.EINVAL
	}
	b := int(int32(le.Uint32(c.p[4:])))
	if b <= 0 || b > 1024 {
		b = 1024
	}
	id.backlog, id.st = b, stListen
	return 0
}

// findListener returns the listener for a connection to dst in ps.
func (s *Service) findListener(ps uint16, dst netip.AddrPort) *cmID {
	var wild *cmID
	for _, o := range s.ports[portKey{ps, dst.Port()}] {
		if o.st != stListen {
			continue
		}
		if a := o.src.Addr(); a == dst.Addr() || a.Is4() == dst.Addr().Is4() && s.dev.Addr.IsValid() && s.local(a) && s.local(dst.Addr()) {
			return o // with a wire, 127.0.0.1 and the port's address are one host's
		}
		if o.src.Addr().IsUnspecified() {
			wild = o
		}
	}
	return wild
}

// gid is the GID of every local address.
func (s *Service) gid() [16]byte { return s.dev.GID }

// emit queues an RC event for id (dropped for a child not yet accepted,
// as the kernel drops them).
func (s *Service) emit(id *cmID, ev uint32, status int32, cp *connParam, pdLen int) {
	if id.listener != nil && id.uid == 0 {
		return
	}
	var e event
	e.owner = id
	le.PutUint64(e.resp[0:], id.uid)
	le.PutUint32(e.resp[8:], id.id)
	le.PutUint32(e.resp[12:], ev)
	le.PutUint32(e.resp[16:], uint32(status))
	if cp != nil {
		putConnParam(e.resp[20:], cp, pdLen)
	}
	id.ch.push(&e)
}

// udAnswer is the ud param of a UD event.
type udAnswer struct {
	qpn, qkey uint32
	ah        ahAttr
	pd        []byte
}

// emitUD queues a UD event for id.
func (s *Service) emitUD(id *cmID, ev uint32, status int32, u *udAnswer, pdLen int) {
	if id.listener != nil && id.uid == 0 {
		return
	}
	var e event
	e.owner = id
	le.PutUint64(e.resp[0:], id.uid)
	le.PutUint32(e.resp[8:], id.id)
	le.PutUint32(e.resp[12:], ev)
	le.PutUint32(e.resp[16:], uint32(status))
	if u != nil {
		le.PutUint32(e.resp[20:], u.qpn)
		le.PutUint32(e.resp[24:], u.qkey)
		if u.ah.dgid != ([16]byte{}) {
			putAH(e.resp[28:], &u.ah)
		}
		copy(e.resp[60:60+maxPrivateData], u.pd)
	}
	e.resp[316] = uint8(pdLen)
	id.ch.push(&e)
}

func (c *call) getEvent() syscall.Errno {
	if c.out < eventMin {
		return syscall.ENOSPC
	}
	ch := c.ch
	if len(ch.events) == 0 {
		return syscall.EAGAIN
	}
	e := ch.events[0]
	ch.events = ch.events[1:]
	if len(ch.events) == 0 && ch.notify != nil {
		ch.notify(false)
	}
	if e.owner != nil {
		e.owner.reported++
	}
	if le.Uint32(e.resp[12:]) == evConnectRequest {
		if child := c.s.ids[le.Uint32(e.resp[8:])]; child != nil {
			child.delivered = true
		}
	}
	c.resp = e.resp[:min(c.out, eventOut)]
	return 0
}

func (c *call) migrate() syscall.Errno {
	if len(c.extra) < 8 || c.out < 4 {
		return syscall.EINVAL
	}
	old := c.s.chans[uint64(c.extra[0])<<56|uint64(c.extra[1])<<48|uint64(c.extra[2])<<40|uint64(c.extra[3])<<32|
		uint64(c.extra[4])<<24|uint64(c.extra[5])<<16|uint64(c.extra[6])<<8|uint64(c.extra[7])]
	if old == nil {
		return syscall.EINVAL
	}
	id := c.s.ids[le.Uint32(c.p[8:])]
	if id == nil || id.ch != old {
		return syscall.ENOENT
	}
	id.ch = c.ch
	var keep []event
	for _, e := range old.events {
		if e.owner == id {
			c.ch.push(&e)
		} else {
			keep = append(keep, e)
		}
	}
	had := len(old.events) > 0
	old.events = keep
	if had && len(keep) == 0 && old.notify != nil {
		old.notify(false)
	}
	c.resp = le.AppendUint32(nil, id.reported)
	return 0
}

func (c *call) setOption(id *cmID) syscall.Errno {
	level, name, n := le.Uint32(c.p[12:]), le.Uint32(c.p[16:]), int(le.Uint32(c.p[20:]))
	if len(c.extra) < n {
		return syscall.EFAULT
	}
	v := c.extra[:n]
	switch {
	case level == 0 && name == 0: // TOS
		if n != 1 {
			return syscall.EINVAL
		}
	case level == 0 && (name == 1 || name == 2): // REUSEADDR, AFONLY
		if n != 4 {
			return syscall.EINVAL
		}
		if name == 1 {
			if id.st != stIdle {
				return syscall.EINVAL
			}
			id.reuse = le.Uint32(v) != 0
		}
	case level == 0 && name == 3: // ACK_TIMEOUT
		if n != 1 || id.ud {
			return syscall.EINVAL
		}
		id.ackTO = min(v[0], 31)
	default:
		return syscall.ENOSYS // RDMA_OPTION_IB_PATH: no ibacm answers here
	}
	return 0
}

// Listening reports whether an id listens on port (in any port space).
func (s *Service) Listening(port uint16) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ids := range s.ports {
		if k.port == port && slices.ContainsFunc(ids, func(id *cmID) bool { return id.st == stListen }) {
			return true
		}
	}
	return false
}
