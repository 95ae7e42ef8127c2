package hca

import (
	"encoding/binary"
	"github.com/hcasim/hcasim/hca/ifc"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/internal/dma"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/roce"
	"github.com/hcasim/hcasim/sq"
)

// respState is the responder's state (QP.resp, under QP.respMu).
type respState struct {
	gen      uint64
	psnInit  bool
	expected uint32 // the first PSN of the next message to execute
	msn      uint32 // messages completed (the wire's MSN)
	rqCI     uint16 // receive WQEs consumed
	// srqHeld: srqIdx is an SRQ WQE taken for the message being served
	// and not yet completed (a WRITE with immediate takes it before its
	// data moves); srqList is its scatter list.
	srqHeld bool
	srqIdx  uint16
	srqList []sq.DataFields
	// xsrq is an XRC target's SRQ for the message being served (the one
	// its XRCETH names), looked up again for each message (xrc.go).
	xsrq *SRQ
	// lastWQE: the SRQ_LAST_WQE event of this QP's move to ERR is out.
	lastWQE bool
	reqs    []*request
	answers []response // answers to the requester of ansTo, sent per batch
	segs    [][]byte   // scratch for the local side of a request's data
	sig     sigAccess  // scratch for the local side's signature access
	ansTo   *QP        // the batch's requester (nil: the wire)
	ansOn   bool       // answers holds a batch
	// held is the requester whose reqMu the serving goroutine holds
	// (serveInline): its requests cannot retire while they are served,
	// so serve skips their memMu.
	held    *QP
	asm     assembly // the wire: the message being assembled
	nakSeq  bool     // the wire: a sequence NAK is out for expected+asm.n
	atomics [16]atomicResult
	atomicN int
	reads   [16]readRecord // the wire: READs executed, to serve a resent one again
	readN   int
	wmsg    request   // the wire: the message being served (reused)
	wsrc    [1][]byte // its data
	abuf    [8]byte   // an atomic's original value
	keys    klm.Cache // the keys of accesses served
}

// ack answers the wire with kind for psn (a NAK, or an ACK of one packet).
func (qp *QP) ackWire(s *respState, psn uint32, kind respKind) {
	var r request // on the stack: answer keeps only its fields
	r.psn, r.npkts = psn, 1
	qp.answer(s, &r, kind, 0)
}

// readRecord is an executed READ: a resent request for any of its PSNs is
// served from the original (a signature key's response cannot restart
// inside a block).
type readRecord struct {
	psn    uint32
	npkts  int
	raddr  uint64
	rkey   klm.Key
	length uint64
}

// assembly is a multi-packet message from the wire being put together.
type assembly struct {
	n     int // packets taken
	op    roce.Opcode
	reth  roce.RETH
	data  []byte // the payload so far, unless placed
	size  uint64 // the payload's bytes so far
	first uint32
	// placed: a WRITE to a plain (not signature) key, whose packets go to
	// memory as they arrive, as a NIC places them; fault: a packet's range
	// did not resolve (the message is answered with an access NAK).
	placed, fault bool
}

// atomicResult is an executed atomic's original value, kept to answer its
// duplicates again (IBA C9-156: a responder replays, not re-executes).
type atomicResult struct {
	psn   uint32
	value uint64
	ok    bool
}

// longMessage is the length from which a request in service holds off its
// requester's ACK timeout (QP.inService).
const longMessage = 64 << 10

// responder serves the inbox and the receive doorbell. It shares the
// responder's state with requesters that serve this QP inline
// (serveInline): whoever holds respMu serves.
func (qp *QP) responder() {
	s := &qp.resp
	for {
		select {
		case <-qp.stop:
			qp.respMu.Lock()
			if qp.owesFlush() {
				qp.respStep(s)
			}
			qp.respDone = true
			qp.respMu.Unlock()
			return
		case <-qp.inbox.sig:
			qp.respMu.Lock()
			qp.serveInbox(s)
			qp.respStep(s)
			qp.respMu.Unlock()
		case <-qp.rbell:
			qp.respMu.Lock()
			qp.respStep(s)
			qp.respMu.Unlock()
		}
	}
}

// serveInline serves reqs on the calling goroutine (a requester of this
// device) when the responder is idle, as a NIC's loopback path does: the
// messages queued before them first, then reqs, then their answers. It
// reports false, having taken nothing, when the responder is busy; the
// caller queues reqs in the inbox then. from is the calling requester,
// which holds its reqMu.
func (qp *QP) serveInline(from *QP, reqs []*request) bool {
	if !qp.respMu.TryLock() {
		return false
	}
	defer qp.respMu.Unlock()
	if qp.respDone {
		// Stopped: nothing serves any more, as for a full inbox.
		dropped(from, reqs)
		return true
	}
	s := &qp.resp
	s.held = from
	qp.serveInbox(s)
	qp.serveBatch(s, reqs)
	qp.respStep(s)
	s.held = nil
	return true
}

