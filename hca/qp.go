package hca

import (
	"github.com/hcasim/hcasim/hca/ifc"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hcasim/hcasim/internal/dma"
	"github.com/hcasim/hcasim/sq"
)

// transitions lists, per modify opcode, the states it starts from and the
// state it goes to (any state may go to ERR and RST).
var transitions = map[uint16]struct {
	from []ifc.QPState
	to   ifc.QPState
}{
	ifc.CmdRST2INIT:  {[]ifc.QPState{ifc.StateRST}, ifc.StateINIT},
	ifc.CmdINIT2INIT: {[]ifc.QPState{ifc.StateINIT}, ifc.StateINIT},
	ifc.CmdINIT2RTR:  {[]ifc.QPState{ifc.StateINIT}, ifc.StateRTR},
	ifc.CmdRTR2RTS:   {[]ifc.QPState{ifc.StateRTR}, ifc.StateRTS},
	ifc.CmdRTS2RTS:   {[]ifc.QPState{ifc.StateRTS}, ifc.StateRTS},
	ifc.CmdRTS2SQD:   {[]ifc.QPState{ifc.StateRTS}, ifc.StateSQD},
	ifc.CmdSQD2RTS:   {[]ifc.QPState{ifc.StateSQD}, ifc.StateRTS},
	ifc.CmdSQERR2RTS: {[]ifc.QPState{ifc.StateSQE}, ifc.StateRTS},
}

// window bounds the requests a QP has in flight; the responder's inbox and
// the requester's ack queue hold twice that many (retransmissions), and
// neither side ever blocks the other.
const window = 256

// inboxSize bounds a responder's inbox: 2×window messages of the fabric,
// or the packets of a wire's messages in flight (what does not fit is
// dropped, as a full receive queue on a NIC drops, and resent).
const inboxSize = 2048

// QP is a connected queue pair, RC or UC: a send queue run by a requester
// goroutine and a responder goroutine that serves the peer's requests and
// consumes the receive queue.
type QP struct {
	fn        *Func
	dev       *Device
	qpn       uint32
	pd        uint32
	scq, rcq  *CQ
	srq       *SRQ // the SRQ the responder takes receives from, or nil
	integrity bool
	uc        bool // an unreliable connected QP (QPTypeUC)
	ud        bool // an unreliable datagram QP (QPTypeUD, ud.go)
	raw       bool // a raw packet QP (QPTypeRaw, raw.go)
	blockLB   bool // QPFlagBlockMcastLB
	// wq: a raw packet QP that is a receive work queue (QPFlagNoSQ);
	// rssRefs counts the RSS QPs whose table holds it (under fn.mu).
	wq      bool
	rssRefs int
	rss     *rssConf // an RSS QP's hash and table (QPFlagRSS, rss.go)
	// flows counts the flow rules attached to a raw QP (flow.go): while
	// there are any, DESTROY_QP is refused, as the kernel's EBUSY.
	flows atomic.Int32
	// xrc: an XRC QP (QPTypeXRC), an initiator (a send queue whose WQEs
	// name the remote XRC SRQ) or, with tgt, a target of XRC domain xrcd
	// (xrc.go).
	xrc, tgt bool
	xrcd     uint32
	drainSig bool // QPFlagDrainSigErr
	// sigErr is set when an access of this QP's WQEs through a signature
	// key met an error (drainSig QPs): its next fenced WQE stops the QP in
	// SQD. Cleared by SQD→RTS and RST.
	sigErr atomic.Bool
	// injLogged: a request from a QP other than the peer has been logged.
	injLogged atomic.Bool
	// sqFetched is the send ring's consumer counter (the requester's),
	// for QUERY_QP.
	sqFetched atomic.Uint32

	sqr      *sq.Ring
	rqBuf    []byte
	rqDB     []byte // receive counter word of the doorbell record
	sqHint   []byte // the send activity hint word, or nil (QPFlagDBHint)
	rqLog    uint8
	rqStride uint8

	mu        sync.Mutex
	snap      atomic.Pointer[qpSnap] // state, attr and resetGen as last published (publish)
	state     ifc.QPState
	attr      qpAttr
	drained   bool   // SQ_DRAINED reported for the current SQD
	fatalSent bool   // QP_FATAL reported
	resetGen  uint64 // bumped by every move to RST

	bell  chan struct{}   // send doorbell, and state changes
	rbell chan struct{}   // receive doorbell, and state changes
	acks  *mbox[response] // from the peer's responder
	inbox *mbox[*request] // from the peer's requester
	// respMu serializes the responder's users: its goroutine and a
	// requester of this device serving inline (serveInline). It guards
	// resp and respDone.
	// reqMu serializes the send engine's users: its goroutine and a
	// driver's goroutine ringing the doorbell (doorbell). It guards req
	// and reqDone.
	reqMu    sync.Mutex
	req      reqState
	reqDone  bool // the requester goroutine stopped
	respMu   sync.Mutex
	resp     respState
	respDone bool // the responder goroutine stopped: nothing serves
	// inService counts this QP's long requests a responder is moving now.
	// On a wire a long message's packets are acknowledged as they arrive;
	// here it moves in one step that may outlast the ACK timeout on a
	// loaded machine, so the requester does not count a timeout while one
	// is in service.
	inService atomic.Int32
	stop      chan struct{}
	// engines are the requester and responder goroutines: createQP starts
	// them, destroy waits for them (after closing stop).
	engines errgroup.Group
	closed  bool
	// flushAtStop: the QP was in ERR already when destroy began, so the
	// flush its move to ERR owes is delivered before the engines stop,
	// whichever of the kick and the stop they see first (under mu).
	flushAtStop bool
}

