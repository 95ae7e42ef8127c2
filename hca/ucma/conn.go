package ucma

// Connections: the active and passive sides of the kernel CM's
// exchanges (REQ, REP, RTU, REJ, MRA, DREQ, DREP; SIDR_REQ and SIDR_REP
// for UD) as messages between ids. A message to an id of this Service is
// handed over directly; one to another host goes as a MAD on the wire
// (Device.Send), and the messages that wait for an answer (REQ, REP,
// DREQ, SIDR_REQ) are sent again until it comes, as the kernel's MAD
// agent does, then time out with the kernel's events.

import (
	"math/rand/v2"
	"net/netip"
	"syscall"
	"time"
)

// The CM's timing for the paths rdma_cm sets up: a 20 (4.096 µs × 2^20)
// CM response timeout, the packet lifetime of answers.go, 15 retries.
const (
	cmResponseTimeout = 20
	cmMaxRetries      = 15
)

// retrans is a message an id waits for an answer to: its bytes, where
// they go, how often they went, and the timer that sends them again.
type retrans struct {
	mad   []byte
	to    netip.Addr
	tries int
	timer *time.Timer
	gen   uint64
}

// stop cancels the retransmission.
func (r *retrans) stop() {
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mad, r.timer = nil, nil
	r.gen++
}

// newComm gives id a communication ID no other id holds.
func (s *Service) newComm(id *cmID) {
	for {
		s.nextCM++
		if c := s.nextCM; c != 0 && s.comms[c] == nil {
			id.comm = c
			s.comms[c] = id
			return
		}
	}
}

// local reports whether a is this Service's own (or the host loopback
// it answers for).
func (s *Service) local(a netip.Addr) bool { return s.dev.Local(a) }

// retry is how long a message waits for its answer.
func (s *Service) retry() time.Duration {
	if s.dev.Retry > 0 {
		return s.dev.Retry
	}
	ms := func(t uint) time.Duration { return time.Duration(1) << max(int(t)-8, 0) * time.Millisecond }
	return 2*ms(pathLifetime) + ms(cmResponseTimeout)
}

func (s *Service) maxRetries() int {
	if s.dev.MaxRetries > 0 {
		return s.dev.MaxRetries
	}
	return cmMaxRetries
}

// send delivers m to the CM of host to. It reports false for a message
// to an id that is gone and one to this Service that no one took (a REQ
// beyond the backlog).
func (s *Service) send(to netip.Addr, m *msg) bool {
	if !to.IsValid() {
		return false // the peer is gone: the message goes nowhere
	}
	if s.local(to) {
		return s.handle(to, m)
	}
	if s.dev.Send != nil {
		s.dev.Send(to, m.encode())
	}
	return true
}

// await sends m to id's peer and, when the peer is on the wire, sends it
// again until answered (disarm) or until the retries run out (expire).
func (s *Service) await(id *cmID, m *msg) bool {
	id.retrans.stop()
	to := id.peerHost
	if !to.IsValid() || s.local(to) || s.dev.Send == nil {
		return s.send(to, m)
	}
	id.retrans.mad, id.retrans.to, id.retrans.tries = m.encode(), to, 0
	s.dev.Send(to, id.retrans.mad)
	s.arm(id, s.retry())
	return true
}

// arm starts id's retransmission timer.
func (s *Service) arm(id *cmID, d time.Duration) {
	gen := id.retrans.gen
	id.retrans.timer = time.AfterFunc(d, func() { s.expire(id, gen) })
}

// expire sends an unanswered message again, or gives up on it.
func (s *Service) expire(id *cmID, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &id.retrans
	if s.ids[id.id] != id || r.gen != gen || r.mad == nil {
		return
	}
	if r.tries < s.maxRetries() {
		r.tries++
		s.dev.Send(r.to, r.mad)
		s.arm(id, s.retry())
		return
	}
	r.stop()
	s.timedOut(id)
}

// timedOut reports what the kernel reports when id's message went
// unanswered.
func (s *Service) timedOut(id *cmID) {
	timeout := -int32(syscall.ETIMEDOUT)
	switch id.st {
	case stReqSent:
		id.st = stRouteResolved
		if id.ud {
			s.emitUD(id, evUnreachable, timeout, nil, 0)
			return
		}
		s.emit(id, evUnreachable, timeout, nil, 0)
	case stRepSent:
		id.st = stDisconnected
		s.send(id.peerHost, &msg{attr: attrREJ, tid: id.tid, local: id.comm, remote: id.peerComm, which: rejMsgREP, reason: rejTimeout})
		s.emit(id, evUnreachable, timeout, nil, 0)
	case stDreqSent:
		s.disconnected(id)
		s.emit(id, evDisconnected, timeout, &connParam{}, 0)
	}
}