// serveInbox serves what the inbox holds. The caller holds respMu.
func (qp *QP) serveInbox(s *respState) {
	s.reqs = qp.inbox.take(s.reqs)
	qp.serveBatch(s, s.reqs)
}

// serveBatch serves reqs in order, releasing each, and sends the answers.
// The caller holds respMu.
func (qp *QP) serveBatch(s *respState, reqs []*request) {
	for i, r := range reqs {
		if r.raw {
			qp.serveRaw(s, r)
			r.release()
			continue
		}
		if r.ud {
			qp.serveUD(s, r)
			r.release()
			continue
		}
		if r.pkt != nil {
			qp.servePacket(s, r)
			r.release()
			if i%64 == 63 {
				qp.sendAnswers(s) // a long batch answers as it goes
			}
			continue
		}
		long := r.length >= longMessage
		if long {
			r.from.inService.Add(1)
		}
		qp.serve(s, r)
		if long {
			r.from.inService.Add(-1)
		}
		r.release()
	}
	qp.sendAnswers(s)
}

// answer queues r's answer; answers go back in one batch per requester.
func (qp *QP) answer(s *respState, r *request, kind respKind, rnr uint8) {
	if qp.uc && r.from == nil {
		return // UC has no ACKs or NAKs on the wire
	}
	if !s.ansOn || s.ansTo != r.from {
		qp.sendAnswers(s)
		s.ansTo, s.ansOn = r.from, true
	}
	a := response{psn: r.psn, kind: kind, rnrDly: rnr, msn: s.msn}
	if kind == respACK {
		a.psn = r.lastPSN()
		switch r.op {
		case sq.OpRDMARead:
			a.read = true
			if r.from == nil && len(r.dst) == 1 {
				a.data = r.dst[0][min(r.dataOff, uint64(len(r.dst[0]))):]
			}
		case sq.OpAtomicCS, sq.OpAtomicFA:
			a.read = true
			if r.from == nil && len(r.dst) == 1 && len(r.dst[0]) == 8 {
				a.atomic, a.value = true, binary.BigEndian.Uint64(r.dst[0])
			}
		}
	}
	// Consecutive ACKs coalesce, as on the wire: an ACK acknowledges
	// every message up to its PSN, so the later one stands for both (a
	// duplicate's ACK of an earlier PSN does not replace it).
	if n := len(s.answers); n > 0 && a.kind == respACK && !a.read {
		if l := &s.answers[n-1]; l.kind == respACK && !l.read && roce.PSNDiff(a.psn, l.psn) >= 0 {
			l.psn, l.msn = a.psn, a.msn // a plain ACK has no other fields
			return
		}
	}
	s.answers = append(s.answers, a)
	if a.data != nil {
		// READ data goes out at once, not after the rest of the batch is
		// served: the requester's timer sees the responder at work.
		qp.sendAnswers(s)
	}
}

func (qp *QP) sendAnswers(s *respState) {
	if s.ansOn && len(s.answers) > 0 {
		if s.ansTo != nil {
			qp.dev.fabric.answer(qp, nil, s.ansTo, s.answers)
		} else if w := qp.dev.wire.Load(); w != nil {
			_, a, _ := qp.snapshot()
			w.answer(qp, &a, nil, s.answers)
		}
	}
	clear(s.answers)
	s.answers, s.ansTo, s.ansOn = s.answers[:0], nil, false
}

// resetResp forgets the responder's state after a move to RESET.
func (qp *QP) resetResp(s *respState, gen uint64) {
	qp.flushHeld(s)
	*s = respState{gen: gen, reqs: s.reqs, answers: s.answers[:0], asm: assembly{data: s.asm.data[:0]}, srqList: s.srqList[:0]}
}

// flushHeld completes an SRQ WQE taken and not used with a flush error:
// every WQE the driver posted gets its completion.
func (qp *QP) flushHeld(s *respState) {
	if s.srqHeld {
		s.srqHeld = false
		qp.recvCQE(&cq.Fields{Opcode: cq.OpRespErr, WQECounter: s.srqIdx, Syndrome: cq.SyndromeWRFlush}, true)
	}
}

// respStep resets after RESET and flushes the receive queue in ERR.
func (qp *QP) respStep(s *respState) {
	st, _, gen := qp.snapshot()
	if gen != s.gen {
		qp.resetResp(s, gen)
	}
	if st == ifc.StateERR && qp.tgt {
		qp.flushHeld(s) // a target has no receive queue, and no last WQE
		return
	}
	if st == ifc.StateERR && qp.srq != nil {
		qp.flushHeld(s)
		if !s.lastWQE {
			s.lastWQE = true
			qp.fn.event(ifc.EventLastWQE, qp.qpn)
		}
		return
	}
	if st == ifc.StateERR {
		for qp.rqHead() != s.rqCI {
			if _, _, g := qp.snapshot(); g != gen {
				break // a receive posted after a move to RESET: the next connection's
			}
			qp.rcqe(&cq.Fields{Opcode: cq.OpRespErr, QPN: qp.qpn, WQECounter: s.rqCI, Syndrome: cq.SyndromeWRFlush}, true)
			s.rqCI++
		}
	}
}

