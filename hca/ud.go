package hca

// Unreliable datagram QPs (QPTypeUD). Each send WQE names its destination
// in a datagram segment (sq.DatagramSeg: the address vector, the remote
// QPN and Q_Key); the message is one packet of at most the port MTU, is
// never acknowledged, and completes as soon as it is handed to the
// fabric or the wire. Because nothing answers it, the message carries a
// copy of its payload (a NIC reads a datagram into its own buffer before
// it sends it): the application may reuse its buffer once the send
// completes, whatever the receiver is doing. The receiver takes a receive
// WQE (its own or its SRQ's), writes the 40-byte GRH and then the payload,
// and completes it with the source QP; a datagram it cannot take — no
// receive WQE, a wrong Q_Key, a buffer too short, a QP not ready — is
// dropped silently (counter msg_dropped), as IBA says for UD.

import (
	"net/netip"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/roce"
	"github.com/hcasim/hcasim/sq"
)

// Sizes of a UD message.
const (
	// GRHSize is the space at the head of every UD receive buffer: the
	// GRH, or on RoCEv2 over IPv4 20 reserved bytes and the IPv4 header.
	GRHSize = 40
	// udMTU is the largest UD payload: the port MTU.
	udMTU = 4096
	// privilegedQKey marks a Q_Key in a send WQE that means "the QP's own
	// Q_Key" (IBA 10.2.5).
	privilegedQKey = 0x80000000
)

// SourceGID returns the GID at index of the port's table
// (ifc.PortGID), and false for an empty entry.
func (d *Device) SourceGID(index uint8) ([16]byte, bool) {
	var wire [16]byte
	if w := d.wire.Load(); w != nil {
		wire = w.gid
	}
	return ifc.PortGID(int(index), d.lid, wire)
}

// executeUD runs one WQE of a UD QP: local work, or a SEND or SEND with
// immediate to the destination its datagram segment names.
func (qp *QP) executeUD(s *reqState, a *qpAttr, p *pending, w []byte, f *sq.CtrlFields) {
	switch f.Opcode {
	case sq.OpNOP:
		p.done = true
		return
	case sq.OpSend, sq.OpSendImm:
	default:
		qp.fail(s, p, cq.SyndromeLocalQPOp) // UD sends only
		return
	}
	segs := w[sq.CtrlSegSize:]
	if len(segs) < sq.DatagramSegSize {
		qp.fail(s, p, cq.SyndromeLocalQPOp)
		return
	}
	av := sq.DatagramSeg(segs).Fields()
	sgid, ok := qp.dev.SourceGID(av.SGIDIndex)
	if !ok {
		qp.fail(s, p, cq.SyndromeLocalQPOp) // no such source GID
		return
	}
	r := newRequest()
	src, n, sa, synd := qp.gather(r.segsFor(), segs[sq.DatagramSegSize:], klm.LocalRead, r.sigSlot())
	switch {
	case synd != 0:
	case sa != nil:
		synd = cq.SyndromeLocalProt // no signature offload on UD
	case n > udMTU:
		synd = cq.SyndromeLocalLength
	}
	if synd != 0 {
		r.release()
		qp.fail(s, p, synd)
		return
	}
	r.keepSegs(src)
	if cap(r.udBuf) < int(n) {
		r.udBuf = make([]byte, udMTU)
	}
	r.udBuf = r.udBuf[:n]
	copyFrom(r.udBuf, src, 0)
	qkey := av.QKey
	if qkey&privilegedQKey != 0 {
		qkey = a.qkey
	}
	r.ud, r.op, r.imm, r.solicited, r.length = true, f.Opcode, f.Imm, f.SE, n
	r.src = append(r.segArr[:0], r.udBuf)
	r.udSrcQP, r.udQKey, r.udSGID, r.udDGID = qp.qpn, qkey, sgid, av.RGID
	r.udTClass, r.udHop = av.TClass, av.HopLimit
	r.udV1 = ifc.GIDIsRoCEv1(int(av.SGIDIndex))
	if w := qp.dev.wire.Load(); w != nil && av.RGID != ([16]byte{}) && av.RGID != w.gid && !linkLocal(av.RGID) {
		w.sendUD(qp, r, s.nextPSN, av.DestQPN)
	} else {
		qp.dev.fabric.sendUD(qp.dev, r, av.RLID, av.DestQPN)
	}
	s.nextPSN = roce.PSNAdd(s.nextPSN, 1)
	p.done, p.bytes = true, uint32(n)
}

// sendUD hands a datagram to QP dqpn of the device at lid (0: from's own
// device), which must be a UD QP; otherwise it is dropped.
func (f *Fabric) sendUD(from *Device, r *request, lid uint16, dqpn uint32) {
	d := from
	if lid != 0 && lid != from.lid {
		f.mu.Lock()
		d = f.nodes[lid]
		f.mu.Unlock()
	}
	var dst *QP
	if d != nil {
		dst = d.qp(dqpn)
	}
	if dst == nil || !dst.ud || dst.inbox.put(r) == 0 {
		from.count(&from.ctr.msgDropped)
		r.release()
	}
}