// qpSnap is a QP's state as the engines read it without a lock.
type qpSnap struct {
	state ifc.QPState
	attr  qpAttr
	gen   uint64
}

// publish makes the QP's state, attributes and reset generation what
// snapshot returns. The caller holds mu and calls it after every change.
func (qp *QP) publish() {
	qp.snap.Store(&qpSnap{state: qp.state, attr: qp.attr, gen: qp.resetGen})
}

// qpAttr is the QP context set by the modify commands.
type qpAttr struct {
	access    uint8
	remoteLID uint16
	remoteQPN uint32
	rqPSN     uint32
	sqPSN     uint32
	minRNR    uint8
	timeout   uint8
	retry     uint8
	rnrRetry  uint8
	maxRD     uint8
	maxDestRD uint8
	mtuCode   uint8    // the path MTU, IB's encoding: 1 (256) … 5 (4096); 0 means 5
	remoteGID [16]byte // the peer's GID: another host's routes over the wire
	qkey      uint32   // a UD QP's Q_Key
}

// mtu returns the path MTU in bytes.
func (a *qpAttr) mtu() int {
	if a.mtuCode == 0 {
		return 4096
	}
	return 128 << a.mtuCode
}

func (f *Func) createQP(in ifc.In) ifc.Out {
	c := &f.dev.caps
	logSQ, logRQ, logStride := in.U8(ifc.QPInLogSQ), in.U8(ifc.QPInLogRQ), in.U8(ifc.QPInLogStride)
	if logSQ > c.LogMaxSQSize || logRQ > c.LogMaxRQSize || logStride < 4 || logStride > 10 {
		return failOut(ifc.StatusBadParam, 0, "log sizes SQ %d RQ %d stride %d", logSQ, logRQ, logStride)
	}
	flags := in.U32(ifc.QPInFlags)
	qpType := in.U8(ifc.QPInType)
	if qpType > ifc.QPTypeRaw {
		return failOut(ifc.StatusBadParam, uint32(qpType), "QP type %d", qpType)
	}
	xrc := qpType == ifc.QPTypeXRC
	var xrcd uint32
	if xrc {
		xrcd = in.U32(ifc.QPInXRCD) & 0xFFFFFF // 0 in a shorter input: an initiator
	}
	tgt := xrcd != 0
	raw := qpType == ifc.QPTypeRaw
	if !raw && flags&(ifc.QPFlagNoSQ|ifc.QPFlagRSS|ifc.QPFlagBlockMcastLB) != 0 {
		return failOut(ifc.StatusBadParam, flags, "flags %#x of a raw packet QP on a QP of type %d", flags, qpType)
	}
	rss := raw && flags&ifc.QPFlagRSS != 0
	wq := raw && !rss && flags&ifc.QPFlagNoSQ != 0
	srqn := in.U32(ifc.QPInSRQN) & 0xFFFFFF
	if (xrc || qpType == ifc.QPTypeRaw) && srqn != 0 {
		return failOut(ifc.StatusBadParam, srqn, "an XRC or raw packet QP on SRQ %#x", srqn)
	}
	dbSize := sq.DBRecSize
	if flags&ifc.QPFlagDBHint != 0 {
		dbSize = sq.DBRecHintSize
	}
	var sqBuf, rqBuf, db []byte
	var err error
	switch {
	case tgt || rss:
		// A target, or an RSS QP, has no send queue: an empty ring of the
		// device's own, which no driver can post to.
		logSQ, sqBuf, db = 0, make([]byte, sq.WQEBBSize), privateWords(dbSize)
	case wq:
		logSQ, sqBuf = 0, make([]byte, sq.WQEBBSize) // a work queue: receives only
	default:
		sqBuf, err = f.contiguous(in.U64(ifc.QPInSQ), sq.WQEBBSize<<logSQ)
	}
	if err != nil {
		return failOut(ifc.StatusBadParam, 0, "send queue: %v", err)
	}
	if srqn == 0 && !xrc && !rss { // a QP on an SRQ, of XRC or RSS has no receive queue of its own
		if rqBuf, err = f.contiguous(in.U64(ifc.QPInRQ), 1<<(logRQ+logStride)); err != nil {
			return failOut(ifc.StatusBadParam, 0, "receive queue: %v", err)
		}
	}
	if !tgt && !rss {
		db, err = f.contiguous(in.U64(ifc.QPInDBRec), dbSize)
		if err != nil || !dma.Aligned(db) {
			return failOut(ifc.StatusBadParam, 0, "doorbell record: %v", err)
		}
	}
	sqr, err := sq.NewRing(sqBuf, db[sq.DBRecSend:], logSQ)
	if err != nil {
		return failOut(ifc.StatusBadParam, 0, "%v", err)
	}
	rqDB := db[sq.DBRecRecv : sq.DBRecRecv+4]
	if xrc || rss {
		rqDB = privateWords(4) // no receive queue: a receive counter that stays 0
	}
	if flags&ifc.QPFlagIntegr != 0 && (!c.SignatureHandover || qpType == ifc.QPTypeUD || qpType == ifc.QPTypeRaw || xrc) {
		return failOut(ifc.StatusBadParam, 0, "integrity not supported")
	}
	pd, scqn, rcqn := in.U32(ifc.QPInPD)&0xFFFFFF, in.U32(ifc.QPInSendCQ)&0xFFFFFF, in.U32(ifc.QPInRecvCQ)&0xFFFFFF

	f.mu.Lock()
	defer f.mu.Unlock()
	scq, rcq := f.cqs[scqn], f.cqs[rcqn]
	srq := f.srqs[srqn]
	switch {
	case uint32(len(f.qps)) >= c.MaxQP:
		return failOut(ifc.StatusExceedLim, 0, "%d QPs", len(f.qps))
	case tgt && !f.xrcds.has(xrcd):
		return failOut(ifc.StatusBadResource, xrcd, "no XRC domain %#x", xrcd)
	case !tgt && !rss && (scq == nil || rcq == nil && !xrc):
		return failOut(ifc.StatusBadResource, 0, "no CQ %#x or %#x", scqn, rcqn)
	case srqn != 0 && srq == nil:
		return failOut(ifc.StatusBadResource, srqn, "no SRQ %#x", srqn)
	case !f.charge(qpCost):
		return failOut(ifc.StatusExceedLim, 0, "device memory budget: no room for a QP")
	case tgt:
		pd, scq, rcq = 0, nil, nil // a target's accesses are in the PD of the SRQ served
		f.xrcdRef(xrcd, 1)
	case !f.pdRef(pd, 1):
		f.uncharge(qpCost)
		return failOut(ifc.StatusBadResource, pd, "no PD %#x", pd)
	}
	var rc *rssConf
	if rss {
		scq, rcq = nil, nil
		var bad ifc.Out
		if rc, bad = f.parseRSS(in); bad != nil {
			f.uncharge(qpCost)
			f.pdRef(pd, -1)
			return bad
		}
	}
	if xrc {
		rcq = nil // an initiator receives nothing
	}
	qp := &QP{
		fn: f, dev: f.dev, pd: pd, scq: scq, rcq: rcq, srq: srq, integrity: flags&ifc.QPFlagIntegr != 0, uc: qpType == ifc.QPTypeUC, ud: qpType == ifc.QPTypeUD, raw: raw, blockLB: flags&ifc.QPFlagBlockMcastLB != 0, wq: wq, rss: rc, drainSig: flags&ifc.QPFlagDrainSigErr != 0,
		xrc: xrc, tgt: tgt, xrcd: xrcd,
		sqr: sqr, rqBuf: rqBuf, rqDB: rqDB, rqLog: logRQ, rqStride: logStride,
		bell: make(chan struct{}, 1), rbell: make(chan struct{}, 1),
		acks: newMbox[response](inboxSize), inbox: newMbox[*request](inboxSize), stop: make(chan struct{}),
	}
	qp.publish()
	qp.req.timer = time.NewTimer(time.Hour)
	qp.req.timer.Stop()
	if flags&ifc.QPFlagDBHint != 0 {
		qp.sqHint = db[sq.DBRecHint : sq.DBRecHint+4]
		dma.StoreBE32(qp.sqHint, 0)
	}
	n, ok := f.dev.allocQPN(qp)
	if !ok {
		f.uncharge(qpCost)
		qp.unref()
		if rc != nil {
			rc.release()
		}
		return failOut(ifc.StatusNoResources, 0, "no QP number")
	}
	qp.qpn = n
	if scq != nil {
		scq.qps++
	}
	if rcq != nil {
		rcq.qps++
	}
	if srq != nil {
		srq.qps++
	}
	f.qps[n] = qp
	qp.engines.Go(func() error { qp.requester(); return nil })
	qp.engines.Go(func() error { qp.responder(); return nil })
	o := ifc.In(okOut(ifc.QPNOff + 4))
	o.Put32(ifc.QPNOff, n)
	return ifc.Out(o)
}