// rqHead returns the driver's receive counter from the doorbell record.
func (qp *QP) rqHead() uint16 { return uint16(dma.LoadBE32(qp.rqDB)) }

// recvWQE returns the scatter list and index of the next receive WQE, if
// one is posted: the receive queue's, or one taken from the SRQ (and held
// until consumeRecv). The caller completes it, then calls consumeRecv.
func (qp *QP) recvWQE(s *respState) ([]sq.DataFields, uint16, bool) {
	if srq := qp.rsrq(s); srq != nil {
		if !s.srqHeld {
			var ok bool
			if s.srqList, s.srqIdx, ok = srq.take(s.srqList[:0]); !ok {
				return nil, 0, false
			}
			s.srqHeld = true
		}
		return s.srqList, s.srqIdx, true
	}
	if qp.rqHead() == s.rqCI {
		return nil, 0, false
	}
	stride := 1 << qp.rqStride
	i := int(s.rqCI) & (1<<qp.rqLog - 1)
	w := qp.rqBuf[i*stride : (i+1)*stride]
	var out []sq.DataFields
	for len(w) >= sq.DataSegSize {
		d := sq.DataSeg(w).Fields()
		if klm.Key(d.LKey) == klm.TerminatorLKey {
			break
		}
		out = append(out, d)
		w = w[sq.DataSegSize:]
	}
	return out, s.rqCI, true
}

// consumeRecv retires the receive WQE recvWQE returned.
func (qp *QP) consumeRecv(s *respState) {
	if qp.rsrq(s) != nil {
		s.srqHeld = false
		return
	}
	s.rqCI++
}

// recvCQE writes a receive completion of this QP (naming its SRQ, if it
// has one).
func (qp *QP) recvCQE(f *cq.Fields, solicited bool) {
	f.QPN = qp.qpn
	if srq := qp.rsrq(&qp.resp); srq != nil {
		f.SRQN = srq.srqn
	}
	qp.rcqe(f, solicited)
}

// serve executes one request message in PSN order.
func (qp *QP) serve(s *respState, r *request) {
	sn := qp.snap.Load() // immutable: the fields are read in place
	st, a, gen := sn.state, &sn.attr, sn.gen
	if gen != s.gen {
		qp.sendAnswers(s)
		qp.resetResp(s, gen)
	}
	if qp.uc && r.from != nil {
		// The fabric tells a UC requester when its message was taken or
		// dropped (the moment its packets would have left the wire): only
		// then is its memory free.
		defer qp.answer(s, r, respACK, 0)
	}
	if st != ifc.StateRTR && st != ifc.StateRTS && st != ifc.StateSQD {
		return // a QP that is not ready (or in error) drops requests silently
	}
	if !s.psnInit {
		s.expected, s.psnInit = a.rqPSN, true
	}
	if !qp.fromPeer(r, a) {
		return
	}
	if r.from != nil && r.from != s.held && (r.src != nil || r.dst != nil) {
		r.memMu.Lock()
		defer r.memMu.Unlock()
		if r.retired {
			return // the requester is gone or done with it: never delivered
		}
	}
	if qp.uc {
		qp.serveUC(s, r, a)
		return
	}
	if qp.tgt && !qp.selectXRC(s, r.xrcSRQN) {
		if r.psn == s.expected {
			qp.answer(s, r, respInvalid, 0) // no XRC SRQ of the target's domain
			qp.toError()
		}
		return
	}
	if r.psn != s.expected {
		if roce.PSNDiff(r.psn, s.expected) < 0 {
			// A duplicate of a request already executed (its requester timed
			// out): answer it again; READ data is read again.
			qp.dev.count(&qp.dev.ctr.duplicates)
			switch r.op {
			case sq.OpRDMARead:
				qp.answer(s, r, qp.serveRead(s, r, a), 0)
			case sq.OpAtomicCS, sq.OpAtomicFA:
				if r.from != nil {
					qp.answer(s, r, respACK, 0) // its result is in place
				} else if v, ok := s.atomicResult(r.psn); ok {
					binary.BigEndian.PutUint64(r.dst[0], v)
					qp.answer(s, r, respACK, 0)
				}
			default:
				qp.answer(s, r, respACK, 0)
			}
		}
		return // a request after a gap waits for its retransmission
	}
	var kind respKind
	switch r.op {
	case sq.OpSend, sq.OpSendImm, sq.OpSendInval:
		kind = qp.serveSend(s, r)
	case sq.OpRDMAWrite, sq.OpRDMAWriteImm:
		kind = qp.serveWrite(s, r, a)
	case sq.OpRDMARead:
		kind = qp.serveRead(s, r, a)
	case sq.OpAtomicCS, sq.OpAtomicFA:
		kind = qp.serveAtomic(s, r, a)
	default:
		kind = respInvalid
	}
	switch kind {
	case respACK:
		if r.op == sq.OpRDMARead && r.from == nil {
			s.reads[s.readN%len(s.reads)] = readRecord{psn: r.psn, npkts: r.npkts, raddr: r.raddr, rkey: r.rkey, length: r.length}
			s.readN++
		}
		s.expected = roce.PSNAdd(s.expected, max(r.npkts, 1))
		s.msn = (s.msn + 1) & roce.PSNMask
		qp.answer(s, r, respACK, 0)
	case respRNR:
		qp.answer(s, r, respRNR, a.minRNR)
	default:
		qp.answer(s, r, kind, 0)
		qp.toError()
	}
}

