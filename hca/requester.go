package hca

import (
	"encoding/binary"
	"errors"
	"github.com/hcasim/hcasim/hca/ifc"
	"github.com/hcasim/hcasim/psv"
	"runtime"
	"slices"
	"time"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/internal/dma"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/roce"
	"github.com/hcasim/hcasim/sq"
	"github.com/hcasim/hcasim/umr"
)

// pending is a send WQE between fetch and completion.
type pending struct {
	idx        uint16
	op         sq.Opcode
	signaled   bool
	done       bool
	synd       cq.Syndrome // 0: success
	bytes      uint32
	req        *request // nil for local work (NOP, UMR, SET_PSV) and local errors
	readAtomic bool
	acked      bool
	retries    int
	rnrRetries int
}

// reqState is the send engine's state (QP.req, under QP.reqMu).
type reqState struct {
	gen      uint64
	inflight []*pending
	psnInit  bool
	nextPSN  uint32
	reads    int // RDMA READ and atomics awaiting their response
	erred    bool
	out      []*request // requests to hand to the peer at the end of a step
	acks     []response
	// The timer is armed while requests await answers. It fires after the
	// ACK timeout (or an RNR delay); a firing without answers since it was
	// armed is a timeout. Answers do not touch the timer: the hot path has
	// no clock or timer work.
	timer   *time.Timer
	armed   bool
	rnrWait bool
	answers uint64 // answers received, and the count when the timer was armed
	armedAt uint64
	scratch [sq.MaxWQEBBs * sq.WQEBBSize]byte
	cqes    []cq.Fields // successful send CQEs of a complete, written together
	seenPI  uint16      // the send counter when the last step began
	keys    klm.Cache   // the local keys of gathers
	free    []*pending  // retired pending records, for reuse
	// freeReqs are recycled requests, for reuse (newRequest, retire).
	freeReqs []*request
}

// requester runs the send engine when nothing else does: after a doorbell
// the driver's goroutine could not serve inline (doorbell), on answers,
// and on the timer. It shares the engine's state with doorbell: whoever
// holds reqMu runs the engine.
func (qp *QP) requester() {
	s := &qp.req
	defer func() {
		qp.reqMu.Lock()
		if qp.owesFlush() {
			qp.step(s)
		}
		qp.reqDone = true
		for _, p := range s.inflight {
			p.req.retire(s)
		}
		s.timer.Stop()
		qp.reqMu.Unlock()
	}()
	// The engine polls after work (with the hint set), never before its
	// first doorbell.
	awake := false
	for {
		qp.reqMu.Lock()
		if awake && qp.sqHint != nil && qp.dev.poll > 0 && qp.poll(s) {
			qp.reqMu.Unlock()
			continue
		}
		if qp.sqHint != nil {
			// About to sleep: clear the activity hint, then look at the
			// send counter once more; a driver that posted after our last
			// look either sees the hint clear and rings, or is seen here.
			dma.StoreBE32(qp.sqHint, 0)
			if qp.sqr.Producer() != s.seenPI {
				dma.StoreBE32(qp.sqHint, 1)
				qp.stepOut(s)
				qp.reqMu.Unlock()
				continue
			}
		}
		qp.reqMu.Unlock()
		acks, fired := false, false
		select {
		case <-qp.stop:
			return
		case <-qp.bell:
		case <-qp.acks.sig:
			acks = true
		case <-s.timer.C:
			fired = true
		}
		qp.reqMu.Lock()
		// Answers that came in with the timer count first: an ACK waiting
		// in the queue is not a timeout.
		if acks || fired && qp.acks.pending() {
			qp.takeAcks(s)
		}
		if fired {
			s.armed = false
			qp.onTimer(s)
		}
		if qp.sqHint != nil {
			dma.StoreBE32(qp.sqHint, 1)
		}
		awake = true
		qp.stepOut(s)
		qp.reqMu.Unlock()
	}
}

// doorbell is the send doorbell. When the engine is idle it runs on the
// ringing goroutine, as far as the work goes without waiting: it fetches
// and executes what was posted, and when the peer's responder served the
// requests inline too (Fabric.send), takes their answers and completes.
// A busy engine is woken instead, and so is a polling one.
func (qp *QP) doorbell() {
	// A polling engine (Options.Poll) runs on its goroutine, which then
	// watches the send counter so that the next posts need no doorbell.
	if qp.sqHint != nil && qp.dev.poll > 0 || !qp.reqMu.TryLock() {
		qp.ring()
		return
	}
	defer qp.reqMu.Unlock()
	if qp.reqDone {
		return
	}
	// Answers of a peer served inline come back while this runs: they are
	// taken here, without waking the engine's goroutine.
	qp.acks.hush()
	defer qp.acks.unhush()
	s := &qp.req
	qp.stepOut(s)
	for range 4 {
		if !qp.acks.pending() {
			return
		}
		qp.takeAcks(s)
		qp.stepOut(s)
	}
	// Still answers coming: the engine goroutine takes the rest.
	qp.ring()
}