func (f *Func) destroyQP(qpn uint32) ifc.Out {
	qp := f.lookupQP(qpn)
	if qp == nil {
		return failOut(ifc.StatusBadResource, qpn, "no QP %#x", qpn)
	}
	if n := qp.flows.Load(); n > 0 {
		return failOut(ifc.StatusResBusy, qpn, "QP %#x has %d flows", qpn, n)
	}
	f.mu.Lock()
	refs := qp.rssRefs
	f.mu.Unlock()
	if refs > 0 {
		return failOut(ifc.StatusResBusy, qpn, "work queue %#x is in %d RSS tables", qpn, refs)
	}
	qp.destroy()
	return okOut(0)
}

// unref drops the reference the QP holds on its PD, or a target's on its
// XRC domain (under fn.mu).
func (qp *QP) unref() {
	if qp.tgt {
		qp.fn.xrcdRef(qp.xrcd, -1)
	} else {
		qp.fn.pdRef(qp.pd, -1)
	}
}

// destroy stops the QP's goroutines, waits for them, and releases it.
func (qp *QP) destroy() {
	qp.mu.Lock()
	if qp.closed {
		qp.mu.Unlock()
		return
	}
	qp.closed = true
	qp.flushAtStop = qp.state == ifc.StateERR
	qp.state = ifc.StateERR
	qp.publish()
	qp.mu.Unlock()
	if qp.raw {
		qp.dev.flows.dropFlows(qp) // a function closing: no frame reaches the QP again
	}
	close(qp.stop)
	_ = qp.engines.Wait() // the engines return no error
	qp.dev.freeQPN(qp.qpn)
	f := qp.fn
	f.mu.Lock()
	delete(f.qps, qp.qpn)
	if qp.scq != nil {
		qp.scq.qps--
	}
	if qp.rcq != nil {
		qp.rcq.qps--
	}
	if qp.srq != nil {
		qp.srq.qps--
	}
	if qp.rss != nil {
		qp.rss.release()
	}
	qp.unref()
	f.uncharge(qpCost)
	f.mu.Unlock()
}