// serveUC executes a UC message. There is no sequence to keep: each
// message starts where the requester's PSN says (a gap was messages lost),
// and what the responder cannot take is dropped silently, as IBA 9.7.7
// says for UC (no receive WQE, a bad R_Key or access, a message longer
// than the receive buffer): nothing is completed, the QP stays ready. A
// receive WQE that does not resolve is the responder's own error: its
// completion says so and the QP moves to ERR, as for RC.
func (qp *QP) serveUC(s *respState, r *request, a *qpAttr) {
	s.expected = roce.PSNAdd(r.psn, max(r.npkts, 1))
	var kind respKind
	switch r.op {
	case sq.OpSend, sq.OpSendImm:
		kind = qp.serveSend(s, r)
	case sq.OpRDMAWrite, sq.OpRDMAWriteImm:
		kind = qp.serveWrite(s, r, a)
	default:
		kind = respInvalid
	}
	switch kind {
	case respACK:
		s.msn = (s.msn + 1) & roce.PSNMask
	case respRemoteOp:
		qp.toError()
	default:
		qp.dev.count(&qp.dev.ctr.msgDropped)
	}
}

// fromPeer reports whether the fabric's request r comes from the QP qp is
// connected to (Options.RCSourceHardware: any). Another QP's request is
// dropped as an unknown packet would be: counted, logged once per QP, the
// QP's state, PSN and completions untouched; its sender times out.
func (qp *QP) fromPeer(r *request, a *qpAttr) bool {
	if r.from == nil || qp.dev.anySrc && sameService(r.from, qp) {
		return true // the wire: deliver checked the source address and the transport
	}
	if qp.dev.route(a) == transport(qp.dev.fabric) && r.from.dev.lid == a.remoteLID && r.from.qpn == a.remoteQPN && sameService(r.from, qp) {
		return true
	}
	qp.dev.count(&qp.dev.ctr.notPeer)
	if !qp.injLogged.Swap(true) {
		qp.dev.log.Debug("request from a QP that is not the peer dropped", "qpn", qp.qpn,
			"from_lid", r.from.dev.lid, "from_qpn", r.from.qpn, "peer_lid", a.remoteLID, "peer_qpn", a.remoteQPN)
	}
	return false
}

// atomicResult returns the kept result of the atomic at psn.
func (s *respState) atomicResult(psn uint32) (uint64, bool) {
	for _, e := range s.atomics {
		if e.ok && e.psn == psn {
			return e.value, true
		}
	}
	return 0, false
}

// scatter resolves a receive WQE's scatter list for n bytes. A signature
// key must be the only entry used.
func (qp *QP) scatter(list []sq.DataFields, n uint64) ([][]byte, *sigAccess, cq.Syndrome) {
	var total uint64
	for _, d := range list {
		total += uint64(d.ByteCount)
	}
	if total < n {
		return nil, nil, cq.SyndromeLocalLength
	}
	var out [][]byte
	var sa *sigAccess
	for i, d := range list {
		if n == 0 {
			break
		}
		take := min(uint64(d.ByteCount), n)
		var s *sigAccess
		var err error
		out, s, err = qp.resolveKey(&qp.resp.keys, out, klm.Key(d.LKey), d.Addr, take, klm.LocalWrite, false, nil)
		if err != nil {
			return nil, nil, cq.SyndromeLocalProt
		}
		if (s != nil || sa != nil) && i > 0 {
			return nil, nil, cq.SyndromeLocalQPOp
		}
		sa = s
		n -= take
	}
	return out, sa, 0
}