// disconnected moves id to disconnected and into the CM's timewait,
// after which (if the id still exists) it gets TIMEWAIT_EXIT.
func (s *Service) disconnected(id *cmID) {
	id.st = stDisconnected
	if id.timewait != nil {
		return
	}
	d := s.dev.TimeWait
	if d <= 0 {
		d = time.Duration(1) << (pathLifetime + 1 - 8) * time.Millisecond
	}
	id.timewait = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.ids[id.id] == id && id.st == stDisconnected {
			s.emit(id, evTimewaitExit, 0, nil, 0)
		}
	})
}

func (c *call) connect(id *cmID) syscall.Errno {
	cp := readConnParam(c.p)
	s := c.s
	switch {
	case !cp.valid || id.st != stRouteResolved:
		return syscall.EINVAL
	case !id.ud && len(cp.pd) > reqPD, id.ud && len(cp.pd) > sidrReqPD:
		return syscall.EINVAL
	}
	id.qpn = cp.qpn
	id.respRes, id.initDepth, id.retry, id.rnrRetry = cp.respRes, cp.initDepth, min(cp.retry, 7), min(cp.rnrRetry, 7)
	id.st = stReqSent
	id.tid = rand.Uint64()
	id.peerComm = 0
	pd := make([]byte, cmaHdrSize+len(cp.pd))
	putCMAHdr(pd, id.src, id.dst)
	copy(pd[cmaHdrSize:], cp.pd)
	m := &msg{attr: attrREQ, tid: id.tid, local: id.comm, serviceID: serviceID(id.ps, id.dst.Port()), pd: pd}
	if id.ud {
		m.attr = attrSIDRReq
	} else {
		m.guid, m.qpn, m.psn = s.dev.GUID, id.qpn, id.seq
		m.respRes, m.initDepth, m.retry, m.rnrRetry = cp.respRes, cp.initDepth, id.retry, id.rnrRetry
		m.flowControl, m.srq = cp.flowControl != 0, cp.srq != 0
		m.mtu, m.respTimeout, m.maxRetries = pathMTU, cmResponseTimeout, cmMaxRetries
		m.ackTimeout, m.rate, m.hopLimit, m.sgid, m.dgid = id.ackTimeout(), pathRate, hopLimit, s.gid(), id.peerGID
	}
	if !s.await(id, m) {
		// The REQ is dropped: the kernel's CM retries, then gives up.
		s.timedOut(id)
	}
	return 0
}

// ackTimeout is the local ACK timeout id's QP gets (and its REQ says).
func (id *cmID) ackTimeout() uint8 {
	if id.ackTO != 0 {
		return id.ackTO
	}
	return pathLifetime + 1
}

// handle takes a message from the CM of host from. It reports false for
// a REQ it dropped.
func (s *Service) handle(from netip.Addr, m *msg) bool {
	switch m.attr {
	case attrREQ, attrSIDRReq:
		return s.onRequest(from, m)
	}
	key := m.remote
	if m.attr == attrSIDRRep {
		key = m.local // the request ID: the active id's comm
	}
	id := s.comms[key]
	if m.attr == attrREJ && key == 0 { // from an active side that never heard our answer
		for _, o := range s.ids {
			if o.listener != nil && !o.ud && o.peerComm == m.local && (o.peerHost == from || s.local(from) && s.local(o.peerHost)) {
				id = o
			}
		}
	}
	if id != nil && (id.peerHost != from && !(s.local(from) && s.local(id.peerHost)) ||
		id.peerComm != 0 && m.attr != attrSIDRRep && id.peerComm != m.local) {
		id = nil // not this id's peer
	}
	if id == nil {
		if m.attr == attrDREQ { // the kernel answers a DREQ for an id it does not know
			s.send(from, &msg{attr: attrDREP, tid: m.tid, local: m.remote, remote: m.local})
		}
		return true
	}
	switch m.attr {
	case attrREP:
		s.onREP(id, m)
	case attrRTU:
		if id.st == stRepSent {
			id.retrans.stop()
			s.establish(id)
		}
	case attrREJ:
		s.onREJ(id, m)
	case attrMRA:
		if id.st == stReqSent && m.which == rejMsgREQ && id.retrans.mad != nil {
			// The peer has the REQ: wait the time it asks for, without
			// sending it again.
			id.retrans.tries = s.maxRetries()
			id.retrans.timer.Stop()
			ms := time.Duration(1) << max(int(m.serviceTO)-8, 0) * time.Millisecond
			s.arm(id, s.retry()+ms)
		}
	case attrDREQ:
		s.onDREQ(id, from, m)
	case attrDREP:
		if id.st == stDreqSent {
			id.retrans.stop()
			s.disconnected(id)
			s.emit(id, evDisconnected, 0, &connParam{}, 0)
		}
	case attrSIDRRep:
		s.onSIDRRep(id, m)
	}
	return true
}

