package verbs

import (
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
	"sync"

	"github.com/hcasim/hcasim/cq"
	"github.com/hcasim/hcasim/internal/dma"
	"github.com/hcasim/hcasim/klm"
	"github.com/hcasim/hcasim/sq"
)

// QPState is a QP state as the verbs API names them.
type QPState uint8

// QP states.
const (
	StateReset QPState = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateErr
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "ERR"}

// String returns the state's name, or "QPState(n)" for an unknown value.
func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// QPCap are a QP's queue capacities.
type QPCap struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInline              int
}

// QPType is a QP's transport service (IBV_QPT_*).
type QPType uint8

// QP types.
const (
	// QPTypeRC is reliable connected: every message is acknowledged,
	// lost packets are resent, errors complete in error.
	QPTypeRC QPType = iota
	// QPTypeUC is unreliable connected: SEND and RDMA WRITE only, a send
	// completes once it is on its way (no ACK), and a message the peer
	// cannot take, or lost on the wire, is dropped silently.
	QPTypeUC
	// QPTypeUD is unreliable datagram: SEND and SEND with immediate of at
	// most the MTU, each to the QP its SendWR.UD names; every receive
	// buffer starts with the 40-byte GRH.
	QPTypeUD
	// QPTypeXRCSend is an XRC initiator (IBV_QPT_XRC_SEND): RC's
	// operations, each message naming the remote XRC SRQ it is for
	// (SendWR.XRCSRQN); it has no receive queue.
	QPTypeXRCSend
	// QPTypeXRCRecv is an XRC target (IBV_QPT_XRC_RECV, XRCD.CreateTarget):
	// no queues and no CQs; it serves each message into the XRC SRQ of its
	// domain the message names, in that SRQ's PD, completing on its CQ.
	QPTypeXRCRecv
	// QPTypeRaw is a raw packet QP (IBV_QPT_RAW_PACKET): each SEND is an
	// Ethernet frame (its SGEs hold the whole frame), and it receives the
	// frames its flows (QP.CreateFlow) take, with no GRH.
	QPTypeRaw
)

// String returns the type's verbs name.
func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	case QPTypeXRCSend:
		return "XRC_SEND"
	case QPTypeXRCRecv:
		return "XRC_RECV"
	case QPTypeRaw:
		return "RAW_PACKET"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPInitAttr configure a new QP.
type QPInitAttr struct {
	// Type is the transport service (the zero value: RC).
	Type           QPType
	SendCQ, RecvCQ *CQ
	Cap            QPCap
	// SRQ, if not nil, is where the QP takes its receives from; it has no
	// receive queue of its own (Cap.MaxRecvWR and MaxRecvSGE are ignored)
	// and PostRecv on it fails with ErrRingFull, as on mlx5.
	SRQ *SRQ
	// SigAll signals every send WR, whatever its flags.
	SigAll bool
	// Integrity enables signature (integrity) work requests on the QP.
	Integrity bool
	// SigPipelining drains the send queue on a signature error (mlx5dv's
	// MLX5DV_QP_CREATE_SIG_PIPELINING): a fenced WR waits for the WRs
	// before it, and if one of them met a signature error the QP moves to
	// SQD instead of running it (an EventSQDrained follows); moving it
	// back to RTS runs it.
	SigPipelining bool
	// BlockSelfMcastLB (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) keeps the
	// multicast frames this context's raw packet QPs send from a raw
	// packet QP's flows.
	BlockSelfMcastLB bool
}

// QPAttrMask says which optional attributes a Modify sets.
type QPAttrMask uint32

// Optional attributes.
const (
	// AttrAccess sets Access on INIT→INIT, RTS→RTS and SQD→RTS (RESET→INIT
	// always takes it).
	AttrAccess QPAttrMask = 1 << iota
	// AttrCurState says the QP is in CurState (IBV_QP_CUR_STATE): for a
	// QP the device moved itself, as signature pipelining moves it to SQD.
	AttrCurState
	// AttrQKey sets QKey on INIT→INIT, RTR→RTS, RTS→RTS and SQD→RTS of a
	// UD QP (RESET→INIT always takes it).
	AttrQKey
)

// QPAttr are modifiable QP attributes; State is the target state.
type QPAttr struct {
	State QPState
	// Mask selects optional attributes of the transition.
	Mask QPAttrMask
	// Access enables remote access to the QP's responder
	// (AccessRemoteRead, AccessRemoteWrite, AccessRemoteAtomic).
	Access Access
	// CurState is the state the QP is in, with AttrCurState.
	CurState        QPState
	DestLID         uint16
	DestGID         [16]byte // the peer's GID: another host's (not zero, not the local port's) routes over the RoCEv2 wire
	PathMTU         MTU      // 0 means MTU4096
	DestQPN         uint32
	RQPSN, SQPSN    uint32
	MinRNRTimer     uint8
	Timeout         uint8 // local ACK timeout: 4.096 µs × 2^Timeout (0 none)
	RetryCnt        uint8
	RNRRetry        uint8 // 7: retry forever
	MaxRDAtomic     uint8
	MaxDestRDAtomic uint8
	// QKey is a UD QP's Q_Key: a datagram whose Q_Key differs is dropped.
	QKey uint32
}