func (qp *QP) serveSend(s *respState, r *request) respKind {
	list, idx, ok := qp.recvWQE(s)
	if !ok {
		return respRNR
	}
	dst, dsig, synd := qp.scatter(list, r.length)
	op := cq.OpRespSend
	switch r.op {
	case sq.OpSendImm:
		op = cq.OpRespSendImm
	case sq.OpSendInval:
		op = cq.OpRespSendInv
		if synd == 0 && !qp.invalidate(klm.Key(r.imm)) {
			synd = cq.SyndromeLocalProt
		}
	}
	if synd == cq.SyndromeLocalLength && qp.uc {
		return respInvalid // UC drops it; the receive WQE waits for the next message
	}
	if synd != 0 {
		qp.consumeRecv(s)
		qp.recvCQE(&cq.Fields{Opcode: cq.OpRespErr, WQECounter: idx, Syndrome: synd}, true)
		if synd == cq.SyndromeLocalLength {
			return respInvalid
		}
		return respRemoteOp
	}
	if err := qp.moveData(r, dst, dsig, r.src, r.srcSig); err != nil {
		qp.consumeRecv(s)
		qp.recvCQE(&cq.Fields{Opcode: cq.OpRespErr, WQECounter: idx, Syndrome: cq.SyndromeLocalProt}, true)
		return respRemoteOp
	}
	qp.consumeRecv(s)
	f := cq.Fields{Opcode: op, WQECounter: idx, ByteCount: uint32(r.length)}
	if op != cq.OpRespSend {
		f.Immediate = r.imm
	}
	qp.recvCQE(&f, r.solicited)
	return respACK
}

// invalidate carries out a SEND_WITH_INV: the key must be this function's,
// in the QP's PD, enabled for remote invalidation, and bound to this QP if
// bound to one (a type 2 memory window).
func (qp *QP) invalidate(key klm.Key) bool {
	err := qp.fn.mkeys.Update(key.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
		if cur.Free || cur.Variant != key.Variant() || cur.PD != qp.accessPD() || !cur.RemoteInvalidate ||
			cur.QPN != klm.NoQPN && cur.QPN != qp.qpn {
			return nil, klm.ErrBadAccess
		}
		m := cur.Clone()
		m.Free = true
		return m, nil
	})
	return err == nil
}

func (qp *QP) serveWrite(s *respState, r *request, a *qpAttr) respKind {
	if a.access&ifc.QPAccessWrite == 0 {
		return respAccess
	}
	var idx uint16
	if r.op == sq.OpRDMAWriteImm {
		var ok bool
		if _, idx, ok = qp.recvWQE(s); !ok {
			return respRNR
		}
	}
	if r.placed { // from the wire, in memory already (place)
		if r.placeFault {
			return respAccess
		}
	} else if r.length > 0 { // a zero-length WRITE does not validate its R_Key (IBA C9-88)
		dst, dsig, err := qp.resolveKey(&s.keys, s.segs[:0], r.rkey, r.raddr, r.length, klm.RemoteWrite, false, &s.sig)
		if err != nil {
			s.segs = scrub(s.segs)
			return respAccess
		}
		err = qp.moveData(r, dst, dsig, r.src, r.srcSig)
		s.segs = scrub(dst)
		if err != nil {
			return respRemoteOp
		}
	}
	if r.op == sq.OpRDMAWriteImm {
		qp.consumeRecv(s)
		qp.recvCQE(&cq.Fields{Opcode: cq.OpRespWriteImm, WQECounter: idx, ByteCount: uint32(r.length), Immediate: r.imm}, r.solicited)
	}
	return respACK
}

func (qp *QP) serveRead(s *respState, r *request, a *qpAttr) respKind {
	if a.access&ifc.QPAccessRead == 0 {
		return respAccess
	}
	if r.length == 0 { // nor does a zero-length READ
		return respACK
	}
	src, ssig, err := qp.resolveKey(&s.keys, s.segs[:0], r.rkey, r.raddr, r.length, klm.RemoteRead, true, &s.sig)
	if err != nil {
		s.segs = scrub(s.segs)
		return respAccess
	}
	err = qp.moveData(r, r.dst, r.dstSig, src, ssig)
	s.segs = scrub(src)
	if err != nil {
		return respRemoteOp
	}
	return respACK
}

// serveAtomic runs a compare-and-swap or fetch-and-add on a big-endian
// 64-bit word and returns the original value into the requester's buffer
// (on the wire: into the request's, for the answer).
func (qp *QP) serveAtomic(s *respState, r *request, a *qpAttr) respKind {
	if a.access&ifc.QPAccessAtomic == 0 {
		return respAccess
	}
	if r.raddr%8 != 0 {
		return respInvalid
	}
	segs, _, err := qp.resolveKey(nil, nil, r.rkey, r.raddr, 8, klm.Atomic, false, nil)
	if err != nil {
		return respAccess
	}
	var word [8]byte
	qp.dev.atomicMu.Lock()
	gatherTo(word[:], segs)
	old := binary.BigEndian.Uint64(word[:])
	nv := old
	if r.op == sq.OpAtomicFA {
		nv = old + r.swapAdd
	} else if old == r.compare {
		nv = r.swapAdd
	}
	binary.BigEndian.PutUint64(word[:], nv)
	scatterFrom(segs, word[:])
	qp.dev.atomicMu.Unlock()
	binary.BigEndian.PutUint64(word[:], old)
	scatterFrom(r.dst, word[:])
	if r.from == nil {
		s.atomics[s.atomicN%len(s.atomics)] = atomicResult{psn: r.psn, value: old, ok: true}
		s.atomicN++
	}
	return respACK
}