// onRequest takes a REQ or a SIDR_REQ: a CONNECT_REQUEST for the
// listener of its service, a REJ (SIDR_REP) when there is none.
func (s *Service) onRequest(from netip.Addr, m *msg) bool {
	ud := m.attr == attrSIDRReq
	for _, o := range s.ids { // a request sent again
		if o.listener != nil && o.ud == ud && o.peerHost == from && o.peerComm == m.local && o.tid == m.tid {
			if o.sent != nil && (o.st == stRepSent || o.st == stEstablished && ud) {
				s.send(from, o.sent)
			}
			return true
		}
	}
	src, dst, ok := cmaHdr(m.pd)
	ps, port := uint16(m.serviceID>>16), uint16(m.serviceID)
	var l *cmID
	if ok && m.serviceID>>32 == 0 {
		l = s.findListener(ps, netip.AddrPortFrom(dst, port))
	}
	if l == nil || l.ud != ud {
		if s.dev.Log != nil {
			s.dev.Log.Debug("cm: a request for no listener", "from", from, "ps", ps, "port", port, "dst", dst,
				"ids_on_port", len(s.ports[portKey{ps, port}]), "sidr", ud)
		}
		if ud {
			s.send(from, &msg{attr: attrSIDRRep, tid: m.tid, local: m.local, status: sidrUnsupported, serviceID: m.serviceID})
		} else {
			s.send(from, &msg{attr: attrREJ, tid: m.tid, remote: m.local, which: rejMsgREQ, reason: rejInvalidServiceID})
		}
		return true
	}
	pending := 0
	for _, o := range s.ids {
		if o.listener == l && o.st == stReqRcvd && !o.delivered {
			pending++
		}
	}
	if pending >= l.backlog {
		return false
	}
	var n uint32
	for s.ids[n] != nil {
		n++
	}
	child := &cmID{id: n, ch: l.ch, ps: l.ps, ud: ud, st: stReqRcvd, src: netip.AddrPortFrom(dst, l.src.Port()),
		dst: src, hasDev: true, seq: rand.Uint32() & 0xFFFFFF, listener: l, tid: m.tid,
		peerHost: from, peerComm: m.local, peerGID: m.sgid, peerQPN: m.qpn, peerPSN: m.psn,
		respRes: m.initDepth, initDepth: m.respRes, retry: m.retry, rnrRetry: m.rnrRetry}
	switch {
	case s.local(from):
		child.peerGID = s.gid()
	case ud:
		child.peerGID = gidOf(from)
	}
	s.ids[n] = child
	s.newComm(child)
	var e event
	e.owner = l
	le.PutUint64(e.resp[0:], l.uid)
	le.PutUint32(e.resp[8:], child.id)
	le.PutUint32(e.resp[12:], evConnectRequest)
	user := m.pd[cmaHdrSize:]
	if ud {
		copy(e.resp[60:60+maxPrivateData], user)
		e.resp[316] = sidrReqPD
	} else {
		fc, srq := uint8(0), uint8(0)
		if m.flowControl {
			fc = 1
		}
		if m.srq {
			srq = 1
		}
		req := connParam{qpn: m.qpn, pd: user, srq: srq, respRes: m.initDepth, initDepth: m.respRes,
			flowControl: fc, retry: m.retry, rnrRetry: m.rnrRetry}
		putConnParam(e.resp[20:], &req, reqPD)
	}
	l.ch.push(&e)
	return true
}