// MTU is a path MTU in IB's encoding (IBV_MTU_*).
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// QPInfo is what a peer needs to connect to a QP.
type QPInfo struct {
	LID uint16
	GID [16]byte // the port's RoCEv2 GID (zero: no wire)
	QPN uint32
	PSN uint32 // the initial send PSN; a QP moved to RESET takes a new one
}

// WROpcode is a send work request opcode (IBV_WR_*).
type WROpcode uint8

// Send work request opcodes.
const (
	WRSend WROpcode = iota
	WRSendWithImm
	WRSendWithInv
	WRRDMAWrite
	WRRDMAWriteWithImm
	WRRDMARead
	WRAtomicCmpSwp
	WRAtomicFetchAdd
	WRLocalInv
	WRRegMR
	numWROpcodes
)

// SendFlags are send work request flags (IBV_SEND_*).
type SendFlags uint8

// Send flags.
const (
	SendSignaled SendFlags = 1 << iota
	SendSolicited
	SendFence
	SendInline
)

// SendWR is a send work request.
type SendWR struct {
	WRID   uint64
	Opcode WROpcode
	Flags  SendFlags
	SG     []SGE
	// Imm is the immediate data of the WithImm opcodes.
	Imm uint32
	// InvalidateRKey is the key WRSendWithInv invalidates at the peer, or
	// the key WRLocalInv invalidates.
	InvalidateRKey uint32
	// RemoteAddr and RKey address the peer's memory (RDMA and atomics).
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd and Swap are the atomic operands.
	CompareAdd, Swap uint64
	// MR, Key and Access are WRRegMR's: register MR (its mapped page
	// list) under Key with Access; WRRegMRIntegrity and WRRegSigMR take MR
	// and Access.
	MR     *MR
	Key    uint32
	Access Access
	// Prot is WRRegSigMR's protection SGE (nil: none).
	Prot *SGE
	// Mkey is WRMkeyConfigure's configuration.
	Mkey *MkeyConfig
	// Bind is WRBindMW's bind.
	Bind *MWBind
	// UD is the destination of a UD QP's send.
	UD *UDDest
	// XRCSRQN is the remote XRC SRQ an XRC initiator's WR is for.
	XRCSRQN uint32
}

// UDDest addresses a datagram: the destination QP and its Q_Key (bit 31
// set: the sending QP's own), and the port it is on as QPInfo gives it.
type UDDest struct {
	QPN, QKey uint32
	LID       uint16
	GID       [16]byte
	// SGIDIndex is the source GID index (0: the port's link-local GID).
	SGIDIndex uint8
	HopLimit  uint8
}

// RecvWR is a receive work request.
type RecvWR struct {
	WRID uint64
	SG   []SGE
}

// QP is an RC queue pair. PostSend and PostRecv are safe for concurrent
// use; Modify is not concurrent with posting.
type QP struct {
	ctx    *Context
	pd     *PD
	qpn    uint32
	scq    *CQ
	rcq    *CQ
	cap    QPCap
	srq    *SRQ
	sigAll bool
	integ  bool
	typ    QPType
	psn    uint32

	sqBuf   []byte
	sqIO    uint64
	sqLog   uint8
	rqBuf   []byte
	rqIO    uint64
	rqLog   uint8
	rqShift uint8
	db      []byte
	dbIO    uint64

	smu     sync.Mutex
	state   QPState
	curPost uint16 // WQEBBs posted
	sqTail  uint16 // WQEBBs retired
	wrid    []uint64
	wrop    []WROpcode
	nbb     []uint8
	fmCache sq.Fence // mlx5's qp->next_fence: the fence the next WR inherits
	// postNext is mlx5_ib_post_send's local next_fence: 0 at the start of
	// each PostSend, INITIATOR_SMALL from a REG_MR or REG_MR_INTEGRITY on,
	// so that every later WR of that post inherits it (and, through
	// fmCache, the first WR of the next post).
	postNext sq.Fence
	scratch  [sq.MaxWQEBBs * sq.WQEBBSize]byte

	rmu    sync.Mutex
	rqHead uint16
	rqTail uint16
	rwrid  []uint64
}