// rcqe writes a receive completion.
func (qp *QP) rcqe(f *cq.Fields, solicited bool) {
	c := qp.rcq
	if qp.tgt {
		if c = nil; qp.resp.xsrq != nil {
			c = qp.resp.xsrq.cq // an XRC SRQ's completions go to its CQ
		}
		if c == nil {
			return
		}
	}
	if !c.push(f, solicited) {
		qp.fatal()
	}
}

// copySegs copies the bytes of src segments into dst segments, as one
// stream, and returns the bytes copied.
func copySegs(dst, src [][]byte) int {
	n := 0
	var d []byte
	for _, s := range src {
		for len(s) > 0 {
			for len(d) == 0 {
				if len(dst) == 0 {
					return n
				}
				d, dst = dst[0], dst[1:]
			}
			k := copy(d, s)
			d, s = d[k:], s[k:]
			n += k
		}
	}
	return n
}

// segSlice returns bytes [off, off+n) of the stream segs when they lie in
// one segment.
func segSlice(segs [][]byte, off uint64, n int) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	for _, s := range segs {
		if off < uint64(len(s)) {
			if off+uint64(n) <= uint64(len(s)) {
				return s[off : off+uint64(n)], true
			}
			return nil, false
		}
		off -= uint64(len(s))
	}
	return nil, false
}

// copyFrom fills b from the stream segs at off (what is past its end
// stays as it was).
func copyFrom(b []byte, segs [][]byte, off uint64) {
	for _, s := range segs {
		if len(b) == 0 {
			return
		}
		if off >= uint64(len(s)) {
			off -= uint64(len(s))
			continue
		}
		b = b[copy(b, s[off:]):]
		off = 0
	}
}

// copyAt writes b into the stream segs at off (what is past its end is
// dropped).
func copyAt(segs [][]byte, off uint64, b []byte) {
	for _, s := range segs {
		if len(b) == 0 {
			return
		}
		if off >= uint64(len(s)) {
			off -= uint64(len(s))
			continue
		}
		b = b[copy(s[off:], b):]
		off = 0
	}
}

func gatherTo(b []byte, segs [][]byte) {
	for _, s := range segs {
		b = b[copy(b, s):]
	}
}

func scatterFrom(segs [][]byte, b []byte) {
	for _, s := range segs {
		b = b[copy(s, b):]
	}
}

// scrub clears a scratch slice of segments for reuse, up to its capacity
// (a resolution that faulted part-way leaves entries past its length): it
// must not keep memory reachable (a function's unmapped memory) after the
// request.
func scrub(segs [][]byte) [][]byte {
	clear(segs[:cap(segs)])
	return segs[:0]
}