// poll watches the send counter and the engine's other inputs for
// Options.Poll with the activity hint still set, so the driver does not
// ring: it reports whether it found and ran work. Between looks it yields
// the processor to the device's other goroutines (the responder this
// engine waits for may need it).
func (qp *QP) poll(s *reqState) bool {
	deadline := time.Now().Add(qp.dev.poll)
	for i := 1; ; i++ {
		// A select locks every channel it names: look at the channels'
		// lengths first (the timer's and stop's now and then), and at the
		// send counter, which costs a load.
		if len(qp.acks.sig) > 0 || len(qp.bell) > 0 || i%32 == 0 {
			woke := true
			select {
			case <-qp.stop:
				return false
			case <-qp.bell:
			case <-qp.acks.sig:
				qp.takeAcks(s)
			case <-s.timer.C:
				if qp.acks.pending() {
					qp.takeAcks(s)
				}
				s.armed = false
				qp.onTimer(s)
			default:
				woke = false
			}
			if woke {
				qp.stepOut(s)
				return true
			}
		}
		if qp.sqr.Producer() != s.seenPI {
			qp.stepOut(s)
			return true
		}
		if i%64 == 0 && time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
	}
}

// settle runs the send engine once on the caller's goroutine, after any
// step in progress: the WQEs posted before are fetched and executed.
func (qp *QP) settle() {
	qp.reqMu.Lock()
	defer qp.reqMu.Unlock()
	if !qp.reqDone {
		qp.stepOut(&qp.req)
	}
}

// stepOut runs a step and hands its requests to the peer.
func (qp *QP) stepOut(s *reqState) {
	s.seenPI = qp.sqr.Producer()
	qp.step(s)
	qp.flushOut(s)
}

func (qp *QP) takeAcks(s *reqState) {
	s.acks = qp.acks.take(s.acks)
	for _, r := range s.acks {
		qp.onResponse(s, r)
	}
}

// flushOut hands the step's requests to the transport in one batch, and
// keeps the timer armed while requests await answers.
func (qp *QP) flushOut(s *reqState) {
	// A retransmission queued in this step for a request the step then
	// completed is not sent: its memory is the application's again.
	out := s.out[:0]
	for _, r := range s.out {
		if r.retired {
			r.release()
		} else {
			out = append(out, r)
		}
	}
	clear(s.out[len(out):])
	s.out = out
	if len(s.out) > 0 {
		a := &qp.snap.Load().attr // immutable: not copied (a copy would escape)
		qp.dev.route(a).send(qp, a, s.out)
		clear(s.out)
		s.out = s.out[:0]
		if !s.armed {
			qp.armTimer(s, qp.answerTimeout(a), false)
		}
	}
}

// answerTimeout is how long the requester waits for answers: the local
// ACK timeout (RC), ucTimeout (UC).
func (qp *QP) answerTimeout(a *qpAttr) time.Duration {
	if qp.uc {
		return qp.dev.duration(ucTimeout)
	}
	return qp.dev.duration(ackTimeout(a.timeout))
}

// snapshot returns the QP's published state, attributes and reset
// generation (publish): one atomic load, no lock.
func (qp *QP) snapshot() (ifc.QPState, qpAttr, uint64) {
	p := qp.snap.Load()
	return p.state, p.attr, p.gen
}

// step fetches and executes what the state allows and completes what is done.
func (qp *QP) step(s *reqState) {
	st, attr, gen := qp.snapshot()
	if gen != s.gen {
		// Back to RESET: outstanding work is discarded without completions.
		for _, p := range s.inflight {
			p.req.retire(s)
		}
		qp.armTimer(s, 0, false)
		*s = reqState{gen: gen, timer: s.timer}
		qp.sqr.Reset()
		qp.sqFetched.Store(0)
	}
	switch st {
	case ifc.StateRTS:
		if !s.psnInit {
			s.nextPSN, s.psnInit = attr.sqPSN, true
		}
		// Completing can lift a fence or free the window: fetch again then.
		for qp.fetch(s, &attr) && qp.complete(s) > 0 {
		}
		qp.sqFetched.Store(uint32(qp.sqr.Consumer()))
	case ifc.StateERR:
		qp.flush(s)
		return
	}
	qp.complete(s)
	if st == ifc.StateSQD {
		qp.mu.Lock()
		report := !qp.drained && len(s.inflight) == 0
		qp.drained = qp.drained || report
		qp.mu.Unlock()
		if report {
			qp.fn.event(ifc.EventSQDrained, qp.qpn)
		}
	}
}

