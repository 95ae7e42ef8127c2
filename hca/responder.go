package hca

import (
	"encoding/binary"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/internal/dma"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/sq"
)

// respState is the responder goroutine's own state.
type respState struct {
	gen      uint64
	psnInit  bool
	expected uint32 // the next PSN to execute
	rqCI     uint16 // receive WQEs consumed
	reqs     []*request
	answers  []response // answers to the requester of ansTo, sent per batch
	segs     [][]byte   // scratch for the local side of a request's data
	ansTo    *QP
}

// longMessage is the length from which a request in service holds off its
// requester's ACK timeout (QP.inService).
const longMessage = 64 << 10

func (qp *QP) responder() {
	defer qp.wg.Done()
	s := &respState{}
	for {
		select {
		case <-qp.stop:
			return
		case <-qp.inbox.sig:
			s.reqs = qp.inbox.take(s.reqs)
			for _, r := range s.reqs {
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
			s.sendAnswers()
		case <-qp.rbell:
		}
		qp.respStep(s)
	}
}

// answer queues r's answer; answers go back in one batch per requester.
func (s *respState) answer(r *request, kind respKind, bytes uint32, rnr uint8) {
	if s.ansTo != r.from {
		s.sendAnswers()
		s.ansTo = r.from
	}
	s.answers = append(s.answers, response{psn: r.psn, kind: kind, bytes: bytes, rnrDly: rnr})
}

func (s *respState) sendAnswers() {
	if s.ansTo != nil && len(s.answers) > 0 {
		s.ansTo.acks.put(s.answers...)
	}
	s.answers, s.ansTo = s.answers[:0], nil
}

// respStep resets after RESET and flushes the receive queue in ERR.
func (qp *QP) respStep(s *respState) {
	st, _, gen := qp.snapshot()
	if gen != s.gen {
		*s = respState{gen: gen, reqs: s.reqs, answers: s.answers[:0]}
	}
	if st == StateERR {
		for qp.rqHead() != s.rqCI {
			qp.rcqe(&cq.Fields{Opcode: cq.OpRespErr, QPN: qp.qpn, WQECounter: s.rqCI, Syndrome: cq.SyndromeWRFlush}, true)
			s.rqCI++
		}
	}
}

// rqHead returns the driver's receive counter from the doorbell record.
func (qp *QP) rqHead() uint16 { return uint16(dma.LoadBE32(qp.rqDB)) }

// recvWQE returns the scatter list of the next receive WQE, if one is posted.
func (qp *QP) recvWQE(s *respState) ([]sq.DataFields, bool) {
	if qp.rqHead() == s.rqCI {
		return nil, false
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
	return out, true
}

// serve executes one request in PSN order.
func (qp *QP) serve(s *respState, r *request) {
	st, a, gen := qp.snapshot()
	if gen != s.gen {
		s.sendAnswers()
		*s = respState{gen: gen, reqs: s.reqs, answers: s.answers[:0]}
	}
	if st != StateRTR && st != StateRTS && st != StateSQD {
		return // a QP that is not ready (or in error) drops requests silently
	}
	if !s.psnInit {
		s.expected, s.psnInit = a.rqPSN, true
	}
	if r.src != nil || r.dst != nil {
		r.memMu.Lock()
		defer r.memMu.Unlock()
		if r.retired {
			return // the requester is gone or done with it: never delivered
		}
	}
	if r.psn != s.expected {
		if (s.expected-r.psn)&0xFFFFFF < 1<<23 {
			// A duplicate of a request already executed (its requester timed
			// out): answer it again; READ data is read again.
			if r.op == sq.OpRDMARead {
				kind, n := qp.serveReadKind(s, r, &a)
				s.answer(r, kind, n, 0)
				return
			}
			s.answer(r, respACK, uint32(r.length), 0)
		}
		return // a request after a gap waits for its retransmission
	}
	var kind respKind
	var bytes uint32
	switch r.op {
	case sq.OpSend, sq.OpSendImm, sq.OpSendInval:
		kind = qp.serveSend(s, r)
	case sq.OpRDMAWrite, sq.OpRDMAWriteImm:
		kind = qp.serveWrite(s, r, &a)
	case sq.OpRDMARead:
		kind, bytes = qp.serveReadKind(s, r, &a)
	case sq.OpAtomicCS, sq.OpAtomicFA:
		kind = qp.serveAtomic(r, &a)
		bytes = 8
	default:
		kind = respInvalid
	}
	switch kind {
	case respACK:
		s.expected = (s.expected + 1) & 0xFFFFFF
		if r.op != sq.OpRDMARead && r.op != sq.OpAtomicCS && r.op != sq.OpAtomicFA {
			bytes = uint32(r.length)
		}
		s.answer(r, respACK, bytes, 0)
	case respRNR:
		s.answer(r, respRNR, 0, a.minRNR)
	default:
		s.answer(r, kind, 0, 0)
		qp.toError()
	}
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
		out, s, err = qp.resolveKey(out, klm.Key(d.LKey), d.Addr, take, klm.LocalWrite, false)
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
	list, ok := qp.recvWQE(s)
	if !ok {
		return respRNR
	}
	idx := s.rqCI
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
	if synd != 0 {
		s.rqCI++
		qp.rcqe(&cq.Fields{Opcode: cq.OpRespErr, QPN: qp.qpn, WQECounter: idx, Syndrome: synd}, true)
		if synd == cq.SyndromeLocalLength {
			return respInvalid
		}
		return respRemoteOp
	}
	qp.moveData(r.from, dst, dsig, r.src, r.srcSig)
	s.rqCI++
	f := cq.Fields{Opcode: op, QPN: qp.qpn, WQECounter: idx, ByteCount: uint32(r.length)}
	if op != cq.OpRespSend {
		f.Immediate = r.imm
	}
	qp.rcqe(&f, r.solicited)
	return respACK
}

// invalidate carries out a SEND_WITH_INV: the key must be this function's,
// in the QP's PD, enabled for remote invalidation.
func (qp *QP) invalidate(key klm.Key) bool {
	err := qp.fn.mkeys.Update(key.Index(), func(cur *klm.Mkey) (*klm.Mkey, error) {
		if cur.Free || cur.Variant != key.Variant() || cur.PD != qp.pd || !cur.RemoteInvalidate {
			return nil, klm.ErrBadAccess
		}
		m := cur.Clone()
		m.Free = true
		return m, nil
	})
	return err == nil
}

func (qp *QP) serveWrite(s *respState, r *request, a *qpAttr) respKind {
	if a.access&QPAccessWrite == 0 {
		return respAccess
	}
	var list []sq.DataFields
	if r.op == sq.OpRDMAWriteImm {
		var ok bool
		if list, ok = qp.recvWQE(s); !ok {
			return respRNR
		}
	}
	if r.length > 0 { // a zero-length WRITE does not validate its R_Key (IBA C9-88)
		dst, dsig, err := qp.resolveKey(s.segs[:0], r.rkey, r.raddr, r.length, klm.RemoteWrite, false)
		if err != nil {
			s.segs = scrub(s.segs)
			return respAccess
		}
		qp.moveData(r.from, dst, dsig, r.src, r.srcSig)
		s.segs = scrub(dst)
	}
	if r.op == sq.OpRDMAWriteImm {
		_ = list
		idx := s.rqCI
		s.rqCI++
		qp.rcqe(&cq.Fields{Opcode: cq.OpRespWriteImm, QPN: qp.qpn, WQECounter: idx, ByteCount: uint32(r.length), Immediate: r.imm}, r.solicited)
	}
	return respACK
}

func (qp *QP) serveReadKind(s *respState, r *request, a *qpAttr) (respKind, uint32) {
	if a.access&QPAccessRead == 0 {
		return respAccess, 0
	}
	if r.length == 0 { // nor does a zero-length READ
		return respACK, 0
	}
	src, ssig, err := qp.resolveKey(s.segs[:0], r.rkey, r.raddr, r.length, klm.RemoteRead, true)
	if err != nil {
		s.segs = scrub(s.segs)
		return respAccess, 0
	}
	qp.moveData(r.from, r.dst, r.dstSig, src, ssig)
	s.segs = scrub(src)
	return respACK, uint32(r.length)
}

// serveAtomic runs a compare-and-swap or fetch-and-add on a big-endian
// 64-bit word and returns the original value into the requester's buffer.
func (qp *QP) serveAtomic(r *request, a *qpAttr) respKind {
	if a.access&QPAccessAtomic == 0 {
		return respAccess
	}
	if r.raddr%8 != 0 {
		return respInvalid
	}
	segs, _, err := qp.resolveKey(nil, r.rkey, r.raddr, 8, klm.Atomic, false)
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
	return respACK
}

// rcqe writes a receive completion.
func (qp *QP) rcqe(f *cq.Fields, solicited bool) {
	if !qp.rcq.push(f, solicited) {
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