// servePacket takes a request packet from the wire in PSN order: the
// packets of a SEND or WRITE are assembled into the message, which is
// served when its last packet arrives; a READ or atomic request is served
// at once. A packet after a gap is dropped and NAKed once (go-back-N); a
// duplicate is answered again where the requester needs an answer.
func (qp *QP) servePacket(s *respState, in *request) {
	st, a, gen := qp.snapshot()
	if gen != s.gen {
		qp.sendAnswers(s)
		qp.resetResp(s, gen)
	}
	if st != ifc.StateRTR && st != ifc.StateRTS && st != ifc.StateSQD {
		return
	}
	if !s.psnInit {
		s.expected, s.psnInit = a.rqPSN, true
	}
	p := &in.pkt.pkt
	epsn := roce.PSNAdd(s.expected, s.asm.n)
	if qp.uc {
		if !qp.ucSequence(s, p, epsn) {
			return
		}
		epsn = roce.PSNAdd(s.expected, s.asm.n)
	}
	switch d := roce.PSNDiff(p.PSN, epsn); {
	case d > 0:
		qp.dev.count(&qp.dev.ctr.outOfSeq)
		if !s.nakSeq {
			s.nakSeq = true
			qp.ackWire(s, epsn, respSeq)
		}
		return
	case d < 0:
		qp.duplicatePacket(s, &a, p)
		return
	}
	s.nakSeq = false
	mtu := a.mtu()
	pos := p.Opcode.Position()
	invalid := func() {
		s.asm.n = 0
		if qp.uc {
			qp.dev.count(&qp.dev.ctr.msgDropped) // UC drops a malformed message silently
			return
		}
		qp.ackWire(s, p.PSN, respInvalid)
		qp.toError()
	}
	switch p.Opcode {
	case roce.OpReadRequest, roce.OpCompareSwap, roce.OpFetchAdd:
		if s.asm.n != 0 {
			invalid() // a new message inside a multi-packet one
			return
		}
		m := &s.wmsg
		if !s.wireRequest(m, p, mtu) {
			invalid()
			return
		}
		m.xrcSRQN = p.XRCETH.XRCSRQ
		qp.serve(s, m)
		*m = request{}
		return
	}
	if qp.tgt && !qp.selectXRC(s, p.XRCETH.XRCSRQ) {
		invalid() // before anything is placed in the SRQ's PD
		return
	}
	if (s.asm.n == 0) != (pos == roce.PosFirst || pos == roce.PosOnly) ||
		(s.asm.n > 0 && sameMessage(s.asm.op) != sameMessage(p.Opcode)) ||
		((pos == roce.PosFirst || pos == roce.PosMiddle) && len(p.Payload) != mtu) {
		invalid()
		return
	}
	if s.asm.n == 0 {
		s.asm = assembly{op: p.Opcode, reth: p.RETH, first: p.PSN, data: s.asm.data[:0]}
		if isWrite(p.Opcode) && p.RETH.DMALen > 0 && a.access&ifc.QPAccessWrite != 0 && qp.plainKey(klm.Key(p.RETH.RKey)) {
			s.asm.placed = true
			// The whole range is checked first, as the in-process path
			// does: a WRITE past its key's end places nothing.
			s.asm.fault = !qp.resolves(s, klm.Key(p.RETH.RKey), p.RETH.VA, uint64(p.RETH.DMALen))
		}
	}
	limit := uint64(maxWireMessage)
	if isWrite(s.asm.op) {
		limit = min(limit, uint64(s.asm.reth.DMALen))
	}
	if s.asm.size+uint64(len(p.Payload)) > limit {
		invalid()
		return
	}
	if s.asm.placed {
		qp.place(s, p.Payload)
	} else {
		s.asm.data = append(s.asm.data, p.Payload...)
	}
	s.asm.size += uint64(len(p.Payload))
	s.asm.n++
	if pos != roce.PosLast && pos != roce.PosOnly {
		if p.AckReq {
			qp.ackWire(s, p.PSN, respACK) // how far the message got
		}
		return
	}
	m := &s.wmsg
	s.wsrc[0] = s.asm.data
	*m = request{psn: s.asm.first, npkts: s.asm.n, length: s.asm.size, src: s.wsrc[:], solicited: p.SE, imm: p.Imm,
		placed: s.asm.placed, placeFault: s.asm.fault, xrcSRQN: p.XRCETH.XRCSRQ}
	s.asm.n = 0
	switch p.Opcode {
	case roce.OpSendLast, roce.OpSendOnly:
		m.op = sq.OpSend
	case roce.OpSendLastImm, roce.OpSendOnlyImm:
		m.op = sq.OpSendImm
	case roce.OpSendLastInv, roce.OpSendOnlyInv:
		m.op, m.imm = sq.OpSendInval, p.InvRKey
	case roce.OpWriteLast, roce.OpWriteOnly, roce.OpWriteLastImm, roce.OpWriteOnlyImm:
		m.op = sq.OpRDMAWrite
		if p.Opcode == roce.OpWriteLastImm || p.Opcode == roce.OpWriteOnlyImm {
			m.op = sq.OpRDMAWriteImm
		}
		m.raddr, m.rkey = s.asm.reth.VA, klm.Key(s.asm.reth.RKey)
		if uint64(s.asm.reth.DMALen) != m.length {
			invalid() // the RETH's length is the message's
			return
		}
	}
	qp.serve(s, m)
	s.asm.data = s.wsrc[0][:0] // the assembly buffer, for the next message
	*m = request{}
}

// ucSequence keeps a UC responder in step with the wire (IBA 9.7.7.1): a
// packet out of sequence, or one that does not continue the message being
// assembled, drops that message; a packet that starts a message starts
// one there, whatever its PSN. It reports whether p is to be taken.
func (qp *QP) ucSequence(s *respState, p *roce.Packet, epsn uint32) bool {
	pos := p.Opcode.Position()
	starts := pos == roce.PosFirst || pos == roce.PosOnly
	if p.PSN == epsn && (s.asm.n == 0) == starts {
		return true
	}
	if s.asm.n > 0 {
		s.asm.n = 0 // the message in progress lost a packet
		qp.dev.count(&qp.dev.ctr.msgDropped)
	}
	if !starts {
		qp.dev.count(&qp.dev.ctr.outOfSeq) // the rest of a lost message
		return false
	}
	s.expected = p.PSN
	return true
}