// sendUD transmits a datagram as one UD SEND ONLY packet (with a DETH) to
// QP dqpn at the host r's destination GID names.
func (w *wire) sendUD(qp *QP, r *request, psn, dqpn uint32) {
	defer r.release()
	to := netip.AddrPortFrom(gidAddr(r.udDGID), w.port)
	op := roce.OpUDSendOnly
	if r.op == sq.OpSendImm {
		op = roce.OpUDSendOnlyImm
	}
	p := roce.Packet{BTH: roce.BTH{Opcode: op, SE: r.solicited, PKey: 0xFFFF, DestQP: dqpn, PSN: psn},
		DETH: roce.DETH{QKey: r.udQKey, SrcQP: qp.qpn}, Imm: r.imm}
	u := w.newBurst()
	w.tx(u, to, &p, r.src, 0, int(r.length))
	u.done()
}

// deliverUD takes a UD packet from the wire for qp: the datagram keeps
// the packet's buffer. It reports whether it kept buf.
func (w *wire) deliverUD(qp *QP, from [16]byte, buf *packetBuf) bool {
	p := &buf.pkt
	r := newRequest()
	r.pkt, r.ud = buf, true
	r.op, r.imm, r.solicited = sq.OpSend, p.Imm, p.SE
	if p.Opcode == roce.OpUDSendOnlyImm {
		r.op = sq.OpSendImm
	}
	r.src, r.length = append(r.segArr[:0], p.Payload), uint64(len(p.Payload))
	r.udSrcQP, r.udQKey, r.udSGID, r.udDGID, r.udHop = p.DETH.SrcQP, p.DETH.QKey, from, w.gid, 64
	if qp.inbox.put(r) == 0 {
		r.pkt = nil
		r.release()
		w.dev.ctr.rxDropped.Add(1)
		return false
	}
	return true
}

// serveUD takes a datagram: a receive WQE gets the GRH and the payload
// and completes with the source QP; anything it cannot take is dropped.
func (qp *QP) serveUD(s *respState, r *request) {
	sn := qp.snap.Load()
	st, a, gen := sn.state, &sn.attr, sn.gen
	if gen != s.gen {
		qp.resetResp(s, gen)
	}
	if st != ifc.StateRTR && st != ifc.StateRTS && st != ifc.StateSQD && st != ifc.StateSQE || r.udQKey != a.qkey {
		qp.dev.count(&qp.dev.ctr.msgDropped)
		return
	}
	list, idx, ok := qp.recvWQE(s)
	if !ok {
		qp.dev.count(&qp.dev.ctr.msgDropped)
		return
	}
	dst, dsig, synd := qp.scatter(list, GRHSize+r.length)
	switch {
	case synd == cq.SyndromeLocalLength:
		qp.dev.count(&qp.dev.ctr.msgDropped) // too short: the WQE waits for the next datagram
		return
	case synd == 0 && dsig != nil:
		synd = cq.SyndromeLocalProt // no signature offload on UD
	}
	if synd != 0 {
		qp.consumeRecv(s)
		qp.recvCQE(&cq.Fields{Opcode: cq.OpRespErr, WQECounter: idx, Syndrome: synd}, true)
		qp.toError()
		return
	}
	var g [GRHSize]byte
	ipv4 := buildGRH(g[:], r)
	copyAt(dst, 0, g[:])
	copyAt(dst, GRHSize, r.src[0])
	qp.consumeRecv(s)
	f := cq.Fields{Opcode: cq.OpRespSend, WQECounter: idx, ByteCount: uint32(GRHSize + r.length),
		SrcQP: r.udSrcQP, GRH: true, L3: cq.L3IPv6}
	switch {
	case ipv4:
		f.L3 = cq.L3IPv4
	case r.udV1:
		f.L3 = cq.L3GRH
	}
	if r.op == sq.OpSendImm {
		f.Opcode, f.Immediate = cq.OpRespSendImm, r.imm
	}
	qp.recvCQE(&f, r.solicited)
}

// buildGRH writes the 40 bytes a UD receive buffer starts with: for
// RoCEv2 between IPv4-mapped GIDs 20 zero bytes and the IPv4 header,
// else the IPv6 header (the GRH: RoCEv1 carries one whatever its GIDs), as
// the datagram came in. It reports whether it wrote the IPv4 form.
func buildGRH(b []byte, r *request) bool {
	clear(b[:GRHSize])
	s, d := netip.AddrFrom16(r.udSGID), netip.AddrFrom16(r.udDGID)
	// The UDP datagram: UDP header, BTH, DETH, [ImmDt], payload, pad, ICRC.
	n := 8 + roce.BTHSize + roce.DETHSize + int(r.length) + int(roce.PadFor(int(r.length))) + roce.ICRCSize
	if r.op == sq.OpSendImm {
		n += 4
	}
	o := roce.FrameOptions{TrafficClass: r.udTClass, HopLimit: r.udHop}
	switch {
	case r.udV1:
		roce.PutL3Header(b, s, d, o, n-8) // no UDP header: the GRH is followed by the BTH
		b[6] = grhNextHeaderBTH
	case s.Is4In6() && d.Is4In6():
		roce.PutL3Header(b[20:], s.Unmap(), d.Unmap(), o, n)
		return true
	default:
		roce.PutL3Header(b, s, d, o, n)
	}
	return false
}

// grhNextHeaderBTH is a GRH's next header for an IBA transport header
// (IBA 8.3.1: 0x1B).
const grhNextHeaderBTH = 0x1B
