package hca

// Raw packet QPs (QPTypeRaw). A send WQE is an Ethernet frame: the
// control segment, the Ethernet segment (sq.EthSeg) with the frame's first
// bytes inline, then data segments with the rest. The device is its own
// Ethernet switch: a frame goes to the flow tables (flow.go) of the
// sending device and of every device on its fabric, and each raw QP whose
// flow takes it receives a copy into its next receive WQE — the frame
// itself, with no GRH. Like a UD datagram, the frame is copied when it is
// sent (the send completes at once) and a copy nobody can take is dropped
// and counted (msg_dropped). Frames do not cross the RoCEv2 wire between
// daemons, which carries RoCE packets only.

import (
	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/sq"
)

// Sizes of a raw frame.
const (
	// ethHeaderSize is the shortest frame: destination and source MAC
	// and the EtherType.
	ethHeaderSize = 14
	// rawMaxFrame is the longest frame a raw QP sends: a 9000-byte jumbo
	// MTU, the Ethernet header and a VLAN tag.
	rawMaxFrame = 9000 + ethHeaderSize + 4
)

// executeRaw runs one WQE of a raw packet QP: a NOP, or a SEND of the
// frame the WQE holds.
func (qp *QP) executeRaw(s *reqState, p *pending, w []byte, f *sq.CtrlFields) {
	switch f.Opcode {
	case sq.OpNOP:
		p.done = true
		return
	case sq.OpSend:
	default:
		qp.fail(s, p, cq.SyndromeLocalQPOp) // no TSO, no immediate data on Ethernet
		return
	}
	eth := sq.EthSeg(w[sq.CtrlSegSize:])
	hdr, size, ok := eth.Header()
	if !ok || eth.MSS() != 0 || eth.CsumFlags() != 0 {
		qp.fail(s, p, cq.SyndromeLocalQPOp) // no checksum or segmentation offload is advertised
		return
	}
	r := newRequest()
	src, n, sa, synd := qp.gather(r.segsFor(), w[sq.CtrlSegSize+size:], klm.LocalRead, r.sigSlot())
	total := uint64(len(hdr)) + n
	switch {
	case synd != 0:
	case sa != nil:
		synd = cq.SyndromeLocalProt // no signature offload on Ethernet
	case total < ethHeaderSize || total > rawMaxFrame:
		synd = cq.SyndromeLocalLength
	}
	if synd != 0 {
		r.release()
		qp.fail(s, p, synd)
		return
	}
	if cap(r.udBuf) < int(total) {
		r.udBuf = make([]byte, max(int(total), 2048))
	}
	r.udBuf = r.udBuf[:total]
	copy(r.udBuf, hdr)
	copyFrom(r.udBuf[len(hdr):], src, 0)
	r.raw, r.op, r.length = true, sq.OpSend, total
	r.src = append(r.segArr[:0], r.udBuf)
	qp.dev.fabric.sendRaw(qp, r)
	p.done, p.bytes = true, uint32(total)
}

// sendRaw hands frame r, sent by qp, to the flow tables of its device and
// of every other device on the fabric, and drops what no flow takes.
func (f *Fabric) sendRaw(qp *QP, r *request) {
	defer r.release()
	from := qp.dev
	v := parseFrame(r.src[0])
	took := from.flows.deliver(qp, from, &v, r)
	f.mu.Lock()
	others := make([]*Device, 0, len(f.nodes))
	for _, d := range f.nodes {
		if d != from {
			others = append(others, d)
		}
	}
	f.mu.Unlock()
	for _, d := range others {
		if d.flows.deliver(qp, d, &v, r) {
			took = true
		}
	}
	if !took {
		from.count(&from.ctr.msgDropped)
	}
}

// serveRaw takes a frame: a receive WQE gets it and completes; a frame it
// cannot take — no receive WQE, a buffer too short, a QP not ready — is
// dropped, as a NIC's receive queue drops.
func (qp *QP) serveRaw(s *respState, r *request) {
	sn := qp.snap.Load()
	if sn.gen != s.gen {
		qp.resetResp(s, sn.gen)
	}
	if st := sn.state; st != ifc.StateRTR && st != ifc.StateRTS && st != ifc.StateSQD && st != ifc.StateSQE {
		qp.dev.count(&qp.dev.ctr.msgDropped)
		return
	}
	list, idx, ok := qp.recvWQE(s)
	if !ok {
		qp.dev.count(&qp.dev.ctr.msgDropped)
		return
	}
	dst, dsig, synd := qp.scatter(list, r.length)
	switch {
	case synd == cq.SyndromeLocalLength:
		qp.dev.count(&qp.dev.ctr.msgDropped) // too short: the WQE waits for the next frame
		return
	case synd == 0 && dsig != nil:
		synd = cq.SyndromeLocalProt // no signature offload on Ethernet
	}
	if synd != 0 {
		qp.consumeRecv(s)
		qp.recvCQE(&cq.Fields{Opcode: cq.OpRespErr, WQECounter: idx, Syndrome: synd}, true)
		qp.toError()
		return
	}
	copyAt(dst, 0, r.src[0])
	qp.consumeRecv(s)
	qp.recvCQE(&cq.Fields{Opcode: cq.OpRespSend, WQECounter: idx, ByteCount: uint32(r.length)}, false)
}