// fetch executes posted WQEs in order while the window, the fences and the
// outstanding-read limit allow. It reports whether it stopped at a posted
// WQE it could not start yet.
func (qp *QP) fetch(s *reqState, a *qpAttr) (blocked bool) {
	maxRD := max(int(a.maxRD), 1)
	var f sq.CtrlFields
	for !s.erred {
		if !qp.sqr.PeekInto(&f) {
			return false
		}
		if len(s.inflight) >= window {
			return true
		}
		switch f.Fence {
		case sq.FenceFence, sq.FenceSmallAndFence:
			if s.reads > 0 || (qp.drainSig && len(s.inflight) > 0) {
				return true
			}
		case sq.FenceStrongOrdering:
			if len(s.inflight) > 0 {
				return true
			}
		}
		if qp.drainSig && f.Fence != 0 && f.Fence != sq.FenceInitiatorSmall && qp.sigErr.Load() {
			// Signature pipelining: a WQE before this fenced one met a
			// signature error; the QP stops in SQD (SQ_DRAINED follows
			// once nothing is outstanding, which the fence ensured).
			qp.mu.Lock()
			if qp.state == ifc.StateRTS {
				qp.state, qp.drained = ifc.StateSQD, false
				qp.publish()
			}
			qp.mu.Unlock()
			return false
		}
		if (f.Opcode == sq.OpRDMARead || f.Opcode == sq.OpAtomicCS || f.Opcode == sq.OpAtomicFA) && s.reads >= maxRD {
			return true
		}
		w, err := qp.sqr.Take(s.scratch[:], &f)
		p := s.newPending()
		p.idx, p.op, p.signaled = f.WQEIndex, f.Opcode, f.Signaled()
		s.inflight = append(s.inflight, p)
		if err != nil {
			qp.fail(s, p, cq.SyndromeLocalQPOp)
			return false
		}
		qp.execute(s, a, p, w, &f)
	}
	return false
}

// newPending returns a zeroed pending record.
func (s *reqState) newPending() *pending {
	if n := len(s.free); n > 0 {
		p := s.free[n-1]
		s.free = s.free[:n-1]
		return p
	}
	return new(pending)
}

// fail ends p with an error syndrome; nothing after it executes.
func (qp *QP) fail(s *reqState, p *pending, synd cq.Syndrome) {
	p.done, p.synd = true, synd
	s.erred = true
}

