package verbs

import (
	"fmt"

	"github.com/hcasim/hcasim/hca"
)

// qpStateOf maps QUERY_QP's state byte (mlx5's MLX5_QP_STATE_*) to a
// QPState.
func qpStateOf(b uint8) (QPState, bool) {
	switch hca.QPState(b) {
	case hca.StateRST:
		return StateReset, true
	case hca.StateINIT:
		return StateInit, true
	case hca.StateRTR:
		return StateRTR, true
	case hca.StateRTS:
		return StateRTS, true
	case hca.StateSQD:
		return StateSQD, true
	case hca.StateERR:
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
	out, err := qp.ctx.cmd(hca.NewIn(hca.CmdQueryQP, hca.QPNOff+4).Put32(hca.QPNOff, qp.qpn))
	if err != nil {
		return QPAttr{}, fmt.Errorf("query qp %#x: %w", qp.qpn, err)
	}
	if len(out) < hca.QPOutSize {
		return QPAttr{}, fmt.Errorf("query qp %#x: output of %d bytes, want %d: %w", qp.qpn, len(out), hca.QPOutSize, ErrInvalid)
	}
	o := hca.In(out)
	st, ok := qpStateOf(o.U8(hca.QPOutState))
	if !ok {
		return QPAttr{}, fmt.Errorf("query qp %#x: device state %d has no verbs name: %w", qp.qpn, o.U8(hca.QPOutState), ErrInvalid)
	}
	a := QPAttr{State: st, CurState: st,
		DestLID: o.U16(hca.QPCRemoteLID), DestQPN: o.U32(hca.QPCRemoteQPN), RQPSN: o.U32(hca.QPCRQPSN), SQPSN: o.U32(hca.QPCSQPSN),
		MinRNRTimer: o.U8(hca.QPCMinRNR), Timeout: o.U8(hca.QPCTimeout), RetryCnt: o.U8(hca.QPCRetry), RNRRetry: o.U8(hca.QPCRNRRetry),
		MaxRDAtomic: o.U8(hca.QPCMaxRD), MaxDestRDAtomic: o.U8(hca.QPCMaxDestRD), PathMTU: MTU(o.U8(hca.QPCMTU))}
	acc := o.U8(hca.QPCAccess + 3)
	if acc&hca.QPAccessRead != 0 {
		a.Access |= AccessRemoteRead
	}
	if acc&hca.QPAccessWrite != 0 {
		a.Access |= AccessRemoteWrite
	}
	if acc&hca.QPAccessAtomic != 0 {
		a.Access |= AccessRemoteAtomic
	}
	copy(a.DestGID[:], o[hca.QPCRemoteGID:hca.QPCRemoteGID+16])
	qp.state = st
	return a, nil
}