// maxWQEBBs returns the WQEBBs the largest WR of cap takes: data WRs (a
// control, a remote address and an atomic segment, then the SGEs or the
// inline data) and REG_MR (ctrl, UMR ctrl, mkey, 64 B inline translation).
func maxWQEBBs(c *QPCap, xrc bool) int {
	data := sq.CtrlSegSize + sq.RaddrSegSize + sq.AtomicSize + max(c.MaxSendSGE*sq.DataSegSize, (4+c.MaxInline+15)&^15)
	if xrc {
		data += sq.XRCSegSize
	}
	return max(sq.WQEBBs(uint8(min((data+15)/16, 255))), 3)
}

func pow2(n int) uint8 {
	l := uint8(0)
	for 1<<l < n {
		l++
	}
	return l
}

// CreateQP creates a QP (RC, UC, UD, raw packet or an XRC initiator) in
// the RESET state. An XRC initiator needs no RecvCQ and takes no SRQ, nor
// does a raw packet QP.
func (pd *PD) CreateQP(a *QPInitAttr) (*QP, error) {
	c := pd.ctx
	cp := a.Cap
	xrc := a.Type == QPTypeXRCSend
	if a.SRQ != nil || xrc {
		cp.MaxRecvWR, cp.MaxRecvSGE = 1, 1
	}
	if a.SendCQ == nil || a.RecvCQ == nil && !xrc || xrc && a.SRQ != nil || cp.MaxSendWR <= 0 || cp.MaxRecvWR <= 0 ||
		cp.MaxSendSGE < 0 || cp.MaxRecvSGE <= 0 || cp.MaxSendSGE > int(c.caps.MaxSGE) || cp.MaxRecvSGE > int(c.caps.MaxSGE) ||
		cp.MaxInline < 0 || cp.MaxInline > int(c.caps.MaxInline) || a.Type > QPTypeRaw || a.Type == QPTypeXRCRecv || a.Type == QPTypeRaw && a.SRQ != nil {
		return nil, fmt.Errorf("create qp %+v: %w", cp, ErrInvalid)
	}
	if cp.MaxSendSGE == 0 {
		cp.MaxSendSGE = 1
	}
	bb := maxWQEBBs(&cp, xrc)
	if a.Integrity {
		bb = max(bb, 9) // REG_MR_INTEGRITY: 3 + 4 + 1 + 1 WQEBBs
	}
	if bb > sq.MaxWQEBBs {
		return nil, fmt.Errorf("create qp: WQEs of %d WQEBBs: %w", bb, ErrInvalid)
	}
	qp := &QP{ctx: c, pd: pd, scq: a.SendCQ, rcq: a.RecvCQ, cap: cp, srq: a.SRQ, sigAll: a.SigAll, integ: a.Integrity, typ: a.Type}
	qp.sqLog = pow2(cp.MaxSendWR * bb)
	qp.rqLog = pow2(cp.MaxRecvWR)
	qp.rqShift = max(pow2(cp.MaxRecvSGE*sq.DataSegSize), 4)
	if qp.sqLog > c.caps.LogMaxSQSize || qp.rqLog > c.caps.LogMaxRQSize {
		return nil, fmt.Errorf("create qp: queues of 2^%d WQEBBs and 2^%d WQEs: %w", qp.sqLog, qp.rqLog, ErrInvalid)
	}
	var err error
	if qp.sqBuf, qp.sqIO, err = c.dma(sq.WQEBBSize<<qp.sqLog, 4096); err != nil {
		return nil, fmt.Errorf("create qp: %w", err)
	}
	if qp.rqBuf, qp.rqIO, err = c.dma(1<<(qp.rqLog+qp.rqShift), 4096); err != nil {
		c.fn.FreeDMA(qp.sqIO)
		return nil, fmt.Errorf("create qp: %w", err)
	}
	if qp.db, qp.dbIO, err = c.dma(sq.DBRecHintSize, 64); err != nil {
		c.fn.FreeDMA(qp.sqIO)
		c.fn.FreeDMA(qp.rqIO)
		return nil, fmt.Errorf("create qp: %w", err)
	}
	n := 1 << qp.sqLog
	qp.wrid, qp.wrop, qp.nbb = make([]uint64, n), make([]WROpcode, n), make([]uint8, n)
	qp.rwrid = make([]uint64, 1<<qp.rqLog)
	in := ifc.NewIn(ifc.CmdCreateQP, ifc.QPInSize).Put32(ifc.QPInPD, pd.pdn).Put32(ifc.QPInSendCQ, a.SendCQ.cqn)
	if xrc {
		qp.rcq = nil
		in.Put8(ifc.QPInType, ifc.QPTypeXRC)
	} else {
		in.Put32(ifc.QPInRecvCQ, a.RecvCQ.cqn)
	}
	flags := uint32(ifc.QPFlagDBHint) // ring only when the send engine sleeps
	if a.Integrity {
		flags |= ifc.QPFlagIntegr
	}
	if a.SigPipelining {
		flags |= ifc.QPFlagDrainSigErr
	}
	if a.BlockSelfMcastLB && a.Type == QPTypeRaw {
		flags |= ifc.QPFlagBlockMcastLB
	}
	in.Put32(ifc.QPInFlags, flags)
	if a.Type == QPTypeUD {
		in.Put8(ifc.QPInType, ifc.QPTypeUD)
	}
	if a.Type == QPTypeUC {
		in.Put8(ifc.QPInType, ifc.QPTypeUC)
	}
	if a.Type == QPTypeRaw {
		in.Put8(ifc.QPInType, ifc.QPTypeRaw)
	}
	if a.SRQ != nil {
		in.Put32(ifc.QPInSRQN, a.SRQ.srqn)
	}
	in.Put8(ifc.QPInLogSQ, qp.sqLog).Put8(ifc.QPInLogRQ, qp.rqLog).Put8(ifc.QPInLogStride, qp.rqShift)
	in.Put64(ifc.QPInSQ, qp.sqIO).Put64(ifc.QPInRQ, qp.rqIO).Put64(ifc.QPInDBRec, qp.dbIO)
	out, err := c.cmd(in)
	if err != nil {
		qp.free()
		return nil, fmt.Errorf("create qp: %w", err)
	}
	qp.qpn = out.U32(ifc.QPNOff)
	qp.psn = qp.qpn * 0x10001 & 0xFFFFFF // an initial PSN of its own
	c.mu.Lock()
	c.qps[qp.qpn] = qp
	c.mu.Unlock()
	return qp, nil
}