// execute runs one WQE: local work at once, remote work as a request.
func (qp *QP) execute(s *reqState, a *qpAttr, p *pending, w []byte, f *sq.CtrlFields) {
	if qp.ud {
		qp.executeUD(s, a, p, w, f)
		return
	}
	if qp.raw {
		qp.executeRaw(s, p, w, f)
		return
	}
	segs := w[sq.CtrlSegSize:]
	var req *request
	var synd cq.Syndrome
	if qp.uc && !ucOpcode(f.Opcode) {
		qp.fail(s, p, cq.SyndromeLocalQPOp) // UC has no READ, atomics or SEND with invalidate
		return
	}
	var xsrqn uint32
	if qp.xrc && f.Opcode != sq.OpUMR && f.Opcode != sq.OpNOP && f.Opcode != sq.OpSetPSV {
		if len(segs) < sq.XRCSegSize {
			qp.fail(s, p, cq.SyndromeLocalQPOp)
			return
		}
		xsrqn, segs = sq.XRCSeg(segs).SRQN(), segs[sq.XRCSegSize:]
	}
	switch f.Opcode {
	case sq.OpNOP:
		p.done = true
		return
	case sq.OpUMR:
		synd = qp.doUMR(segs, klm.Key(f.Imm))
	case sq.OpSetPSV:
		synd = qp.doSetPSV(segs)
	case sq.OpSend, sq.OpSendImm, sq.OpSendInval:
		req = s.newRequest()
		req.op, req.imm, req.solicited = f.Opcode, f.Imm, f.SE
		req.src, req.length, req.srcSig, synd = qp.gather(req.segsFor(), segs, klm.LocalRead, req.sigSlot())
	case sq.OpRDMAWrite, sq.OpRDMAWriteImm:
		if len(segs) < sq.RaddrSegSize {
			synd = cq.SyndromeLocalQPOp
			break
		}
		r := sq.RaddrSeg(segs).Fields()
		req = s.newRequest()
		req.op, req.raddr, req.rkey, req.imm, req.solicited = f.Opcode, r.Addr, klm.Key(r.RKey), f.Imm, f.SE
		req.src, req.length, req.srcSig, synd = qp.gather(req.segsFor(), segs[sq.RaddrSegSize:], klm.LocalRead, req.sigSlot())
	case sq.OpRDMARead:
		if len(segs) < sq.RaddrSegSize {
			synd = cq.SyndromeLocalQPOp
			break
		}
		r := sq.RaddrSeg(segs).Fields()
		req = s.newRequest()
		req.op, req.raddr, req.rkey = f.Opcode, r.Addr, klm.Key(r.RKey)
		req.dst, req.length, req.dstSig, synd = qp.gather(req.segsFor(), segs[sq.RaddrSegSize:], klm.LocalWrite, req.sigSlot())
		p.readAtomic = true
	case sq.OpAtomicCS, sq.OpAtomicFA:
		if len(segs) < sq.RaddrSegSize+sq.AtomicSize {
			synd = cq.SyndromeLocalQPOp
			break
		}
		r := sq.RaddrSeg(segs).Fields()
		at := sq.AtomicSeg(segs[sq.RaddrSegSize:]).Fields()
		req = s.newRequest()
		req.op, req.raddr, req.rkey, req.swapAdd, req.compare = f.Opcode, r.Addr, klm.Key(r.RKey), at.SwapAdd, at.Compare
		var sa *sigAccess
		req.dst, req.length, sa, synd = qp.gather(req.segsFor(), segs[sq.RaddrSegSize+sq.AtomicSize:], klm.LocalWrite, req.sigSlot())
		switch {
		case synd == 0 && sa != nil:
			synd = cq.SyndromeLocalProt // no atomics through a signature key
		case synd == 0 && req.length != 8:
			synd = cq.SyndromeLocalLength
		}
		p.readAtomic = true
	default:
		synd = cq.SyndromeLocalQPOp
	}
	if synd != 0 {
		if req != nil {
			req.release() // never sent: back to the pool
		}
		qp.fail(s, p, synd)
		return
	}
	if req == nil {
		p.done = true
		return
	}
	req.keepSegs(req.src)
	req.keepSegs(req.dst)
	req.from, req.psn, req.xrcSRQN = qp, s.nextPSN, xsrqn
	req.npkts = packets(req.op, req.length, a.mtu())
	req.rdNext = req.psn
	s.nextPSN = roce.PSNAdd(s.nextPSN, req.npkts)
	p.req = req
	if p.readAtomic {
		s.reads++
	}
	// Handed to the peer at the end of the step (flushOut); a peer that
	// does not exist or is not ready drops it, and the ACK timeout retries.
	req.hold()
	s.out = append(s.out, req)
}

// ucOpcode reports whether a UC QP executes op: local work, SEND and
// WRITE, with or without immediate (IBA 9.2: UC has no READ, atomics or
// SEND with invalidate).
func ucOpcode(op sq.Opcode) bool {
	switch op {
	case sq.OpRDMARead, sq.OpAtomicCS, sq.OpAtomicFA, sq.OpSendInval:
		return false
	}
	return true
}

// ucTimeout is how long a UC requester waits for the fabric's word that
// its messages were taken (or dropped) before it counts them sent: a peer
// that stopped serving never answers, and UC does not retry.
const ucTimeout = 500 * time.Millisecond

// armTimer (re)starts the timer for d (0: stop it).
func (qp *QP) armTimer(s *reqState, d time.Duration, rnr bool) {
	if s.armed {
		s.timer.Stop()
	}
	s.armed, s.rnrWait, s.armedAt = d > 0, rnr, s.answers
	if d > 0 {
		s.timer.Reset(d)
	}
}