func (f *Func) modifyQP(op uint16, in ifc.In) ifc.Out {
	qpn := in.U32(ifc.QPNOff) & 0xFFFFFF
	qp := f.lookupQP(qpn)
	if qp == nil {
		return failOut(ifc.StatusBadResource, qpn, "no QP %#x", qpn)
	}
	qp.mu.Lock()
	cur := qp.state
	var to ifc.QPState
	switch op {
	case ifc.Cmd2ERR:
		to = ifc.StateERR
	case ifc.Cmd2RST:
		to = ifc.StateRST
	default:
		t := transitions[op]
		ok := false
		for _, s := range t.from {
			ok = ok || s == cur
		}
		if !ok {
			qp.mu.Unlock()
			return failOut(ifc.StatusBadQPState, uint32(cur), "QP %#x in %v cannot take command %#x", qpn, cur, op)
		}
		to = t.to
	}
	a := &qp.attr
	opt := in.U32(ifc.QPOptMask)
	switch {
	case op == ifc.CmdRST2INIT,
		(op == ifc.CmdINIT2INIT || op == ifc.CmdRTS2RTS || op == ifc.CmdSQD2RTS) && opt&ifc.QPOptAccess != 0:
		a.access = in.U8(ifc.QPCAccess+3) & (ifc.QPAccessRead | ifc.QPAccessWrite | ifc.QPAccessAtomic)
	}
	switch {
	case !qp.ud || len(in) < ifc.QPModifyQKeySize:
	case op == ifc.CmdRST2INIT, opt&ifc.QPOptQKey != 0 && op != ifc.CmdINIT2RTR:
		a.qkey = in.U32(ifc.QPCQKey)
	}
	switch op {
	case ifc.CmdINIT2RTR:
		mtu := in.U8(ifc.QPCMTU)
		if mtu > 5 {
			qp.mu.Unlock()
			return failOut(ifc.StatusBadParam, uint32(mtu), "path MTU code %d", mtu)
		}
		a.remoteLID, a.remoteQPN = in.U16(ifc.QPCRemoteLID), in.U32(ifc.QPCRemoteQPN)&0xFFFFFF
		a.mtuCode = mtu
		for i := range a.remoteGID {
			a.remoteGID[i] = in.U8(ifc.QPCRemoteGID + i)
		}
		a.rqPSN = in.U32(ifc.QPCRQPSN) & 0xFFFFFF
		a.minRNR, a.maxDestRD = in.U8(ifc.QPCMinRNR)&31, in.U8(ifc.QPCMaxDestRD)
	case ifc.CmdRTR2RTS:
		a.sqPSN = in.U32(ifc.QPCSQPSN) & 0xFFFFFF
		a.timeout, a.retry, a.rnrRetry = in.U8(ifc.QPCTimeout)&31, in.U8(ifc.QPCRetry)&7, in.U8(ifc.QPCRNRRetry)&7
		a.maxRD = in.U8(ifc.QPCMaxRD)
	}
	if to == ifc.StateRST {
		*a = qpAttr{}
		qp.fatalSent = false
	}
	if to == ifc.StateSQD {
		qp.drained = false
	}
	if op == ifc.CmdSQD2RTS || to == ifc.StateRST {
		qp.sigErr.Store(false)
	}
	qp.state = to
	qp.publish()
	qp.mu.Unlock()
	if to == ifc.StateRST {
		qp.reset()
	}
	qp.kick()
	return okOut(0)
}