func (qp *QP) free() {
	c := qp.ctx
	c.fn.FreeDMA(qp.sqIO)
	c.fn.FreeDMA(qp.rqIO)
	c.fn.FreeDMA(qp.dbIO)
}

// Type returns the QP's transport service.
func (qp *QP) Type() QPType { return qp.typ }

// QPN returns the QP number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Info returns what a peer needs to connect to this QP.
func (qp *QP) Info() QPInfo {
	return QPInfo{LID: qp.ctx.lid, GID: qp.ctx.gid, QPN: qp.qpn, PSN: qp.psn}
}

// State returns the QP's state as the device has it: it queries the
// device (QUERY_QP, see Query), so it says StateErr once the device moved
// the QP to ERR after an error completion, and StateSQD after a signature
// error with SigPipelining, not the state the driver last moved it to; as
// with Query, a later Modify without AttrCurState starts from it. If the
// query fails (a closed context), it returns the state the driver last
// knew.
func (qp *QP) State() QPState {
	qp.smu.Lock()
	defer qp.smu.Unlock()
	if a, err := qp.query(); err == nil {
		return a.State
	}
	return qp.state
}

// Destroy destroys the QP: outstanding work is dropped without completions.
func (qp *QP) Destroy() error {
	c := qp.ctx
	if _, err := c.cmd(ifc.NewIn(ifc.CmdDestroyQP, ifc.QPNOff+4).Put32(ifc.QPNOff, qp.qpn)); err != nil {
		return fmt.Errorf("destroy qp: %w", err)
	}
	c.mu.Lock()
	delete(c.qps, qp.qpn)
	c.mu.Unlock()
	qp.free()
	return nil
}