func (c *call) accept(id *cmID) syscall.Errno {
	s := c.s
	cp := readConnParam(c.p[8:])
	switch {
	case !cp.valid && id.st == stRepRcvd && !id.ud: // the active side's RTU
		id.st = stEstablished
		s.send(id.peerHost, &msg{attr: attrRTU, tid: id.tid, local: id.comm, remote: id.peerComm})
		return 0
	case !cp.valid, id.st != stReqRcvd:
		return syscall.EINVAL
	case !id.ud && len(cp.pd) > repPD, id.ud && len(cp.pd) > sidrRepPD:
		return syscall.EINVAL
	}
	id.uid = le.Uint64(c.p)
	id.qpn = cp.qpn
	if cp.respRes != 0xFF {
		id.respRes = cp.respRes
	}
	if cp.initDepth != 0xFF {
		id.initDepth = cp.initDepth
	}
	if id.ud {
		id.st = stEstablished // the SIDR_REP: the passive side hears nothing more
		id.sent = &msg{attr: attrSIDRRep, tid: id.tid, local: id.peerComm, qpn: id.qpn, qkey: udpQKey,
			serviceID: serviceID(id.ps, id.src.Port()), pd: append([]byte(nil), cp.pd...)}
		s.send(id.peerHost, id.sent)
		return 0
	}
	id.st = stRepSent
	id.sent = &msg{attr: attrREP, tid: id.tid, local: id.comm, remote: id.peerComm, qpn: id.qpn, psn: id.seq,
		respRes: id.respRes, initDepth: id.initDepth, ackTimeout: id.ackTimeout(), flowControl: cp.flowControl != 0,
		rnrRetry: min(cp.rnrRetry, 7), srq: cp.srq != 0, guid: s.dev.GUID, pd: append([]byte(nil), cp.pd...)}
	s.await(id, id.sent)
	return 0
}

// onREP takes the passive side's REP: CONNECT_RESPONSE (or, repeated
// after the RTU, the RTU again).
func (s *Service) onREP(id *cmID, m *msg) {
	switch {
	case id.st == stEstablished && id.peerComm == m.local:
		s.send(id.peerHost, &msg{attr: attrRTU, tid: id.tid, local: id.comm, remote: id.peerComm})
		return
	case id.st != stReqSent || id.ud:
		return
	}
	id.retrans.stop()
	id.peerComm = m.local
	id.peerQPN, id.peerPSN = m.qpn, m.psn
	id.respRes, id.initDepth = m.initDepth, m.respRes
	id.st = stRepRcvd
	fc, srq := uint8(0), uint8(0)
	if m.flowControl {
		fc = 1
	}
	if m.srq {
		srq = 1
	}
	rep := connParam{qpn: m.qpn, pd: m.pd, srq: srq, respRes: m.initDepth, initDepth: m.respRes,
		flowControl: fc, rnrRetry: m.rnrRetry}
	s.emit(id, evConnectResponse, 0, &rep, repPD)
}

// onREJ takes a REJ: REJECTED on an active id; a passive one whose
// active side gave up before the REP goes unseen (or, already reported,
// stays without a peer).
func (s *Service) onREJ(id *cmID, m *msg) {
	switch id.st {
	case stReqSent, stRepRcvd:
		id.retrans.stop()
		id.st = stRouteResolved
		s.emit(id, evRejected, int32(m.reason), &connParam{pd: m.pd}, rejPD)
	case stReqRcvd:
		if !id.delivered {
			s.remove(id)
			return
		}
		id.peerHost, id.peerComm = netip.Addr{}, 0
	case stRepSent:
		id.retrans.stop()
		id.st = stDisconnected
		s.emit(id, evRejected, int32(m.reason), &connParam{pd: m.pd}, rejPD)
	}
}

// onSIDRRep takes a SIDR_REP: ESTABLISHED with the remote QP and Q_Key,
// or UNREACHABLE with the status.
func (s *Service) onSIDRRep(id *cmID, m *msg) {
	if id.st != stReqSent || !id.ud {
		return
	}
	id.retrans.stop()
	if m.status != 0 {
		id.st = stRouteResolved
		var u *udAnswer
		if m.status == sidrReject {
			u = &udAnswer{pd: m.pd}
		}
		s.emitUD(id, evUnreachable, int32(m.status), u, sidrRepPD)
		return
	}
	id.st = stEstablished
	id.peerQPN = m.qpn
	s.emitUD(id, evEstablished, 0, &udAnswer{qpn: m.qpn, qkey: m.qkey, pd: m.pd,
		ah: ahAttr{dgid: id.peerGID, sgidIndex: s.dev.SGIDIndex, hopLimit: hopLimit}}, sidrRepPD)
}

// establish moves a passive id that sent its REP to established.
func (s *Service) establish(id *cmID) {
	id.st = stEstablished
	s.emit(id, evEstablished, 0, &connParam{}, 0)
}