// gather resolves data segments (or inline data) into memory segments with
// the given local access. A signature key must be the only segment; its
// segments are then its memory domain, and sa carries the transform.
func (qp *QP) gather(out [][]byte, segs []byte, need klm.Access, into *sigAccess) (_ [][]byte, total uint64, sa *sigAccess, synd cq.Syndrome) {
	n := 0
	for len(segs) >= sq.SegSize {
		w := binary.BigEndian.Uint32(segs)
		if w&sq.InlineFlag != 0 {
			k := int(w &^ sq.InlineFlag)
			if need != klm.LocalRead || 4+k > len(segs) || sa != nil {
				return nil, 0, nil, cq.SyndromeLocalQPOp
			}
			out = append(out, append([]byte(nil), segs[4:4+k]...))
			total += uint64(k)
			n++
			segs = segs[(4+k+sq.SegSize-1)/sq.SegSize*sq.SegSize:]
			continue
		}
		d := sq.DataSeg(segs).Fields()
		segs = segs[sq.DataSegSize:]
		if d.ByteCount == 0 {
			continue
		}
		var s *sigAccess
		var err error
		out, s, err = qp.resolveKey(&qp.req.keys, out, klm.Key(d.LKey), d.Addr, uint64(d.ByteCount), need, need == klm.LocalRead, into)
		if err != nil {
			return nil, 0, nil, cq.SyndromeLocalProt
		}
		if s != nil {
			s.own = true
		}
		n++
		if (s != nil || sa != nil) && n > 1 {
			return nil, 0, nil, cq.SyndromeLocalQPOp
		}
		sa = s
		total += uint64(d.ByteCount)
		if total > 1<<31 {
			return nil, 0, nil, cq.SyndromeLocalLength
		}
	}
	return out, total, sa, 0
}

func (qp *QP) doUMR(segs []byte, target klm.Key) cq.Syndrome {
	fetch := func(key klm.Key, addr uint64, n int) ([]byte, error) {
		var buf []byte
		segs, err := qp.fn.mkeys.Resolve(nil, klm.Request{Key: key, PD: qp.pd, Addr: addr, Len: uint64(n), Access: klm.LocalRead})
		if err != nil {
			return nil, err
		}
		for _, s := range segs {
			buf = append(buf, s...)
		}
		return buf, nil
	}
	op, err := umr.Decode(segs, target, fetch)
	if err != nil {
		if errors.Is(err, klm.ErrFault) {
			return cq.SyndromeLocalProt
		}
		return cq.SyndromeLocalQPOp
	}
	if m := qp.fn.mkeys.Lookup(target.Index()); m == nil || m.PD != qp.pd {
		return cq.SyndromeLocalProt
	}
	op.Poster = qp.qpn
	sigReg := op.Ctrl.Mask&umr.MaskBSFEnable != 0 && op.Mkey.BSFEnabled
	if sigReg && !qp.integrity {
		return cq.SyndromeLocalQPOp // a signature UMR needs an integrity-enabled QP
	}
	// A UMR that moves the key to another PD moves the PD reference with
	// it (as ibv_rereg_mr moves the MR's use count): the new PD must exist,
	// and the old one is free to go once nothing else uses it.
	movePD := op.Ctrl.Mask&umr.MaskPD != 0 && op.Mkey.PD != qp.pd
	if movePD {
		qp.fn.mu.Lock()
		ok := qp.fn.pdRef(op.Mkey.PD, 1)
		qp.fn.mu.Unlock()
		if !ok {
			return cq.SyndromeLocalProt
		}
	}
	err = umr.Apply(qp.fn.mkeys, op)
	if movePD {
		qp.fn.mu.Lock()
		if err != nil {
			qp.fn.pdRef(op.Mkey.PD, -1)
		} else {
			qp.fn.pdRef(qp.pd, -1)
		}
		qp.fn.mu.Unlock()
	}
	if err != nil {
		switch {
		case op.Ctrl.Mask&umr.MaskQPN != 0 && !errors.Is(err, umr.ErrUnknownMask):
			// A memory window's bind or invalidation (the UMRs that carry
			// the QPN, as rdma-core's mlx5 provider builds them).
			return cq.SyndromeMWBind
		case errors.Is(err, umr.ErrNotFree), errors.Is(err, umr.ErrFree), errors.Is(err, umr.ErrAccess), errors.Is(err, umr.ErrNotUMR):
			return cq.SyndromeLocalProt
		}
		return cq.SyndromeLocalQPOp
	}
	return 0
}