// Modify moves the QP to a.State, setting the attributes that transition
// takes (as ibv_modify_qp with the usual attribute mask for it).
func (qp *QP) Modify(a *QPAttr) error {
	qp.smu.Lock()
	defer qp.smu.Unlock()
	cur := qp.state
	if a.Mask&AttrCurState != 0 {
		cur = a.CurState
	}
	var op uint16
	switch {
	case a.State == StateErr:
		op = ifc.Cmd2ERR
	case a.State == StateReset:
		op = ifc.Cmd2RST
	case cur == StateReset && a.State == StateInit:
		op = ifc.CmdRST2INIT
	case cur == StateInit && a.State == StateInit:
		op = ifc.CmdINIT2INIT
	case cur == StateInit && a.State == StateRTR:
		op = ifc.CmdINIT2RTR
	case cur == StateRTR && a.State == StateRTS:
		op = ifc.CmdRTR2RTS
	case cur == StateRTS && a.State == StateRTS:
		op = ifc.CmdRTS2RTS
	case cur == StateRTS && a.State == StateSQD:
		op = ifc.CmdRTS2SQD
	case cur == StateSQD && a.State == StateRTS:
		op = ifc.CmdSQD2RTS
	default:
		return fmt.Errorf("modify qp %#x from %v to %v: %w", qp.qpn, cur, a.State, ErrQPState)
	}
	size := ifc.QPModifyGIDSize
	if qp.typ == QPTypeUD {
		size = ifc.QPModifyQKeySize
	}
	in := ifc.NewIn(op, size).Put32(ifc.QPNOff, qp.qpn)
	opt := uint32(0)
	if a.Mask&AttrAccess != 0 {
		opt |= ifc.QPOptAccess
	}
	if qp.typ == QPTypeUD && (a.Mask&AttrQKey != 0 || op == ifc.CmdRST2INIT) {
		opt |= ifc.QPOptQKey
		in.Put32(ifc.QPCQKey, a.QKey)
	}
	in.Put32(ifc.QPOptMask, opt)
	var acc uint8
	if a.Access&AccessRemoteRead != 0 {
		acc |= ifc.QPAccessRead
	}
	if a.Access&AccessRemoteWrite != 0 {
		acc |= ifc.QPAccessWrite
	}
	if a.Access&AccessRemoteAtomic != 0 {
		acc |= ifc.QPAccessAtomic
	}
	in.Put8(ifc.QPCAccess+3, acc).Put16(ifc.QPCRemoteLID, a.DestLID).Put32(ifc.QPCRemoteQPN, a.DestQPN)
	in.Put32(ifc.QPCRQPSN, a.RQPSN).Put32(ifc.QPCSQPSN, a.SQPSN)
	in.Put8(ifc.QPCMinRNR, a.MinRNRTimer).Put8(ifc.QPCTimeout, a.Timeout).Put8(ifc.QPCRetry, a.RetryCnt).Put8(ifc.QPCRNRRetry, a.RNRRetry)
	in.Put8(ifc.QPCMaxRD, a.MaxRDAtomic).Put8(ifc.QPCMaxDestRD, a.MaxDestRDAtomic).Put8(ifc.QPCMTU, uint8(a.PathMTU))
	copy(in[ifc.QPCRemoteGID:], a.DestGID[:])
	if _, err := qp.ctx.cmd(in); err != nil {
		return fmt.Errorf("modify qp %#x to %v: %w", qp.qpn, a.State, err)
	}
	qp.state = a.State
	if a.State == StateReset {
		// A fresh initial PSN for the next connection, as applications
		// pick one when they reconnect: packets of the old connection still
		// on a wire then do not fit the new one.
		qp.psn = (qp.psn*1103515245 + 12345) & 0xFFFFFF
		qp.curPost, qp.sqTail, qp.fmCache = 0, 0, 0
		qp.rmu.Lock()
		qp.rqHead, qp.rqTail = 0, 0
		qp.rmu.Unlock()
		if qp.db != nil { // an XRC target has no doorbell record
			dma.StoreBE32(qp.db[sq.DBRecRecv:], 0)
			dma.StoreBE32(qp.db[sq.DBRecSend:], 0)
		}
	}
	return nil
}

// ConnectOptions tune Connect; the zero value gives the defaults.
type ConnectOptions struct {
	Access      Access // default: remote read, write and atomic
	Timeout     uint8  // default 14 (67 ms)
	RetryCnt    uint8  // default 7
	RNRRetry    uint8  // default 7 (forever)
	MinRNRTimer uint8  // default 12 (0.64 ms)
	MaxRD       uint8  // default 16
	PathMTU     MTU    // default MTU4096
}

// Connect moves a RESET QP through INIT and RTR to RTS, connected to remote.
func (qp *QP) Connect(remote QPInfo, o *ConnectOptions) error {
	var opt ConnectOptions
	if o != nil {
		opt = *o
	}
	if opt.Access == 0 {
		opt.Access = AccessRemoteRead | AccessRemoteWrite | AccessRemoteAtomic
	}
	if opt.Timeout == 0 {
		opt.Timeout = 14
	}
	if opt.RetryCnt == 0 {
		opt.RetryCnt = 7
	}
	if opt.RNRRetry == 0 {
		opt.RNRRetry = 7
	}
	if opt.MinRNRTimer == 0 {
		opt.MinRNRTimer = 12
	}
	if opt.MaxRD == 0 {
		opt.MaxRD = 16
	}
	for _, a := range []QPAttr{
		{State: StateInit, Access: opt.Access},
		{State: StateRTR, DestLID: remote.LID, DestGID: remote.GID, PathMTU: opt.PathMTU, DestQPN: remote.QPN, RQPSN: remote.PSN,
			MinRNRTimer: opt.MinRNRTimer, MaxDestRDAtomic: opt.MaxRD},
		{State: StateRTS, SQPSN: qp.psn, Timeout: opt.Timeout, RetryCnt: opt.RetryCnt, RNRRetry: opt.RNRRetry, MaxRDAtomic: opt.MaxRD},
	} {
		if err := qp.Modify(&a); err != nil {
			return err
		}
	}
	return nil
}