func (c *call) reject(id *cmID) syscall.Errno {
	n, reason := int(c.p[4]), c.p[5]
	if reason == 0 {
		reason = rejConsumer
	}
	if (reason != rejConsumer && reason != rejVendorOption) || n > maxPrivateData {
		return syscall.EINVAL
	}
	if id.st != stReqRcvd {
		return syscall.EINVAL
	}
	pd := c.p[8 : 8+n]
	if id.ud && n > sidrRepPD || !id.ud && n > rejPD {
		return syscall.EINVAL
	}
	c.s.rejectPeer(id, reason, pd)
	id.st = stIdle
	return 0
}

// rejectPeer sends id's peer a REJ (or a SIDR_REP reject) with reason.
func (s *Service) rejectPeer(id *cmID, reason uint8, pd []byte) {
	to := id.peerHost
	id.peerHost = netip.Addr{}
	id.retrans.stop()
	if id.ud {
		s.send(to, &msg{attr: attrSIDRRep, tid: id.tid, local: id.peerComm, status: sidrReject,
			serviceID: serviceID(id.ps, id.src.Port()), pd: append([]byte(nil), pd...)})
		return
	}
	s.send(to, &msg{attr: attrREJ, tid: id.tid, local: id.comm, remote: id.peerComm, which: rejMsgREQ,
		reason: uint16(reason), pd: append([]byte(nil), pd...)})
}

// disconnect sends a DREQ from an established id, or the DREP of one
// whose peer disconnected; it is a no-op on one already disconnecting.
func (s *Service) disconnect(id *cmID) syscall.Errno {
	switch id.st {
	case stEstablished, stRepRcvd, stRepSent:
		id.st = stDreqSent
		if !s.await(id, &msg{attr: attrDREQ, tid: id.tid, local: id.comm, remote: id.peerComm, qpn: id.peerQPN}) {
			s.timedOut(id) // no one to answer: the DREQ times out
		}
	case stDreqRcvd:
		s.disconnected(id)
		s.send(id.peerHost, &msg{attr: attrDREP, tid: id.tid, local: id.comm, remote: id.peerComm})
	case stDreqSent, stDisconnected:
	default:
		return syscall.EINVAL // no connection yet
	}
	return 0
}

// onDREQ takes a DREQ: DISCONNECTED on a connected id, a DREP from any
// other.
func (s *Service) onDREQ(id *cmID, from netip.Addr, m *msg) {
	switch id.st {
	case stEstablished, stRepSent, stRepRcvd:
		id.retrans.stop()
		id.st = stDreqRcvd
		s.emit(id, evDisconnected, 0, &connParam{}, 0)
	case stDreqRcvd:
	default:
		s.send(from, &msg{attr: attrDREP, tid: m.tid, local: id.comm, remote: m.local})
	}
}

// destroy removes id: its peer sees what the kernel CM sends for id's
// state, its undelivered events go, a listener's undelivered requests are
// rejected (under s.mu).
func (s *Service) destroy(id *cmID) {
	if s.ids[id.id] != id {
		return
	}
	switch id.st {
	case stEstablished, stRepRcvd:
		if !id.ud {
			s.disconnect(id) // DREQ, sent once: the kernel cancels its retries
		}
	case stDreqRcvd:
		s.disconnect(id) // DREP
	case stReqRcvd, stRepSent:
		s.rejectPeer(id, rejConsumer, nil)
	case stReqSent:
		if !id.ud { // found by its sender's comm ID and CA GUID, as the kernel finds a REJ TIMEOUT's
			s.send(id.peerHost, &msg{attr: attrREJ, tid: id.tid, local: id.comm, which: rejMsgOther, reason: rejTimeout, guid: s.dev.GUID})
		}
	case stListen:
		for _, o := range s.sortedIDs() {
			if o.listener == id && o.st == stReqRcvd && !o.delivered {
				s.rejectPeer(o, rejConsumer, nil)
				s.remove(o)
			}
		}
	}
	s.remove(id)
}

// HandleMAD takes a CM MAD from the host at from (QP1 on the wire). Bytes
// that are not a CM message are dropped, as the MAD layer drops them.
func (s *Service) HandleMAD(from netip.Addr, mad []byte) error {
	m, err := decode(mad)
	if err != nil {
		return err
	}
	if m.attr == attrREQ || m.attr == attrSIDRReq {
		if _, _, ok := cmaHdr(m.pd); !ok {
			return ErrMAD
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handle(from.Unmap(), &m)
	return nil
}