func (qp *QP) doSetPSV(segs []byte) cq.Syndrome {
	if len(segs) < psv.SetPSVSegSize {
		return cq.SyndromeLocalQPOp
	}
	f := psv.SetPSVSeg(segs).Fields()
	p := qp.fn.psv(f.Index)
	if p == nil || p.pd != qp.pd {
		return cq.SyndromeLocalProt
	}
	p.mu.Lock()
	p.bg, p.app, p.ref = f.Guard, f.AppTag, f.RefTag
	p.mu.Unlock()
	return 0
}

// onResponse applies an answer: an ACK up to its PSN, READ data from the
// wire, or a NAK of the message holding its PSN.
func (qp *QP) onResponse(s *reqState, r response) {
	defer r.free()
	_, a, gen := qp.snapshot()
	if gen != s.gen {
		return
	}
	s.answers++
	switch r.kind {
	case respACK:
		qp.ackUpTo(s, r)
		return
	case respData:
		qp.onReadData(s, &a, r)
		return
	}
	var p *pending
	for _, q := range s.inflight {
		if q.req != nil && !q.acked && !q.done && q.req.holds(r.psn) {
			p = q
			break
		}
	}
	if p == nil {
		return // stale (a retransmission's second answer)
	}
	switch r.kind {
	case respRNR:
		if a.rnrRetry != 7 && p.rnrRetries >= int(a.rnrRetry) {
			qp.dev.log.Warn("RNR retry count exceeded", "qpn", qp.qpn, "wqe", p.idx, "psn", p.req.psn, "remote_qpn", a.remoteQPN)
			qp.dev.count(&qp.dev.ctr.retryExceeded)
			qp.fail(s, p, cq.SyndromeRNRRetry)
			return
		}
		p.rnrRetries++
		qp.dev.count(&qp.dev.ctr.rnrNAKs)
		qp.armTimer(s, qp.dev.duration(rnrDelay(r.rnrDly)), true)
	case respSeq:
		// Go back N: resend from the message the responder waits for,
		// unless an RNR NAK's delay is running (its end resends).
		qp.dev.count(&qp.dev.ctr.seqNAKs)
		if d := roce.PSNDiff(r.psn, p.req.txFrom); p.req.holds(r.psn) && (d > 0 || !p.req.nakSeen) {
			// The responder took packets of the message since the last
			// one: progress, the retry count starts again; resends start
			// from the PSN it waits for.
			p.retries = 0
			p.req.txFrom, p.req.nakSeen = r.psn, true
		}
		if !s.rnrWait {
			qp.resend(s, p)
		}
	case respAccess:
		qp.fail(s, p, cq.SyndromeRemoteAccess)
	case respInvalid:
		qp.fail(s, p, cq.SyndromeRemoteInvalReq)
	default:
		qp.fail(s, p, cq.SyndromeRemoteOp)
	}
}

// holds reports whether psn is one of the request's PSNs.
func (r *request) holds(psn uint32) bool {
	d := roce.PSNDiff(psn, r.psn)
	return d >= 0 && int(d) < max(r.npkts, 1)
}

// lastPSN returns the request's last PSN.
func (r *request) lastPSN() uint32 { return roce.PSNAdd(r.psn, max(r.npkts, 1)-1) }

// ackUpTo completes, in order, every message an ACK at r.psn covers: each
// SEND and WRITE whose last PSN is not after it and, with r.read, the READ
// or atomic that ends at it. It stops at a READ or atomic without its
// answer.
func (qp *QP) ackUpTo(s *reqState, r response) {
	for _, p := range s.inflight {
		if p.req == nil || p.acked || p.done {
			continue
		}
		last := p.req.lastPSN()
		if roce.PSNDiff(last, r.psn) > 0 {
			if !p.readAtomic && p.req.holds(r.psn) {
				// An ACK inside a long message: its packets up to r.psn
				// arrived. A resend starts after them.
				p.retries = 0
				p.req.txFrom, p.req.nakSeen = roce.PSNAdd(r.psn, 1), true
			}
			return
		}
		if p.readAtomic {
			if !r.read || last != r.psn {
				// An answer past a READ or atomic without its response:
				// responses come in order, so that one was lost (an
				// implicit NAK). Resend from it, once until the timer.
				if !p.req.rdGap {
					p.req.rdGap = true
					qp.resend(s, p)
				}
				return
			}
			if r.atomic {
				var w [8]byte
				binary.BigEndian.PutUint64(w[:], r.value)
				scatterFrom(p.req.dst, w[:])
			}
			s.reads--
		}
		qp.acked(s, p)
	}
}