// PostRecv posts receive work requests. On error it returns the index of
// the first WR not posted.
func (qp *QP) PostRecv(wrs []RecvWR) (int, error) {
	qp.smu.Lock()
	st := qp.state
	qp.smu.Unlock()
	qp.rmu.Lock()
	size := uint16(1) << qp.rqLog
	stride := 1 << qp.rqShift
	posted := 0
	var err error
	if qp.typ == QPTypeXRCSend || qp.typ == QPTypeXRCRecv {
		err = fmt.Errorf("post recv to an XRC QP (no receive queue): %w", ErrRingFull)
	} else if st == StateReset {
		err = fmt.Errorf("post recv in RESET: %w", ErrQPState)
	} else if qp.srq != nil {
		err = fmt.Errorf("post recv to a QP on SRQ %#x: %w", qp.srq.srqn, ErrRingFull)
	}
	for i := range wrs {
		if err != nil {
			break
		}
		wr := &wrs[i]
		if len(wr.SG) > qp.cap.MaxRecvSGE {
			err = fmt.Errorf("recv WR %d: %d SGEs, at most %d: %w", i, len(wr.SG), qp.cap.MaxRecvSGE, ErrTooManySGE)
			break
		}
		if qp.rqHead-qp.rqTail >= size {
			err = fmt.Errorf("recv WR %d: %w", i, ErrRingFull)
			break
		}
		slot := int(qp.rqHead & (size - 1))
		w := qp.rqBuf[slot*stride : (slot+1)*stride]
		for j, s := range wr.SG {
			sq.DataSeg(w[j*sq.DataSegSize:]).Encode(&sq.DataFields{ByteCount: s.Length, LKey: s.LKey, Addr: s.Addr})
		}
		if len(wr.SG)*sq.DataSegSize < stride {
			sq.DataSeg(w[len(wr.SG)*sq.DataSegSize:]).Encode(&sq.DataFields{LKey: uint32(klm.TerminatorLKey)})
		}
		qp.rwrid[slot] = wr.WRID
		qp.rqHead++
		posted++
	}
	head := qp.rqHead
	qp.rmu.Unlock()
	if posted > 0 {
		dma.StoreBE32(qp.db[sq.DBRecRecv:], uint32(head))
		qp.ctx.fn.RingRQ(qp.qpn)
	}
	return posted, err
}

// PostSend posts send work requests, building their WQEs as mlx5's driver
// does, and rings the doorbell once. On error it returns the index of the
// first WR not posted; the ones before it are posted.
func (qp *QP) PostSend(wrs []SendWR) (int, error) {
	qp.smu.Lock()
	posted := 0
	var err error
	switch qp.state {
	case StateRTS, StateSQD, StateErr:
	default:
		err = fmt.Errorf("post send in %v: %w", qp.state, ErrQPState)
	}
	qp.postNext = sq.FenceNone
	for i := range wrs {
		if err != nil {
			break
		}
		if err = qp.post(&wrs[i]); err != nil {
			err = fmt.Errorf("send WR %d (id %#x): %w", i, wrs[i].WRID, err)
			break
		}
		posted++
	}
	cur := qp.curPost
	qp.smu.Unlock()
	if posted > 0 {
		qp.ringSQ(cur)
	}
	return posted, err
}

// ringSQ publishes the send counter and rings the doorbell unless the
// device's activity hint says its send engine will read the counter again
// anyway (the store and the load are both sequentially consistent, and the
// device clears the hint before its last look).
func (qp *QP) ringSQ(cur uint16) {
	dma.StoreBE32(qp.db[sq.DBRecSend:], uint32(cur))
	if dma.LoadBE32(qp.db[sq.DBRecHint:]) == 0 {
		qp.ctx.fn.RingSQ(qp.qpn)
	}
}

// fence returns the fence of a WR other than a registration as current
// mlx5_ib_post_send chooses it (docs/CONFORMANCE.md): the inherited next
// fence (INITIATOR_SMALL after a memory registration), SMALL_AND_FENCE
// with SendFence on top of it, FENCE with SendFence alone. LOCAL_INV
// follows the same rule (no strong ordering, as 4.x kernels had).
func (qp *QP) fence(wr *SendWR) sq.Fence {
	fenced := wr.Flags&SendFence != 0
	if qp.fmCache != 0 {
		if fenced {
			return sq.FenceSmallAndFence
		}
		return qp.fmCache
	}
	if fenced {
		return sq.FenceFence
	}
	return sq.FenceNone
}

// umrFence returns the fence of UMRs that mlx5 takes from the umr_fence cap.
func (qp *QP) umrFence() sq.Fence {
	switch qp.ctx.caps.UMRFence {
	case 0:
		return sq.FenceStrongOrdering
	case 1:
		return sq.FenceInitiatorSmall
	}
	return sq.FenceNone
}

