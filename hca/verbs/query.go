package verbs

import (
	"fmt"
	"github.com/hcasim/hcasim/hca/ifc"
)

// qpStateOf maps QUERY_QP's state byte (mlx5's MLX5_QP_STATE_*) to a
// QPState.
func qpStateOf(b uint8) (QPState, bool) {
	switch ifc.QPState(b) {
	case ifc.StateRST:
		return StateReset, true
	case ifc.StateINIT:
		return StateInit, true
	case ifc.StateRTR:
		return StateRTR, true
	case ifc.StateRTS:
		return StateRTS, true
	case ifc.StateSQD:
		return StateSQD, true
	case ifc.StateERR:
		return StateErr, true
	}
	return 0, false
}

// Query asks the device for the QP's state and attributes (QUERY_QP, as
// ibv_query_qp): the state the device has the QP in, which is not always
// the one the driver last moved it to, since the device moves a QP to ERR
// itself on an error completion or a fatal event, and to SQD on a
// signature error with SigPipelining. Mask says nothing; CurState is
// State.
//
// Like mlx5's query, it also updates the state the driver keeps: a later
// Modify without AttrCurState starts from the state queried.
func (qp *QP) Query() (QPAttr, error) {
	qp.smu.Lock()
	defer qp.smu.Unlock()
	return qp.query()
}

// query runs QUERY_QP. Called with smu held.
func (qp *QP) query() (QPAttr, error) {
	out, err := qp.ctx.cmd(ifc.NewIn(ifc.CmdQueryQP, ifc.QPNOff+4).Put32(ifc.QPNOff, qp.qpn))
	if err != nil {
		return QPAttr{}, fmt.Errorf("query qp %#x: %w", qp.qpn, err)
	}
	if len(out) < ifc.QPOutSize {
		return QPAttr{}, fmt.Errorf("query qp %#x: output of %d bytes, want %d: %w", qp.qpn, len(out), ifc.QPOutSize, ErrInvalid)
	}
	o := ifc.In(out)
	st, ok := qpStateOf(o.U8(ifc.QPOutState))
	if !ok {
		return QPAttr{}, fmt.Errorf("query qp %#x: device state %d has no verbs name: %w", qp.qpn, o.U8(ifc.QPOutState), ErrInvalid)
	}
	a := QPAttr{State: st, CurState: st,
		DestLID: o.U16(ifc.QPCRemoteLID), DestQPN: o.U32(ifc.QPCRemoteQPN), RQPSN: o.U32(ifc.QPCRQPSN), SQPSN: o.U32(ifc.QPCSQPSN),
		MinRNRTimer: o.U8(ifc.QPCMinRNR), Timeout: o.U8(ifc.QPCTimeout), RetryCnt: o.U8(ifc.QPCRetry), RNRRetry: o.U8(ifc.QPCRNRRetry),
		MaxRDAtomic: o.U8(ifc.QPCMaxRD), MaxDestRDAtomic: o.U8(ifc.QPCMaxDestRD), PathMTU: MTU(o.U8(ifc.QPCMTU))}
	acc := o.U8(ifc.QPCAccess + 3)
	if acc&ifc.QPAccessRead != 0 {
		a.Access |= AccessRemoteRead
	}
	if acc&ifc.QPAccessWrite != 0 {
		a.Access |= AccessRemoteWrite
	}
	if acc&ifc.QPAccessAtomic != 0 {
		a.Access |= AccessRemoteAtomic
	}
	copy(a.DestGID[:], o[ifc.QPCRemoteGID:ifc.QPCRemoteGID+16])
	qp.state = st
	return a, nil
}