// plainKey reports whether key names a memory key without a signature
// (a BSF): a WRITE to it can be placed packet by packet.
func (qp *QP) plainKey(key klm.Key) bool {
	m := qp.fn.mkeys.Lookup(key.Index())
	return m != nil && !m.BSFEnabled
}

// resolves reports whether a remote write of n bytes at addr through key
// translates.
func (qp *QP) resolves(s *respState, key klm.Key, addr, n uint64) bool {
	segs, err := qp.fn.mkeys.Resolve(s.segs[:0], klm.Request{Key: key, PD: qp.accessPD(), Addr: addr, Len: n, Access: klm.RemoteWrite, QPN: qp.qpn})
	s.segs = scrub(segs)
	return err == nil
}

// place writes a WRITE packet's payload where the message's RETH and the
// packets before it put it. Each packet's range is translated on its own,
// as a NIC translates each packet's placement through the key: a key
// invalidated part-way faults the rest of the message.
func (qp *QP) place(s *respState, payload []byte) {
	if s.asm.fault || len(payload) == 0 {
		return
	}
	k := klm.Key(s.asm.reth.RKey)
	segs, err := qp.fn.mkeys.Resolve(s.segs[:0], klm.Request{Key: k, PD: qp.accessPD(), Addr: s.asm.reth.VA + s.asm.size,
		Len: uint64(len(payload)), Access: klm.RemoteWrite, QPN: qp.qpn})
	if err == nil {
		s.wsrc[0] = payload
		copySegs(segs, s.wsrc[:])
		s.wsrc[0] = nil
	}
	s.asm.fault = err != nil
	s.segs = scrub(segs)
}

// wireRequest fills m with the READ or atomic request a packet carries,
// with a buffer for the data its answer returns (an atomic's is the
// state's: answer copies the value out).
func (s *respState) wireRequest(m *request, p *roce.Packet, mtu int) bool {
	*m = request{psn: p.PSN}
	switch p.Opcode {
	case roce.OpReadRequest:
		if p.RETH.DMALen > maxWireMessage {
			return false
		}
		m.op, m.raddr, m.rkey, m.length = sq.OpRDMARead, p.RETH.VA, klm.Key(p.RETH.RKey), uint64(p.RETH.DMALen)
		m.npkts = packets(m.op, m.length, mtu)
		m.segArr[0] = make([]byte, m.length)
	default:
		m.op = sq.OpAtomicFA
		if p.Opcode == roce.OpCompareSwap {
			m.op = sq.OpAtomicCS
		}
		m.raddr, m.rkey, m.swapAdd, m.compare, m.length = p.Atomic.VA, klm.Key(p.Atomic.RKey), p.Atomic.SwapAdd, p.Atomic.Compare, 8
		m.npkts = 1
		m.segArr[0] = s.abuf[:]
	}
	m.dst = m.segArr[:1]
	return true
}

// duplicatePacket answers a packet before the expected PSN: a READ is
// read again, an atomic's result replayed, and the last packet of a SEND
// or WRITE (or one asking for an ACK) ACKed with the last PSN executed.
func (qp *QP) duplicatePacket(s *respState, a *qpAttr, p *roce.Packet) {
	switch p.Opcode {
	case roce.OpReadRequest:
		for _, e := range s.reads {
			if d := roce.PSNDiff(p.PSN, e.psn); e.npkts > 0 && d >= 0 && int(d) < e.npkts {
				m := &s.wmsg
				*m = request{op: sq.OpRDMARead, psn: e.psn, npkts: e.npkts, raddr: e.raddr, rkey: e.rkey, length: e.length,
					dataOff: uint64(d) * uint64(a.mtu())}
				m.segArr[0] = make([]byte, e.length)
				m.dst = m.segArr[:1]
				qp.serve(s, m) // serve takes its duplicate path
				*m = request{}
				return
			}
		}
		fallthrough
	case roce.OpCompareSwap, roce.OpFetchAdd:
		m := &s.wmsg
		if s.wireRequest(m, p, a.mtu()) {
			qp.serve(s, m)
		}
		*m = request{}
		return
	}
	qp.dev.count(&qp.dev.ctr.duplicates)
	if pos := p.Opcode.Position(); pos == roce.PosLast || pos == roce.PosOnly || p.AckReq {
		last := roce.PSNAdd(s.expected, -1)
		qp.ackWire(s, last, respACK)
	}
}

// sameMessage maps an opcode to its message family (SEND or WRITE), for
// the check that a message's packets belong together.
func sameMessage(op roce.Opcode) bool { return !isWrite(op) }

func isWrite(op roce.Opcode) bool { return op >= roce.OpWriteFirst && op <= roce.OpWriteOnlyImm }
