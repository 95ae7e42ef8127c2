package verbs

import (
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"sync"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/sq"
)

// WCStatus is a work completion's status (IBV_WC_*).
type WCStatus uint8

// Work completion statuses.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRDReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
)

var wcNames = [...]string{
	"IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR", "IBV_WC_LOC_EEC_OP_ERR", "IBV_WC_LOC_PROT_ERR",
	"IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR", "IBV_WC_BAD_RESP_ERR", "IBV_WC_LOC_ACCESS_ERR", "IBV_WC_REM_INV_REQ_ERR",
	"IBV_WC_REM_ACCESS_ERR", "IBV_WC_REM_OP_ERR", "IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_LOC_RDD_VIOL_ERR",
	"IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR", "IBV_WC_INV_EECN_ERR", "IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR",
	"IBV_WC_RESP_TIMEOUT_ERR", "IBV_WC_GENERAL_ERR",
}

func (s WCStatus) String() string {
	if int(s) < len(wcNames) {
		return wcNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// statusOf maps a CQE syndrome to a status as the kernel's mlx5 driver does.
func statusOf(s cq.Syndrome) WCStatus {
	switch s {
	case cq.SyndromeLocalLength:
		return WCLocLenErr
	case cq.SyndromeLocalQPOp:
		return WCLocQPOpErr
	case cq.SyndromeLocalProt:
		return WCLocProtErr
	case cq.SyndromeWRFlush:
		return WCWRFlushErr
	case cq.SyndromeMWBind:
		return WCMWBindErr
	case cq.SyndromeBadResp:
		return WCBadRespErr
	case cq.SyndromeLocalAccess:
		return WCLocAccessErr
	case cq.SyndromeRemoteInvalReq:
		return WCRemInvReqErr
	case cq.SyndromeRemoteAccess:
		return WCRemAccessErr
	case cq.SyndromeRemoteOp:
		return WCRemOpErr
	case cq.SyndromeTransportRetry:
		return WCRetryExcErr
	case cq.SyndromeRNRRetry:
		return WCRNRRetryExcErr
	case cq.SyndromeRemoteAborted:
		return WCRemAbortErr
	}
	return WCGeneralErr
}

// WCOpcode is what a work completion completed (IBV_WC_*).
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend WCOpcode = iota
	WCRDMAWrite
	WCRDMARead
	WCCompSwap
	WCFetchAdd
	WCBindMW
	WCLocalInv
	WCRegMR
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

var wcOpNames = map[WCOpcode]string{
	WCSend: "IBV_WC_SEND", WCRDMAWrite: "IBV_WC_RDMA_WRITE", WCRDMARead: "IBV_WC_RDMA_READ", WCCompSwap: "IBV_WC_COMP_SWAP",
	WCFetchAdd: "IBV_WC_FETCH_ADD", WCBindMW: "IBV_WC_BIND_MW", WCLocalInv: "IBV_WC_LOCAL_INV", WCRegMR: "IB_WC_REG_MR",
	WCRecv: "IBV_WC_RECV", WCRecvRDMAWithImm: "IBV_WC_RECV_RDMA_WITH_IMM", WCUMR: "MLX5DV_WC_UMR",
}

// String returns the opcode's verbs name (IBV_WC_*; the kernel's
// IB_WC_REG_MR and mlx5dv's MLX5DV_WC_UMR for the two libibverbs lacks),
// or "WCOpcode(n)" for an unknown value.
func (o WCOpcode) String() string {
	if s, ok := wcOpNames[o]; ok {
		return s
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WC is a work completion.
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint8
	ByteLen   uint32
	// Imm is the immediate data (WithImm) or the invalidated rkey (WithInv).
	Imm     uint32
	WithImm bool
	WithInv bool
	QPN     uint32
	// SrcQP is the sending QP and GRH reports the 40-byte GRH at the head
	// of the buffer (UD receives).
	SrcQP uint32
	GRH   bool
}

// CQ is a completion queue. Poll is thread-compatible (one poller at a
// time); ReqNotify may be called from any goroutine.
type CQ struct {
	ctx     *Context
	cqn     uint32
	buf     []byte
	bufIO   uint64
	db      []byte
	dbIO    uint64
	logSize uint8
	ci      uint32
	channel *CompChannel
	armSN   uint8
	mu      sync.Mutex // the consumer index, for ReqNotify
}

// CompChannel delivers CQs whose armed notification fired.
type CompChannel struct {
	// C receives each CQ when its requested notification fires.
	C chan *CQ
}

// NewCompChannel returns a completion channel with room for n pending notifications.
func (c *Context) NewCompChannel(n int) *CompChannel {
	return &CompChannel{C: make(chan *CQ, max(n, 1))}
}

func (ch *CompChannel) notify(c *CQ) {
	select {
	case ch.C <- c:
	default:
	}
}

// CreateCQ creates a CQ with room for at least depth completions; ch, if
// not nil, receives it when a requested notification fires.
func (c *Context) CreateCQ(depth int, ch *CompChannel) (*CQ, error) {
	if depth <= 0 {
		return nil, fmt.Errorf("create cq of depth %d: %w", depth, ErrInvalid)
	}
	log := uint8(0)
	for 1<<log < depth {
		log++
	}
	if log > c.caps.LogMaxCQSize {
		return nil, fmt.Errorf("create cq of depth %d: above 2^%d: %w", depth, c.caps.LogMaxCQSize, ErrInvalid)
	}
	q := &CQ{ctx: c, logSize: log, channel: ch}
	var err error
	if q.buf, q.bufIO, err = c.dma(cq.CQESize<<log, 4096); err != nil {
		return nil, fmt.Errorf("create cq: %w", err)
	}
	if q.db, q.dbIO, err = c.dma(cq.DBRecSize, 64); err != nil {
		c.fn.FreeDMA(q.bufIO)
		return nil, fmt.Errorf("create cq: %w", err)
	}
	cq.InitRing(q.buf)
	in := ifc.NewIn(ifc.CmdCreateCQ, ifc.CQInSize).Put8(ifc.CQInLogSize, log).Put64(ifc.CQInRing, q.bufIO).Put64(ifc.CQInDBRec, q.dbIO)
	out, err := c.cmd(in)
	if err != nil {
		c.fn.FreeDMA(q.bufIO)
		c.fn.FreeDMA(q.dbIO)
		return nil, fmt.Errorf("create cq: %w", err)
	}
	q.cqn = out.U32(ifc.CQNOff)
	c.mu.Lock()
	c.cqs[q.cqn] = q
	c.mu.Unlock()
	return q, nil
}

// Handle returns the CQ number.
func (q *CQ) Handle() uint32 { return q.cqn }

// Destroy destroys the CQ; it fails while QPs use it.
func (q *CQ) Destroy() error {
	c := q.ctx
	if _, err := c.cmd(ifc.NewIn(ifc.CmdDestroyCQ, ifc.CQNOff+4).Put32(ifc.CQNOff, q.cqn)); err != nil {
		return fmt.Errorf("destroy cq: %w", err)
	}
	c.mu.Lock()
	delete(c.cqs, q.cqn)
	c.mu.Unlock()
	c.fn.FreeDMA(q.bufIO)
	c.fn.FreeDMA(q.dbIO)
	return nil
}

// Resize gives the CQ room for at least depth completions, keeping those
// not yet polled, as mlx5's provider resizes: the device marks the switch
// with a RESIZE_CQ CQE in the old ring and goes on in the new one; the
// driver copies the CQEs before the marker to the new ring, one index
// later, and steps its consumer index past the marker. A depth that
// cannot hold the unpolled completions (and the marker) fails with the
// device's BAD_PARAM. Resizing to the current size leaves the CQ as it is.
func (q *CQ) Resize(depth int) error {
	c := q.ctx
	if depth <= 0 {
		return fmt.Errorf("resize cq %d to %d: %w", q.cqn, depth, ErrInvalid)
	}
	log := pow2(depth)
	if log > c.caps.LogMaxCQSize {
		return fmt.Errorf("resize cq %d to %d: above 2^%d: %w", q.cqn, depth, c.caps.LogMaxCQSize, ErrInvalid)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if log == q.logSize {
		return nil
	}
	buf, io, err := c.dma(cq.CQESize<<log, 4096)
	if err != nil {
		return fmt.Errorf("resize cq %d: %w", q.cqn, err)
	}
	cq.InitRing(buf)
	in := ifc.NewIn(ifc.CmdModifyCQ, ifc.CQResizeSize).Put32(ifc.CQNOff, q.cqn).Put8(ifc.CQResizeLog, log).Put64(ifc.CQResizeRing, io)
	if _, err := c.cmd(in); err != nil {
		c.fn.FreeDMA(io)
		return fmt.Errorf("resize cq %d: %w", q.cqn, err)
	}
	// The marker is in the old ring before the command returns.
	for i := q.ci; ; i++ {
		e, ok := cq.Poll(q.buf, q.logSize, i)
		if !ok {
			return fmt.Errorf("resize cq %d: no RESIZE_CQ CQE after %d: %w", q.cqn, i-q.ci, ErrDeviceLost)
		}
		if e.Opcode() == cq.OpResizeCQ {
			break
		}
		j := (i + 1) & (1<<log - 1)
		d := buf[j*cq.CQESize : (j+1)*cq.CQESize]
		copy(d, e)
		d[cq.CQESize-1] = d[cq.CQESize-1]&^1 | uint8((i+1)>>log)&1
	}
	c.fn.FreeDMA(q.bufIO)
	q.buf, q.bufIO, q.logSize = buf, io, log
	q.ci++
	cq.SetConsumerIndex(q.db, q.ci)
	return nil
}

// Pending returns how many completions wait in the CQ to be polled (CQEs
// the device wrote after the consumer index; a signature error CQE counts).
func (q *CQ) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for cqeAt(q, q.ci+uint32(n)) && n < 1<<q.logSize {
		n++
	}
	return n
}

func cqeAt(q *CQ, i uint32) bool {
	_, ok := cq.Poll(q.buf, q.logSize, i)
	return ok
}

// Depth returns the completions the CQ holds.
func (q *CQ) Depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return 1 << q.logSize
}

// ReqNotify arms the CQ: the channel gets it at the next completion (or the
// next solicited or error completion with solicitedOnly).
func (q *CQ) ReqNotify(solicitedOnly bool) {
	q.mu.Lock()
	cmd := uint32(cq.ArmNext)
	if solicitedOnly {
		cmd = cq.ArmSolicited
	}
	q.armSN++
	w := cq.ArmWord(q.armSN, cmd, q.ci)
	q.mu.Unlock()
	q.ctx.fn.ArmCQ(q.cqn, w)
}

// Poll fills wcs with the completions there are and returns how many; it
// does not wait (PollWait does). Once the
// connection to the device is lost (Context.Err), a poll that finds no
// completion returns the error: none will come.
func (q *CQ) Poll(wcs []WC) (int, error) {
	n := 0
	q.mu.Lock()
	defer q.mu.Unlock()
	var last qpCache // consecutive CQEs are mostly one QP's
	defer last.release()
	for n < len(wcs) {
		e, ok := cq.Poll(q.buf, q.logSize, q.ci)
		if !ok {
			break
		}
		q.ci++
		if q.ctx.complete(e, &wcs[n], &last) {
			n++
		}
	}
	// Always: SIG_ERR CQEs are consumed without giving a completion.
	cq.SetConsumerIndex(q.db, q.ci)
	if n == 0 {
		if p := q.ctx.lostErr.Load(); p != nil {
			return 0, fmt.Errorf("poll cq %d: %w", q.cqn, *p)
		}
	}
	return n, nil
}

// qpCache is the QP of the last CQE one Poll call completed; while
// consecutive send CQEs are that QP's, its send lock stays held (locked).
type qpCache struct {
	qpn    uint32
	qp     *QP
	locked bool
}

// release lets go of the send lock the cache holds.
func (c *qpCache) release() {
	if c.locked {
		c.qp.smu.Unlock()
		c.locked = false
	}
}

// complete turns a CQE into the work completion wc through its QP's
// bookkeeping and reports whether it gave one (a signature error CQE, or
// a CQE of a QP the context no longer has, does not); last remembers the
// QP, and holds its send lock, within one poll.
func (c *Context) complete(e cq.CQE, wc *WC, last *qpCache) bool {
	op := e.Opcode()
	if op == cq.OpSigErr {
		last.release()
		f := e.Fields()
		c.sigError(&f)
		return false
	}
	if recv := op != cq.OpReq && op != cq.OpReqErr; recv && len(c.xsrqs) > 0 {
		if c.xrcDone(e, op, wc) {
			last.release()
			return true
		}
	}
	if qpn := e.QPN(); last.qp == nil || last.qpn != qpn {
		last.release() // no QP's send lock held while taking the context's
		c.mu.Lock()
		qp := c.qps[qpn]
		c.mu.Unlock()
		*last = qpCache{qpn: qpn, qp: qp}
	}
	qp := last.qp
	if qp == nil {
		return false
	}
	switch op {
	case cq.OpReq, cq.OpReqErr:
		if !last.locked {
			qp.smu.Lock()
			last.locked = true
		}
		qp.sendDone(e, op, wc)
		return true
	case cq.OpRespSend, cq.OpRespSendImm, cq.OpRespSendInv, cq.OpRespWriteImm, cq.OpRespErr:
		last.release()
		qp.recvDone(e, op, wc)
		return true
	}
	return false
}

// wcOpcode maps a send WQE opcode to a completion opcode.
func wcOpcode(op sq.Opcode) WCOpcode {
	switch op {
	case sq.OpRDMAWrite, sq.OpRDMAWriteImm:
		return WCRDMAWrite
	case sq.OpRDMARead:
		return WCRDMARead
	case sq.OpAtomicCS:
		return WCCompSwap
	case sq.OpAtomicFA:
		return WCFetchAdd
	}
	return WCSend
}