// acked completes p as answered, reporting the PI error the fabric's
// responder met in the requester's transform.
func (qp *QP) acked(s *reqState, p *pending) {
	p.acked, p.done, p.bytes = true, true, uint32(p.req.length)
	r := p.req
	if r.srcSig == nil && r.dstSig == nil {
		return // peerSigErr and peerSigFail are a signature transform's
	}
	r.memMu.Lock()
	e, failed := r.peerSigErr, r.peerSigFail
	r.peerSigErr, r.peerSigFail = nil, false
	r.memMu.Unlock()
	sa := r.srcSig
	if sa == nil {
		sa = r.dstSig
	}
	if e != nil && sa != nil {
		sa.report(e)
	}
	if failed {
		qp.fail(s, p, cq.SyndromeLocalProt)
	}
}

// onReadData places a READ response packet from the wire in the READ's
// memory, in PSN order: a gap resends the READ, a duplicate is dropped.
// The last packet completes the READ (through its signature transform,
// if its memory is a signature key's).
func (qp *QP) onReadData(s *reqState, a *qpAttr, r response) {
	var p *pending
	for _, q := range s.inflight {
		if q.req != nil && q.op == sq.OpRDMARead && !q.done && q.req.holds(r.psn) {
			p = q
			break
		}
	}
	if p == nil {
		return
	}
	req := p.req
	if d := roce.PSNDiff(r.psn, req.rdNext); d != 0 {
		if d > 0 {
			qp.dev.count(&qp.dev.ctr.outOfSeq)
			if !req.rdGap {
				req.rdGap = true
				qp.resend(s, p)
			}
		}
		return
	}
	req.rdGap = false
	p.retries = 0 // progress: the retry count starts again
	off := uint64(roce.PSNDiff(r.psn, req.psn)) * uint64(a.mtu())
	if off+uint64(len(r.data)) > req.length || (r.last != (r.psn == req.lastPSN())) {
		return // not this READ's response: dropped
	}
	if req.dstSig != nil {
		if req.rdBuf == nil {
			req.rdBuf = make([]byte, 0, req.length)
		}
		req.rdBuf = append(req.rdBuf, r.data...)
	} else {
		copyAt(req.dst, off, r.data)
	}
	req.rdNext = roce.PSNAdd(req.rdNext, 1)
	if !r.last {
		return
	}
	if uint64(len(req.rdBuf)) != req.length && req.dstSig != nil {
		return
	}
	if req.dstSig != nil {
		e, err := req.dstSig.run(req.dst, [][]byte{req.rdBuf})
		if e != nil {
			req.dstSig.report(e)
		}
		if err != nil {
			qp.fail(s, p, cq.SyndromeLocalProt)
			return
		}
	}
	// A READ response also acknowledges the requests before it.
	qp.ackUpTo(s, response{psn: roce.PSNAdd(req.psn, -1)})
	s.reads--
	p.acked, p.done, p.bytes = true, true, uint32(req.length)
}

// resend queues every unanswered request from p on for retransmission.
func (qp *QP) resend(s *reqState, from *pending) {
	on := false
	for _, p := range s.inflight {
		on = on || p == from
		if on && p.req != nil && !p.acked && !p.done {
			p.req.hold()
			s.out = append(s.out, p.req)
			qp.dev.count(&qp.dev.ctr.retransmits)
		}
	}
}

// unacked returns the oldest request not yet answered.
func (qp *QP) unacked(s *reqState) *pending {
	for _, p := range s.inflight {
		if p.req != nil && !p.acked && !p.done {
			return p
		}
	}
	return nil
}

// onTimer retransmits every unanswered request from the oldest on (the
// responder drops what follows a request it could not take), after an
// RNR delay or an ACK timeout; too many timeouts fail the oldest.
func (qp *QP) onTimer(s *reqState) {
	st, a, gen := qp.snapshot()
	rnr := s.rnrWait
	s.rnrWait = false
	if gen != s.gen || (st != ifc.StateRTS && st != ifc.StateSQD) {
		return
	}
	head := qp.unacked(s)
	if head == nil {
		return
	}
	if !rnr {
		if s.answers != s.armedAt || qp.inService.Load() > 0 {
			// Answers came in since the timer was armed, or a long message
			// is being moved: not a timeout.
			qp.armTimer(s, qp.answerTimeout(&a), false)
			return
		}
		if qp.uc {
			// Nothing answered the UC messages (a peer that stopped): they
			// count as sent and lost, as on a wire. Their memory is the
			// application's again, so a responder that still gets to
			// them drops them.
			qp.ackUpTo(s, response{psn: roce.PSNAdd(s.nextPSN, -1)})
			return
		}
		head.retries++
		qp.dev.count(&qp.dev.ctr.timeouts)
		if head.retries > int(a.retry) {
			qp.dev.log.Warn("transport retry count exceeded", "qpn", qp.qpn, "wqe", head.idx, "psn", head.req.psn,
				"retries", head.retries-1, "remote_qpn", a.remoteQPN)
			qp.dev.count(&qp.dev.ctr.retryExceeded)
			qp.fail(s, head, cq.SyndromeTransportRetry)
			return
		}
	}
	for _, p := range s.inflight {
		if p.req != nil {
			p.req.rdGap = false
		}
	}
	qp.resend(s, head)
	// flushOut sends them and re-arms the ACK timeout.
}