// post builds one WR's WQEs and copies them into the ring. Each WR family
// builds its segments in its own file and finishes every WQE through
// postWQE: SEND, RDMA and atomics in wr_rdma.go, fast registration in
// wr_umr.go, local invalidate in wr_inv.go, the integrity registrations
// in wr_integrity.go and the mlx5dv mkey configure in wr_mkey.go. Called
// with smu held.
func (qp *QP) post(wr *SendWR) error {
	switch wr.Opcode {
	case WRRegMRIntegrity, WRRegSigMR:
		return qp.postIntegrity(wr)
	case WRMkeyConfigure:
		return qp.postMkeyConfigure(wr)
	case WRRegMR:
		return qp.postRegMR(wr)
	case WRLocalInv:
		return qp.postLocalInv(wr)
	case WRBindMW:
		return qp.postBindMW(wr)
	}
	if wr.Opcode >= numWROpcodes {
		return ErrBadOpcode
	}
	return qp.postRDMA(wr)
}

// postWQE finishes a WQE built in w: it writes the control segment (ds
// 16-byte segments in all, the segments after the control segment
// already in w) and copies the WQE into the ring. The WQE asks for a CQE
// when wr is signaled or the QP signals all; it is solicited when se is
// or wr is. Called with smu held.
func (qp *QP) postWQE(wr *SendWR, w []byte, op sq.Opcode, ds uint8, fence sq.Fence, imm uint32, se bool) error {
	nbb := sq.WQEBBs(ds)
	if !qp.room(nbb) {
		return ErrRingFull
	}
	ce := uint8(0)
	if wr.Flags&SendSignaled != 0 || qp.sigAll {
		ce = sq.CECQUpdate
	}
	sq.CtrlSeg(w).Encode(&sq.CtrlFields{WQEIndex: qp.curPost, Opcode: op, QPN: qp.qpn, DS: ds, Fence: fence, CE: ce,
		SE: se || wr.Flags&SendSolicited != 0, Imm: imm})
	clear(w[int(ds)*sq.SegSize : nbb*sq.WQEBBSize]) // the last WQEBB's unused segments
	qp.put(w[:nbb*sq.WQEBBSize], wr.WRID, wr.Opcode)
	return nil
}

// room reports whether nbb more WQEBBs fit in the send queue.
func (qp *QP) room(nbb int) bool {
	return qp.sqBuf != nil && qp.curPost+uint16(nbb)-qp.sqTail <= uint16(1)<<qp.sqLog
}

// put copies a whole WQE (w, whole WQEBBs) into the ring at the producer
// counter, wrapping at the ring's end, records the work request it
// completes as, and moves the counter on. The caller checked room.
func (qp *QP) put(w []byte, wrid uint64, op WROpcode) {
	size := uint16(1) << qp.sqLog
	slot := qp.curPost & (size - 1)
	k := copy(qp.sqBuf[int(slot)*sq.WQEBBSize:], w)
	copy(qp.sqBuf, w[k:])
	nbb := len(w) / sq.WQEBBSize
	qp.wrid[slot], qp.wrop[slot], qp.nbb[slot] = wrid, op, uint8(nbb)
	qp.curPost += uint16(nbb)
}

// sendDone turns a send CQE (of opcode op) into the work completion wc and
// retires the WQEs up to it. The caller holds smu.
func (qp *QP) sendDone(e cq.CQE, op cq.Opcode, wc *WC) {
	size := uint16(1) << qp.sqLog
	counter := e.WQECounter()
	slot := counter & (size - 1)
	*wc = WC{WRID: qp.wrid[slot], QPN: qp.qpn}
	switch qp.wrop[slot] {
	case WRRegMR, WRRegMRIntegrity, WRRegSigMR:
		wc.Opcode = WCRegMR
	case WRMkeyConfigure:
		wc.Opcode = WCUMR
	case WRLocalInv:
		wc.Opcode = WCLocalInv
	case WRBindMW:
		wc.Opcode = WCBindMW
	default:
		wc.Opcode = wcOpcode(sq.Opcode(e.WQEOpcode()))
	}
	if op == cq.OpReqErr {
		wc.Status, wc.VendorErr = statusOf(e.Syndrome()), e.VendorSyndrome()
	} else {
		wc.ByteLen = e.ByteCount()
	}
	qp.sqTail = counter + uint16(qp.nbb[slot])
}