// owesFlush reports whether the stopping engines flush what is posted
// (flushAtStop).
func (qp *QP) owesFlush() bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.flushAtStop
}

// reset returns the queues to empty: the requester and responder forget
// their state at their next wake-up, and the rings restart at 0.
func (qp *QP) reset() {
	qp.mu.Lock()
	qp.resetGen++
	qp.publish()
	qp.mu.Unlock()
}

func (f *Func) queryQP(qpn uint32) ifc.Out {
	qp := f.lookupQP(qpn)
	if qp == nil {
		return failOut(ifc.StatusBadResource, qpn, "no QP %#x", qpn)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	o := ifc.In(okOut(ifc.QPOutSize))
	a := &qp.attr
	o.Put8(ifc.QPOutState, uint8(qp.state))
	o.Put8(ifc.QPCAccess+3, a.access).Put16(ifc.QPCRemoteLID, a.remoteLID).Put32(ifc.QPCRemoteQPN, a.remoteQPN)
	o.Put32(ifc.QPCRQPSN, a.rqPSN).Put32(ifc.QPCSQPSN, a.sqPSN)
	o.Put8(ifc.QPCMinRNR, a.minRNR).Put8(ifc.QPCTimeout, a.timeout).Put8(ifc.QPCRetry, a.retry).Put8(ifc.QPCRNRRetry, a.rnrRetry)
	o.Put8(ifc.QPCMaxRD, a.maxRD).Put8(ifc.QPCMaxDestRD, a.maxDestRD).Put8(ifc.QPCMTU, a.mtuCode)
	copy(o[ifc.QPCRemoteGID:], a.remoteGID[:])
	o.Put32(ifc.QPCQKey, a.qkey)
	o.Put16(ifc.QPOutSQCounter, uint16(qp.sqFetched.Load()))
	return ifc.Out(o)
}

// State returns the QP's state (for tests).
func (qp *QP) State() ifc.QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// toError moves the QP to ERR (from an error completion or a fatal event).
func (qp *QP) toError() {
	qp.mu.Lock()
	changed := qp.state != ifc.StateERR && qp.state != ifc.StateRST
	if changed {
		qp.state = ifc.StateERR
		qp.publish()
	}
	qp.mu.Unlock()
	if changed {
		qp.kick()
	}
}

// ring is the send doorbell.
func (qp *QP) ring() {
	select {
	case qp.bell <- struct{}{}:
	default:
	}
}

// ringRQ is the receive doorbell.
func (qp *QP) ringRQ() {
	select {
	case qp.rbell <- struct{}{}:
	default:
	}
}

// kick wakes both goroutines after a state change.
func (qp *QP) kick() {
	qp.ring()
	qp.ringRQ()
}

// rnrDelay returns the delay an RNR NAK asks for (IB min_rnr_timer table).
func rnrDelay(code uint8) time.Duration {
	us := [...]float64{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
		2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520}
	return time.Duration(us[code&31] * float64(time.Microsecond))
}

// ackTimeout returns the local ACK timeout, 4.096 µs × 2^timeout (0: none).
func ackTimeout(code uint8) time.Duration {
	if code == 0 {
		return 0
	}
	return time.Duration(4096<<min(code, 31)) * time.Nanosecond
}