// complete writes the CQEs of finished WQEs, in order, and returns how
// many WQEs it retired.
func (qp *QP) complete(s *reqState) int {
	n := 0
	for ; n < len(s.inflight) && s.inflight[n].done; n++ {
		p := s.inflight[n]
		p.req.retire(s)
		if p.synd != 0 {
			qp.pushCQEs(s)
			qp.cqe(&cq.Fields{Opcode: cq.OpReqErr, QPN: qp.qpn, WQEOpcode: uint8(p.op), WQECounter: p.idx, Syndrome: p.synd}, true)
			s.inflight = s.inflight[n+1:]
			qp.toError()
			qp.flush(s)
			return n + 1
		}
		if p.signaled {
			// Written in place: no whole-struct copy of a just-built value.
			k := len(s.cqes)
			s.cqes = slices.Grow(s.cqes, 1)[:k+1]
			f := &s.cqes[k]
			*f = cq.Fields{}
			f.Opcode, f.QPN, f.WQEOpcode, f.WQECounter, f.ByteCount = cq.OpReq, qp.qpn, uint8(p.op), p.idx, p.bytes
		}
		// Nothing refers to p once it left inflight (answers are matched
		// through inflight): reuse it.
		*p = pending{}
		s.free = append(s.free, p)
	}
	qp.pushCQEs(s)
	if n > 0 {
		s.inflight = append(s.inflight[:0], s.inflight[n:]...)
	}
	return n
}

// pushCQEs writes the send CQEs complete gathered, in one batch.
func (qp *QP) pushCQEs(s *reqState) {
	if len(s.cqes) > 0 {
		if !qp.scq.pushN(s.cqes, false) {
			qp.fatal()
		}
		s.cqes = s.cqes[:0]
	}
}

// cqe writes a send completion; a CQ that cannot take it puts the QP in error.
func (qp *QP) cqe(f *cq.Fields, solicited bool) {
	if !qp.scq.push(f, solicited) {
		qp.fatal()
	}
}

// fatal reports, once per QP until it is reset, that a completion could
// not be written, and moves the QP to error.
func (qp *QP) fatal() {
	qp.mu.Lock()
	first := !qp.fatalSent
	qp.fatalSent = true
	qp.mu.Unlock()
	if first {
		qp.fn.event(ifc.EventQPFatal, qp.qpn)
	}
	qp.toError()
}

// flush completes every outstanding and posted WQE with WR_FLUSH_ERR, in
// order (signaled or not).
func (qp *QP) flush(s *reqState) {
	qp.armTimer(s, 0, false)
	for _, p := range s.inflight {
		p.req.retire(s)
		qp.cqe(&cq.Fields{Opcode: cq.OpReqErr, QPN: qp.qpn, WQEOpcode: uint8(p.op), WQECounter: p.idx, Syndrome: cq.SyndromeWRFlush}, true)
	}
	s.inflight = s.inflight[:0]
	s.reads = 0
	s.erred = true
	for qp.sqr.Pending() {
		// A WQE posted after a move to RESET (seen above) belongs to the
		// next connection: the reset happened before it, so this sees it.
		if _, _, gen := qp.snapshot(); gen != s.gen {
			return
		}
		w, f, err := qp.sqr.Fetch(s.scratch[:])
		_ = w
		if err != nil {
			f.WQEIndex = qp.sqr.Consumer() - 1
		}
		qp.cqe(&cq.Fields{Opcode: cq.OpReqErr, QPN: qp.qpn, WQEOpcode: uint8(f.Opcode), WQECounter: f.WQEIndex, Syndrome: cq.SyndromeWRFlush}, true)
	}
}