// recvDone turns a receive CQE (of opcode op) into the work completion wc.
func (qp *QP) recvDone(e cq.CQE, op cq.Opcode, wc *WC) {
	counter := e.WQECounter()
	if qp.srq != nil {
		*wc = WC{WRID: qp.srq.done(counter), QPN: qp.qpn, Opcode: WCRecv}
	} else {
		qp.rmu.Lock()
		defer qp.rmu.Unlock()
		slot := counter & (1<<qp.rqLog - 1)
		*wc = WC{WRID: qp.rwrid[slot], QPN: qp.qpn, Opcode: WCRecv}
		qp.rqTail = counter + 1
	}
	recvFields(e, op, wc)
	if qp.typ == QPTypeUD && op != cq.OpRespErr {
		f := e.Fields()
		wc.SrcQP, wc.GRH = f.SrcQP, f.GRH
	}
}

// recvFields fills in what a receive CQE says of any QP: the length, the
// status, the immediate or invalidated key.
func recvFields(e cq.CQE, op cq.Opcode, wc *WC) {
	if op != cq.OpRespErr {
		wc.ByteLen = e.ByteCount()
	}
	switch op {
	case cq.OpRespErr:
		wc.Status, wc.VendorErr = statusOf(e.Syndrome()), e.VendorSyndrome()
	case cq.OpRespSendImm:
		wc.Imm, wc.WithImm = e.Immediate(), true
	case cq.OpRespSendInv:
		wc.Imm, wc.WithInv = e.Immediate(), true
	case cq.OpRespWriteImm:
		wc.Imm, wc.WithImm, wc.Opcode = e.Immediate(), true, WCRecvRDMAWithImm
	}
}

// PostRawWQE copies a WQE the caller built (control segment and all, as
// mlx5dv_wr_raw_wqe) into the send queue, in the WQEBBs its DS field
// covers, and rings the doorbell. The driver records wrid for the WQE's slot; the bytes are
// the device's to judge.
func (qp *QP) PostRawWQE(wqe []byte, wrid uint64) error {
	// The WQE occupies what its DS says, as the device reads it: bytes
	// beyond are dropped, missing ones are zeros; a DS of 0 is one WQEBB
	// (the device refuses it and moves on by one).
	nbb := 1
	if len(wqe) >= 8 {
		if ds := wqe[7] & 0x3F; ds > 0 {
			nbb = sq.WQEBBs(ds)
		}
	}
	wqe = wqe[:min(len(wqe), nbb*sq.WQEBBSize)]
	if len(wqe) == 0 || nbb > sq.MaxWQEBBs {
		return fmt.Errorf("raw WQE of %d bytes: %w", len(wqe), ErrInvalid)
	}
	qp.smu.Lock()
	switch qp.state {
	case StateRTS, StateSQD, StateErr:
	default:
		qp.smu.Unlock()
		return fmt.Errorf("post raw WQE in %v: %w", qp.state, ErrQPState)
	}
	if !qp.room(nbb) {
		qp.smu.Unlock()
		return ErrRingFull
	}
	w := qp.scratch[:nbb*sq.WQEBBSize]
	clear(w)
	copy(w, wqe)
	qp.put(w, wrid, WRSend)
	cur := qp.curPost
	qp.smu.Unlock()
	qp.ringSQ(cur)
	return nil
}

// CurPost returns the send queue's producer counter: the WQE index the
// next WQE gets (for building raw WQEs).
func (qp *QP) CurPost() uint16 {
	qp.smu.Lock()
	defer qp.smu.Unlock()
	return qp.curPost
}

// SendEngineAwake reports the device's send activity hint (the doorbell
// record's word 2, DEVICE.md): true while the device's send engine for
// this QP will read the send counter again without a doorbell, false once
// it sleeps until the next one.
func (qp *QP) SendEngineAwake() bool { return qp.db != nil && dma.LoadBE32(qp.db[sq.DBRecHint:]) != 0 }

// PostedWQE is a copy of a posted send WQE, for tools that show what the
// driver wrote (hcasim demo).
type PostedWQE struct {
	Index uint16
	Ctrl  sq.CtrlFields
	Bytes []byte
}

// PostedWQEs returns copies of the WQEs posted from index from to the
// current producer counter (at most the ring's size).
func (qp *QP) PostedWQEs(from uint16) []PostedWQE {
	qp.smu.Lock()
	defer qp.smu.Unlock()
	size := uint16(1) << qp.sqLog
	var out []PostedWQE
	for i := from; i != qp.curPost && uint16(i-from) < size; {
		slot := i & (size - 1)
		n := int(qp.nbb[slot])
		if n == 0 {
			break
		}
		b := make([]byte, n*sq.WQEBBSize)
		start := int(slot) * sq.WQEBBSize
		k := copy(b, qp.sqBuf[start:])
		copy(b[k:], qp.sqBuf)
		f := sq.CtrlSeg(b).Fields()
		out = append(out, PostedWQE{Index: i, Ctrl: f, Bytes: b[:int(f.DS)*sq.SegSize]})
		i += uint16(n)
	}
	return out
}
